package idemtest

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemstore"
)

// purgeStoreOf returns store as an idemstore.PurgeStore, or skips the test for
// a store without LockPurge.
func purgeStoreOf(t *testing.T, store idemstore.Store) idemstore.PurgeStore {
	t.Helper()
	p, ok := store.(idemstore.PurgeStore)
	if !ok {
		t.Skip("the store does not implement idemstore.PurgeStore")
	}
	return p
}

// inFlightAcrossCutoff leaves a started key created at epoch whose lease
// was taken over at epoch+2h, and returns its scope and the live lease.
func (s suite) inFlightAcrossCutoff(t *testing.T, store idemstore.Store) (idemstore.Scope, idemstore.Lease) {
	t.Helper()
	scope := newScope("alice")
	_ = s.mustLease(t, store, s.params(scope, "a", epoch)) // its holder died
	l := s.mustLease(t, store, s.params(scope, "a", epoch.Add(2*time.Hour)))
	if !l.Info().TakenOver {
		t.Fatalf("the second claim did not take the key over")
	}
	return scope, l
}

// wantInFlight checks that the key of scope is still stored and started.
func (s suite) wantInFlight(t *testing.T, store idemstore.Store, scope idemstore.Scope) {
	t.Helper()
	if rec := s.mustRecord(t, store, s.params(scope, "a", epoch.Add(2*time.Hour+time.Second))); rec.Status != idemstore.StatusInFlight {
		t.Errorf("key %s: status %q, want started", scope.Key, rec.Status)
	}
}

// purgeKeepsKeysInFlight: a started key created before the cutoff whose
// lease was taken after it may be in flight, and stays; a started key
// whose lease was taken before the cutoff goes.
func (s suite) purgeKeepsKeysInFlight(t *testing.T) {
	t.Parallel()
	store := s.h.NewStore(t)
	pg := purgerOf(t, store)
	inFlight, lease := s.inFlightAcrossCutoff(t, store)
	defer release(t, lease)
	abandoned := newScope("alice")
	_ = s.mustLease(t, store, s.params(abandoned, "a", epoch)) // its holder died
	s.completedKeys(t, store, 2, epoch)

	n, err := pg.Purge(context.Background(), idemstore.PurgeParams{Before: epoch.Add(time.Hour)})
	if err != nil || n != 3 {
		t.Fatalf("Purge = %d, %v; want 3 (two completed keys and the abandoned one), nil", n, err)
	}
	s.wantInFlight(t, store, inFlight)
}

// purgeLockIsExclusive: one PurgeLock at a time per store; after Unlock
// the next LockPurge gets it, and the unlocked lock deletes nothing.
func (s suite) purgeLockIsExclusive(t *testing.T) {
	t.Parallel()
	store := s.h.NewStore(t)
	ps := purgeStoreOf(t, store)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	first, err := ps.LockPurge(ctx)
	if err != nil {
		t.Fatalf("first LockPurge: %v", err)
	}
	if b, ok := first.(interface{ LocksEachBatch() bool }); ok && b.LocksEachBatch() {
		first.Unlock(ctx)
		t.Skip("the store's purge lock is taken by each batch, not held between batches")
	}
	if _, err := ps.LockPurge(ctx); !errors.Is(err, idemstore.ErrPurgeLocked) {
		t.Fatalf("second LockPurge while the first is held: %v; want ErrPurgeLocked", err)
	}
	if err := first.Unlock(ctx); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	second, err := ps.LockPurge(ctx)
	if err != nil {
		t.Fatalf("LockPurge after Unlock: %v", err)
	}
	defer second.Unlock(ctx)
	if n, err := first.PurgeBatch(ctx, idemstore.PurgeParams{Before: epoch.Add(time.Hour)}); err == nil {
		t.Errorf("PurgeBatch after Unlock = %d, nil; want an error", n)
	}
}

// purgeBatchIsBoundedAndKeepsKeysInFlight: PurgeBatch deletes at most
// BatchSize keys, under the same rule as Purge.
func (s suite) purgeBatchIsBounded(t *testing.T) {
	t.Parallel()
	store := s.h.NewStore(t)
	ps := purgeStoreOf(t, store)
	inFlight, lease := s.inFlightAcrossCutoff(t, store)
	defer release(t, lease)
	s.completedKeys(t, store, 5, epoch)
	young := s.completedKeys(t, store, 2, epoch.Add(2*time.Hour))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	lock, err := ps.LockPurge(ctx)
	if err != nil {
		t.Fatalf("LockPurge: %v", err)
	}
	defer lock.Unlock(ctx)
	p := idemstore.PurgeParams{Before: epoch.Add(time.Hour), BatchSize: 2}
	var got []int64
	for range 4 {
		n, err := lock.PurgeBatch(ctx, p)
		if err != nil {
			t.Fatalf("PurgeBatch: %v", err)
		}
		got = append(got, n)
	}
	if want := []int64{2, 2, 1, 0}; !slices.Equal(got, want) {
		t.Errorf("batches deleted %v keys, want %v", got, want)
	}
	s.wantInFlight(t, store, inFlight)
	s.wantKept(t, store, young, epoch.Add(3*time.Hour))
	if _, err := lock.PurgeBatch(ctx, idemstore.PurgeParams{}); err == nil {
		t.Errorf("PurgeBatch without Before succeeded; want an error")
	}
}

