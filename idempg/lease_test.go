package idempg_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idempg"
	"github.com/idemkit/idem/idemstore"
)

// TestEndedLeaseReturnsErrLeaseEnded ends a lease of every kind, by
// Complete and by Release, and checks what each later call returns, as
// ErrLeaseEnded documents it.
func TestEndedLeaseReturnsErrLeaseEnded(t *testing.T) {
	t.Parallel()
	session := setup(t, nil)
	pooled := setup(t, &idempg.Config{TransactionPooling: true})
	kinds := []struct {
		name  string
		store *idempg.Store
		// claim returns a lease of the kind on store.
		claim func(t *testing.T, ctx context.Context, p idemstore.ClaimParams) idemstore.Lease
	}{
		{"SessionLock", session, func(t *testing.T, _ context.Context, p idemstore.ClaimParams) idemstore.Lease {
			return mustLease(t, session, p)
		}},
		{"ClaimTransaction", pooled, func(t *testing.T, _ context.Context, p idemstore.ClaimParams) idemstore.Lease {
			return mustLease(t, pooled, p)
		}},
		{"StartedRow", session, func(t *testing.T, _ context.Context, p idemstore.ClaimParams) idemstore.Lease {
			p.TwoPhase = true
			return mustLease(t, session, p)
		}},
		{"CallerTransaction", session, func(t *testing.T, ctx context.Context, p idemstore.ClaimParams) idemstore.Lease {
			tx, err := session.Pool().Begin(ctx)
			if err != nil {
				t.Fatalf("begin: %v", err)
			}
			t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
			res, err := session.ClaimTx(ctx, tx, p)
			if err != nil || res.Lease == nil {
				t.Fatalf("ClaimTx = %+v, %v; want a lease", res, err)
			}
			return res.Lease
		}},
	}
	ends := []struct {
		name string
		end  func(ctx context.Context, l idemstore.Lease) error
	}{
		{"Complete", func(ctx context.Context, l idemstore.Lease) error { return l.Complete(ctx, response("{}")) }},
		{"Release", func(ctx context.Context, l idemstore.Lease) error { return l.Release(ctx) }},
	}
	for _, kind := range kinds {
		for _, end := range ends {
			t.Run(kind.name+"/"+end.name, func(t *testing.T) {
				t.Parallel()
				ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
				defer cancel()
				l := kind.claim(t, ctx, params(idem.ModeAtomic, newScope("alice"), "a", epoch))
				lctx := l.Context(ctx)
				tx, err := idempg.TxFromContext(lctx)
				if err != nil {
					t.Fatalf("TxFromContext: %v", err)
				}
				if err := end.end(ctx, l); err != nil {
					t.Fatalf("%s: %v", end.name, err)
				}
				if _, err := idempg.TxFromContext(lctx); err != idempg.ErrLeaseEnded {
					t.Errorf("TxFromContext after %s = %v, want ErrLeaseEnded itself", end.name, err)
				}
				if _, err := tx.Exec(ctx, `SELECT 1`); !errors.Is(err, pgx.ErrTxClosed) {
					t.Errorf("a statement after %s = %v, want pgx.ErrTxClosed", end.name, err)
				}
				if err := l.Complete(ctx, response("{}")); !errors.Is(err, idempg.ErrLeaseEnded) {
					t.Errorf("Complete after %s = %v, want ErrLeaseEnded", end.name, err)
				}
				if err := l.Release(ctx); !errors.Is(err, idempg.ErrLeaseEnded) {
					t.Errorf("Release after %s = %v, want ErrLeaseEnded", end.name, err)
				}
			})
		}
	}
}
