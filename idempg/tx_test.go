package idempg_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idempg"
)

// conflicted asks a lease whether its transaction hit a conflict.
func conflicted(t testing.TB, l idem.Lease) bool {
	t.Helper()
	cr, ok := l.(idem.ConflictReporter)
	if !ok {
		t.Fatalf("the lease does not implement idem.ConflictReporter")
	}
	return cr.Conflicted()
}

// createDoctors creates the on-call table of the write-skew example: both
// doctors on call, and at least one must stay.
func createDoctors(t testing.TB, store *idempg.Store) {
	t.Helper()
	_, err := store.Pool().Exec(context.Background(), `
CREATE TABLE doctors (name text PRIMARY KEY, on_call boolean NOT NULL);
INSERT INTO doctors VALUES ('alice', true), ('bob', true)`)
	if err != nil {
		t.Fatalf("create doctors: %v", err)
	}
}

// TestConflictReporter runs two leases into a serialization failure and
// into a deadlock: exactly the one that failed reports the conflict, its
// Complete fails, and its writes roll back.
func TestConflictReporter(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		cfg  *idempg.Config
		// run makes the two leases' transactions conflict. It returns the
		// errors of each lease's statements (nil if they all succeeded).
		run func(t *testing.T, store *idempg.Store, a, b context.Context) (errA, errB error)
	}{
		{
			// Write skew: both read two doctors on call, each takes one off.
			name: "SerializationFailure",
			cfg:  &idempg.Config{IsoLevel: pgx.Serializable},
			run: func(t *testing.T, store *idempg.Store, a, b context.Context) (error, error) {
				offCall := func(ctx context.Context, name string) error {
					tx, err := idempg.TxFromContext(ctx)
					if err != nil {
						return err
					}
					_, err = tx.Exec(ctx, `UPDATE doctors SET on_call = false WHERE name = $1`, name)
					return err
				}
				onCall := func(ctx context.Context) int {
					tx, err := idempg.TxFromContext(ctx)
					if err != nil {
						t.Fatalf("TxFromContext: %v", err)
					}
					var n int
					if err := tx.QueryRow(ctx, `SELECT count(*) FROM doctors WHERE on_call`).Scan(&n); err != nil {
						t.Fatalf("read doctors: %v", err)
					}
					return n
				}
				if onCall(a) != 2 || onCall(b) != 2 {
					t.Fatalf("both transactions must see two doctors on call")
				}
				return offCall(a, "alice"), offCall(b, "bob")
			},
		},
		{
			// Each holds one row and asks for the other's.
			name: "Deadlock",
			run: func(t *testing.T, store *idempg.Store, a, b context.Context) (error, error) {
				update := func(ctx context.Context, name string) error {
					tx, err := idempg.TxFromContext(ctx)
					if err != nil {
						return err
					}
					_, err = tx.Exec(ctx, `UPDATE doctors SET on_call = NOT on_call WHERE name = $1`, name)
					return err
				}
				if err := update(a, "alice"); err != nil {
					t.Fatalf("a's first update: %v", err)
				}
				if err := update(b, "bob"); err != nil {
					t.Fatalf("b's first update: %v", err)
				}
				errA := make(chan error, 1)
				go func() { errA <- update(a, "bob") }()
				waitBlocked(t, store.Pool(), backendPID(t, a))
				errB := update(b, "alice") // the server finds the cycle after deadlock_timeout
				return <-errA, errB
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			store := setup(t, tt.cfg)
			createDoctors(t, store)
			sa, sb := newScope("alice"), newScope("bob")
			la := mustLease(t, store, params(idem.ModeAtomic, sa, "a", epoch))
			lb := mustLease(t, store, params(idem.ModeAtomic, sb, "b", epoch))
			ctxA, ctxB := la.Context(context.Background()), lb.Context(context.Background())
			if err := write(ctxA, sa.Key); err != nil {
				t.Fatalf("a's business write: %v", err)
			}
			if err := write(ctxB, sb.Key); err != nil {
				t.Fatalf("b's business write: %v", err)
			}
			if conflicted(t, la) || conflicted(t, lb) {
				t.Fatalf("a lease reports a conflict before any")
			}
			errA, errB := tt.run(t, store, ctxA, ctxB)
			t.Logf("statement errors: a=%v b=%v", errA, errB)

			completeA := la.Complete(context.Background(), response("{}"))
			completeB := lb.Complete(context.Background(), response("{}"))
			outcomes := []struct {
				name      string
				lease     idem.Lease
				scope     idem.Scope
				stmtErr   error
				complete  error
				committed bool
			}{
				{"a", la, sa, errA, completeA, completeA == nil},
				{"b", lb, sb, errB, completeB, completeB == nil},
			}
			winners := 0
			for _, o := range outcomes {
				if o.committed {
					winners++
					if conflicted(t, o.lease) || o.stmtErr != nil {
						t.Errorf("%s committed but reports conflict %v, statement error %v", o.name, conflicted(t, o.lease), o.stmtErr)
					}
					if n := countRows(t, store, o.scope.Key); n != 1 {
						t.Errorf("%s committed %d business rows, want 1", o.name, n)
					}
					continue
				}
				if !conflicted(t, o.lease) {
					t.Errorf("%s failed (statement %v, complete %v) without reporting a conflict", o.name, o.stmtErr, o.complete)
				}
				if errors.Is(o.complete, idem.ErrLeaseLost) {
					t.Errorf("%s's Complete = %v; a conflict is not a lost lease", o.name, o.complete)
				}
				if n := countRows(t, store, o.scope.Key); n != 0 {
					t.Errorf("%s failed but committed %d business rows", o.name, n)
				}
				// The conflicted key is free for the rerun.
				complete(t, mustLease(t, store, params(idem.ModeAtomic, o.scope, "a", epoch)), "{}")
			}
			if winners != 1 {
				t.Errorf("%d transactions committed, want exactly 1", winners)
			}
		})
	}
}
