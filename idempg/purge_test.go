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
	// An old key whose row another transaction holds locked: the purge
	// skips it rather than wait.
	busy := newScope("alice")
	complete(t, mustLease(t, store, params(idem.ModeTwoPhase, busy, "a", epoch)), "{}")
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	locker, err := store.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer locker.Rollback(context.Background())
	if _, err := locker.Exec(ctx, `SELECT 1 FROM idempotency_keys WHERE client_id = $1 AND idempotency_key = $2 FOR UPDATE`, busy.ClientID, busy.Key); err != nil {
		t.Fatal(err)
	}

	n, err := store.Purge(ctx, idempg.PurgeParams{Before: cutoff, BatchSize: batch})
	if err != nil {
		t.Fatalf("Purge: %v", err)
	}
	if n != old {
		t.Errorf("Purge deleted %d keys, want the %d old unlocked ones", n, old)
	}
	if got := keyCount(t, store); got != fresh+1 {
		t.Errorf("%d keys left, want %d fresh and the locked one", got, fresh)
	}
	if err := locker.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	// Once unlocked, the old key goes too, and nothing else is left to purge.
	if n, err := store.Purge(ctx, idempg.PurgeParams{Before: cutoff}); err != nil || n != 1 {
		t.Errorf("second Purge = %d, %v; want 1, nil", n, err)
	}
	if n, err := store.Purge(ctx, idempg.PurgeParams{Before: cutoff}); err != nil || n != 0 {
		t.Errorf("third Purge = %d, %v; want 0, nil", n, err)
	}
	if _, err := store.Purge(ctx, idempg.PurgeParams{}); err == nil {
		t.Errorf("Purge without Before succeeded; want an error")
	}
}