// keyStats: KeyStats counts started keys, live or stuck, and not
// completed ones.
func (s suite) keyStats(t *testing.T) {
	t.Parallel()
	store := s.h.NewStore(t)
	ks, ok := store.(idemstore.KeyStatsStore)
	if !ok {
		t.Skip("the store does not implement idemstore.KeyStatsStore")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if st, err := ks.KeyStats(ctx, epoch, lockTimeout); err != nil || st != (idemstore.KeyStats{}) {
		t.Fatalf("KeyStats of an empty store = %+v, %v; want zeros", st, err)
	}
	s.completedKeys(t, store, 2, epoch)
	_ = s.mustLease(t, store, s.params(newScope("alice"), "a", epoch)) // its holder died
	live := s.mustLease(t, store, s.params(newScope("alice"), "a", epoch.Add(time.Hour)))
	defer release(t, live)
	st, err := ks.KeyStats(ctx, epoch.Add(time.Hour+time.Second), lockTimeout)
	if err != nil {
		t.Fatalf("KeyStats: %v", err)
	}
	if st.Started != 2 || st.Stuck != 1 || !sameTime(st.OldestStarted, epoch) {
		t.Errorf("KeyStats = %+v; want 2 started, 1 stuck, the oldest claimed at %s", st, epoch)
	}
}

// purgeDeletesReleasedAtPoint: a key released at a recovery point has no
// holder (its lease time is cleared); created before the cutoff, it goes
// like any other key past retention, which claims already treat as
// absent. A key released at a point after the cutoff stays.
func (s suite) purgeDeletesReleasedAtPoint(t *testing.T) {
	t.Parallel()
	store := s.h.NewStore(t)
	pg := purgerOf(t, store)
	old, recent := newScope("alice"), newScope("alice")
	for _, k := range []struct {
		scope   idemstore.Scope
		created time.Time
	}{{old, epoch}, {recent, epoch.Add(2 * time.Hour)}} {
		l := s.recoveryLease(t, store, s.params(k.scope, "a", k.created))
		checkpoint(t, l, "created", idem.State{"payment_id": "pay_1"})
		release(t, l)
	}

	n, err := pg.Purge(context.Background(), idemstore.PurgeParams{Before: epoch.Add(time.Hour)})
	if err != nil || n != 1 {
		t.Fatalf("Purge = %d, %v; want 1 (the key released at a point before the cutoff), nil", n, err)
	}
	// The key released after the cutoff is still there: its retry resumes
	// at its point.
	l := s.recoveryLease(t, store, s.params(recent, "a", epoch.Add(2*time.Hour+time.Second)))
	wantRecovery(t, l, "created", idem.State{"payment_id": "pay_1"})
	release(t, l)
}

// purgedKeyFencesStalledHolder: a holder that stalled past retention (a
// paused process, a frozen machine) loses its started key to the purge,
// and the key's next claim makes a new row, at token 1 again. When the
// stalled holder wakes, its Checkpoint, Complete and Release must all
// miss the new row, whose token is its own: a lease is fenced by
// its row (created_at) as well as its token. Before that fence, its
// Complete stored its response on the new claim's key, and a two-phase
// handler's writes committed beside the new holder's.
func (s suite) purgedKeyFencesStalledHolder(t *testing.T) {
	t.Parallel()
	store := s.h.NewStore(t)
	pg := purgerOf(t, store)
	ctx := context.Background()
	now := epoch.Add(retention + 2*time.Hour)
	stalled := map[string]idemstore.Lease{}
	scopes := map[string]idemstore.Scope{}
	for _, name := range []string{"complete", "release", "checkpoint"} {
		scopes[name] = newScope("alice")
		stalled[name] = s.mustLease(t, store, s.params(scopes[name], "a", epoch))
	}
	if n, err := pg.Purge(ctx, idemstore.PurgeParams{Before: now.Add(-retention)}); err != nil || n != 3 {
		t.Fatalf("Purge = %d, %v; want the 3 abandoned keys", n, err)
	}
	fresh := map[string]idemstore.Lease{}
	for name, scope := range scopes {
		fresh[name] = s.mustLease(t, store, s.params(scope, "a", now))
		if info := fresh[name].Info(); info.TakenOver || info.Token != 1 {
			t.Fatalf("claim after the purge: Info() = %+v; want a new key at token 1", info)
		}
	}

	if err := stalled["complete"].Complete(ctx, sampleResponse(`{"holder":"stalled"}`)); !errors.Is(err, idemstore.ErrLeaseLost) {
		t.Errorf("the stalled holder's Complete = %v, want ErrLeaseLost", err)
	}
	if err := stalled["release"].Release(ctx); err != nil {
		t.Errorf("the stalled holder's Release = %v, want nil (nothing to free)", err)
	}
	if rl, ok := stalled["checkpoint"].(idemstore.RecoveryLease); ok && s.mode == idem.ModeTwoPhase {
		if err := rl.Checkpoint(ctx, idemstore.Recovery{Point: "charged"}); !errors.Is(err, idemstore.ErrLeaseLost) {
			t.Errorf("the stalled holder's Checkpoint = %v, want ErrLeaseLost", err)
		}
	}
	release(t, stalled["checkpoint"])

	// The new holders still hold their keys, and store their own responses.
	for name, scope := range scopes {
		if rec := s.mustRecord(t, store, s.params(scope, "a", now.Add(time.Second))); rec.Status != idemstore.StatusInFlight || rec.Token != 1 {
			t.Errorf("%s: after the stalled holder woke, status %q token %d; want the new claim's key, started at token 1", name, rec.Status, rec.Token)
		}
		complete(t, fresh[name], sampleResponse(`{"holder":"fresh"}`))
		if rec := s.mustRecord(t, store, s.params(scope, "a", now.Add(2*time.Second))); string(rec.Response.Body) != `{"holder":"fresh"}` {
			t.Errorf("%s: stored %q, want the new holder's response", name, rec.Response.Body)
		}
	}
}
