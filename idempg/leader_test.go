package idempg_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idempg"
	"github.com/idemkit/idem/idemstore"
)

// TestPurgeLockSkipsLockedRows: a batch of the purge lock deletes the old
// keys but one whose row a request holds; that one goes once it is free.
// The lock's session ends with Unlock, and another lock can be taken.
func TestPurgeLockSkipsLockedRows(t *testing.T) {
	t.Parallel()
	const old, fresh = 6, 2
	store := setup(t, nil)
	for i := range old + fresh {
		now := epoch
		if i >= old {
			now = epoch.Add(2 * time.Hour)
		}
		complete(t, mustLease(t, store, params(idem.ModeTwoPhase, newScope("alice"), "a", now)), "{}")
	}
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

	lock, err := store.LockPurge(ctx)
	if err != nil {
		t.Fatalf("LockPurge: %v", err)
	}
	if _, err := store.LockPurge(ctx); !errors.Is(err, idemstore.ErrPurgeLocked) {
		t.Fatalf("second LockPurge: %v; want ErrPurgeLocked", err)
	}
	p := idempg.PurgeParams{Before: epoch.Add(time.Hour), BatchSize: 100}
	if n, err := lock.PurgeBatch(ctx, p); err != nil || n != old {
		t.Fatalf("PurgeBatch = %d, %v; want the %d old unlocked keys", n, err, old)
	}
	if got := keyCount(t, store); got != fresh+1 {
		t.Errorf("%d keys left, want %d fresh and the locked one", got, fresh)
	}
	if err := locker.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	// A new run (a new Before) starts from the oldest key again.
	p.Before = p.Before.Add(time.Second)
	if n, err := lock.PurgeBatch(ctx, p); err != nil || n != 1 {
		t.Errorf("PurgeBatch after the row was freed = %d, %v; want 1", n, err)
	}
	if err := lock.Unlock(ctx); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	if _, err := lock.PurgeBatch(ctx, p); !errors.Is(err, idemstore.ErrPurgeLockLost) {
		t.Errorf("PurgeBatch after Unlock: %v; want ErrPurgeLockLost", err)
	}
	again, err := store.LockPurge(ctx)
	if err != nil {
		t.Fatalf("LockPurge after Unlock: %v", err)
	}
	again.Unlock(ctx)
}

// TestPurgeLockLostWithItsSession: when the lock's session is terminated,
// as when its instance dies, the lock is free for another instance, and
// the old lock's batches fail with ErrPurgeLockLost.
func TestPurgeLockLostWithItsSession(t *testing.T) {
	t.Parallel()
	store := setup(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	lock, err := store.LockPurge(ctx)
	if err != nil {
		t.Fatalf("LockPurge: %v", err)
	}
	defer lock.Unlock(ctx)
	if _, err := store.Pool().Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_locks
WHERE locktype = 'advisory' AND classid = 1768187245 AND objsubid = 2
  AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`); err != nil {
		t.Fatal(err)
	}
	if _, err := lock.PurgeBatch(ctx, idempg.PurgeParams{Before: epoch}); !errors.Is(err, idemstore.ErrPurgeLockLost) {
		t.Errorf("PurgeBatch after the session ended: %v; want ErrPurgeLockLost", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		other, err := store.LockPurge(ctx)
		if err == nil {
			other.Unlock(ctx)
			break
		}
		if !errors.Is(err, idemstore.ErrPurgeLocked) || time.Now().After(deadline) {
			t.Fatalf("LockPurge after the holder's session ended: %v", err)
		}
	}
}

// TestPurgeLockIsFreeWhenUnlockReturns takes and frees the purge lock many
// times in a row: each LockPurge right after an Unlock gets the lock. A lock
// freed only by closing its connection is freed when the server has ended
// that session, which may be after Close returned.
func TestPurgeLockIsFreeWhenUnlockReturns(t *testing.T) {
	t.Parallel()
	store := setup(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	for i := range 100 {
		lock, err := store.LockPurge(ctx)
		if err != nil {
			t.Fatalf("LockPurge %d, right after the previous Unlock: %v", i, err)
		}
		if err := lock.Unlock(ctx); err != nil {
			t.Fatalf("Unlock %d: %v", i, err)
		}
	}
}
