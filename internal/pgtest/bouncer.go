package pgtest

import (
	"context"
	"errors"
	"net/url"
	"testing"

	"github.com/idemkit/idem/internal/pgtest/pgcluster"
)

// StartBouncer starts PgBouncer with pool_mode = transaction in front of
// the server of connString (a postgres:// URL over TCP), on a free port of
// 127.0.0.1, for the life of t (see [pgcluster.StartBouncer]). It returns
// connString pointed at PgBouncer, with pgx's statement cache turned off.
// Without the pgbouncer binary, or on a system other than Linux, it skips
// t, or fails it when CI is true.
func StartBouncer(t testing.TB, connString string) string {
	t.Helper()
	b, via, err := pgcluster.StartBouncer(context.Background(), connString)
	var ue *pgcluster.UnavailableError
	if errors.As(err, &ue) {
		fail(t, &UnavailableError{Reasons: ue.Reasons})
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return via
}

// StartBouncerDroppingStatements starts PgBouncer as StartBouncer does, on
// a new database, and returns its URL with pgx's default query mode, which
// prepares statements by name: PgBouncer in transaction mode before 1.21
// does not keep them, and the binaries must refuse such a URL at start.
func StartBouncerDroppingStatements(t testing.TB) string {
	t.Helper()
	u, err := url.Parse(StartBouncer(t, NewDatabase(t)))
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Del("default_query_exec_mode")
	u.RawQuery = q.Encode()
	return u.String()
}
