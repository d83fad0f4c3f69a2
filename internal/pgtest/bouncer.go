package pgtest

import (
	"context"
	"errors"
	"testing"

	"github.com/idemkit/idem/internal/pgcluster"
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
