//go:build !linux

package pgtest

import "testing"

// StartBouncer would start PgBouncer in front of connString. The tests
// start it like a throwaway cluster, which needs Linux; here it skips t, or
// fails it when CI is true.
func StartBouncer(t testing.TB, connString string) string {
	t.Helper()
	fail(t, errNoCluster())
	return ""
}
