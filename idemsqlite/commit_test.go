package idemsqlite_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/idemkit/idem/idemsqlite"
	"github.com/idemkit/idem/idemstore"
)

// TestRefusedCommitCommitsNothingLater: a COMMIT that SQLite refuses and
// leaves open (here a deferred foreign key of the application's business
// tables, violated by the handler's write) is rolled back at once. The
// lease's Complete fails, nothing of the transaction is ever committed, the
// write connection is usable by the next claim, and in ModeAtomic the key
// is free again, since its claim was in the refused transaction.
func TestRefusedCommitCommitsNothingLater(t *testing.T) {
	t.Parallel()
	for _, twoPhase := range []bool{false, true} {
		name := "Atomic"
		if twoPhase {
			name = "TwoPhase"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			store := openStore(t)
			if _, err := store.DB().ExecContext(ctx, `CREATE TABLE accounts (id TEXT PRIMARY KEY);
CREATE TABLE charges (account TEXT NOT NULL REFERENCES accounts (id) DEFERRABLE INITIALLY DEFERRED)`); err != nil {
				t.Fatalf("create business tables: %v", err)
			}
			now := time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)
			params := func(key string) idemstore.ClaimParams {
				return idemstore.ClaimParams{
					Scope: idemstore.Scope{ClientID: "alice", Key: key}, Method: http.MethodPost, Path: "/v1/charges",
					RequestHash: []byte("hash-" + key), TwoPhase: twoPhase, Now: now,
					LockTimeout: time.Minute, Retention: 24 * time.Hour,
				}
			}
			lease := func(key string) idemstore.Lease {
				t.Helper()
				res, err := store.Claim(ctx, params(key))
				if err != nil {
					t.Fatalf("Claim(%s): %v", key, err)
				}
				if res.Lease == nil {
					t.Fatalf("Claim(%s) = record %+v; want a lease", key, res.Record)
				}
				return res.Lease
			}
			charge := func(l idemstore.Lease, account string) {
				t.Helper()
				lctx := l.Context(ctx)
				tx, err := idemsqlite.TxFromContext(lctx)
				if err != nil {
					t.Fatalf("TxFromContext: %v", err)
				}
				if _, err := tx.ExecContext(lctx, `INSERT INTO charges (account) VALUES (?)`, account); err != nil {
					t.Fatalf("insert charge of %s: %v", account, err)
				}
			}
			charges := func() int {
				t.Helper()
				var n int
				if err := store.ReadDB().QueryRowContext(ctx, `SELECT count(*) FROM charges`).Scan(&n); err != nil {
					t.Fatalf("count charges: %v", err)
				}
				return n
			}
			ok := &idemstore.Response{StatusCode: http.StatusCreated, Header: http.Header{}, Body: []byte(`{}`)}

			// The charge names no account: the deferred key refuses the
			// COMMIT of the response.
			refused := lease("k1")
			charge(refused, "missing")
			if err := refused.Complete(ctx, ok); err == nil {
				t.Fatal("Complete of a transaction that breaks a deferred foreign key = nil; want the refused COMMIT")
			}

			// The next claim takes the write connection: refused's
			// transaction must be gone from it, not open under the claim.
			if _, err := store.DB().ExecContext(ctx, `INSERT INTO accounts (id) VALUES ('acct')`); err != nil {
				t.Fatalf("write after the refused COMMIT: %v", err)
			}
			next := lease("k2")
			charge(next, "acct")
			if err := next.Complete(ctx, ok); err != nil {
				t.Fatalf("Complete of a claim after the refused COMMIT: %v", err)
			}
			if n := charges(); n != 1 {
				t.Errorf("%d charges committed; want 1, the second claim's: the refused one committed with it", n)
			}
			rec, err := store.GetKey(ctx, params("k1").Scope)
			switch {
			case !twoPhase && !errors.Is(err, idemstore.ErrKeyNotFound):
				t.Errorf("GetKey(k1) after its refused COMMIT = %+v, %v; want ErrKeyNotFound: its claim was in that transaction", rec, err)
			case twoPhase && (err != nil || rec.Status != idemstore.StatusInFlight):
				t.Errorf("GetKey(k1) after its refused COMMIT = %+v, %v; want the claim, still in flight, without a response", rec, err)
			}
			if !twoPhase {
				again := lease("k1")
				if err := again.Release(ctx); err != nil {
					t.Errorf("Release of k1 claimed again: %v", err)
				}
			}
		})
	}
}
