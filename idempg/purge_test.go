package idempg_test

import (
	"context"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idempg"
)

func keyCount(t testing.TB, store *idempg.Store) int {
	t.Helper()
	var n int
	if err := store.Pool().QueryRow(context.Background(), `SELECT count(*) FROM idempotency_keys`).Scan(&n); err != nil {
		t.Fatalf("count keys: %v", err)
	}
	return n
}

func TestPurge(t *testing.T) {
	t.Parallel()
	const old, fresh, batch = 10, 3, 3
	store := setup(t, nil)
	cutoff := epoch.Add(time.Hour)
	for i := range old + fresh {
		now := epoch
		if i >= old {
			now = epoch.Add(2 * time.Hour)
		}
		complete(t, mustLease(t, store, params(idem.ModeTwoPhase, newScope("alice"), "a", now)), "{}")
	}
	// An old key being replaced by a request in flight: its row is locked
	// and the purge must skip it rather than wait.
	busy := newScope("alice")
	complete(t, mustLease(t, store, params(idem.ModeAtomic, busy, "a", epoch)), "{}")
	holder := mustLease(t, store, params(idem.ModeAtomic, busy, "b", epoch.Add(retention+time.Second)))

	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	n, err := store.Purge(ctx, idempg.PurgeParams{Before: cutoff, BatchSize: batch})
	if err != nil {
		t.Fatalf("Purge: %v", err)
	}
	if n != old {
		t.Errorf("Purge deleted %d keys, want the %d old ones", n, old)
	}
	complete(t, holder, `{"replaced":true}`)
	if got := keyCount(t, store); got != fresh+1 {
		t.Errorf("%d keys left, want %d fresh and the replaced one", got, fresh)
	}
	rec := mustRecord(t, store, params(idem.ModeAtomic, busy, "b", epoch.Add(retention+2*time.Second)))
	if string(rec.Response.Body) != `{"replaced":true}` {
		t.Errorf("the replaced key holds %q, want the holder's response", rec.Response.Body)
	}

	// Nothing is left to purge before the cutoff.
	if n, err := store.Purge(ctx, idempg.PurgeParams{Before: cutoff}); err != nil || n != 0 {
		t.Errorf("second Purge = %d, %v; want 0, nil", n, err)
	}
	if _, err := store.Purge(ctx, idempg.PurgeParams{}); err == nil {
		t.Errorf("Purge without Before succeeded; want an error")
	}
}
