package idempg_test

import (
	"context"
	"net/url"
	"testing"

	"github.com/idemkit/idem/idempg"
	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/internal/pgtest"
)

// The tests of this file run through a real PgBouncer in pool_mode =
// transaction, with Config.TransactionPooling: what the option promises is
// shown against the pooler it is for, not against a direct connection.

// TestConformanceThroughPgBouncer runs the store conformance suite through
// PgBouncer. Each store gets a database of its own: PgBouncer cannot pass a
// search_path at connect time, which the direct run uses to share one.
func TestConformanceThroughPgBouncer(t *testing.T) {
	t.Parallel()
	bouncer := pgtest.StartBouncer(t, pgtest.NewDatabase(t))
	idemtest.RunStoreTests(t, idemtest.Harness{
		NewStore: func(t *testing.T) idemstore.Store {
			return setupOn(t, newPool(t, throughBouncer(t, bouncer), 8), &idempg.Config{TransactionPooling: true})
		},
		Write: func(ctx context.Context, _ idemstore.Store, value string) error {
			return write(ctx, value)
		},
		Count: func(t *testing.T, s idemstore.Store, value string) int {
			return countRows(t, s.(*idempg.Store), value)
		},
	})
}

// TestRoundTripsThroughPgBouncer counts the round trips of each step of a
// request through PgBouncer: the same as on a direct connection with
// TransactionPooling.
func TestRoundTripsThroughPgBouncer(t *testing.T) {
	t.Parallel()
	bouncer := pgtest.StartBouncer(t, pgtest.NewDatabase(t))
	testRoundTrips(t, throughBouncer(t, bouncer), &idempg.Config{TransactionPooling: true})
}

// throughBouncer creates a new database on the server behind the PgBouncer
// at bouncer and returns the URL that reaches it through PgBouncer.
func throughBouncer(t *testing.T, bouncer string) string {
	t.Helper()
	direct, err := url.Parse(pgtest.NewDatabase(t))
	if err != nil {
		t.Fatalf("parse the database URL: %v", err)
	}
	u, err := url.Parse(bouncer)
	if err != nil {
		t.Fatalf("parse the PgBouncer URL: %v", err)
	}
	u.Path = direct.Path
	return u.String()
}
