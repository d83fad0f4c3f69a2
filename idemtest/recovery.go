package idemtest

import (
	"context"
	"errors"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemstore"
)

// runRecoveryTests runs the cases of recovery points ([idemstore.RecoveryLease])
// and of the resumer's listing ([idemstore.RecoveryStore]). A store whose
// two-phase leases keep no recovery points skips them. The cases run one
// after the other: each store is a database of its own on some harnesses,
// and the suite's parallel cases already press the server's connection
// limit.
func runRecoveryTests(t *testing.T, h Harness) {
	t.Helper()
	s := suite{h: h, mode: idem.ModeTwoPhase}
	t.Run("RecoveryPoints", func(t *testing.T) {
		t.Run("NewKeyIsAtStarted", s.newKeyIsAtStarted)
		t.Run("RetryResumesAfterRelease", s.retryResumesAfterRelease)
		t.Run("TakeoverResumes", s.takeoverResumes)
		t.Run("RecoveryIsTheLastCheckpoint", s.recoveryIsTheLastCheckpoint)
		t.Run("StaleHolderFencedOutOfCheckpoint", s.staleHolderFencedOutOfCheckpoint)
		t.Run("EachPhaseCommitsItsWrites", s.eachPhaseCommitsItsWrites)
		t.Run("ReplacedKeyStartsOver", s.replacedKeyStartsOver)
		t.Run("ReleaseWithoutRecoveryPointFreesKey", s.releaseWithoutPointFreesKey)
		t.Run("ListsUnfinishedKeys", s.listsUnfinishedKeys)
		t.Run("AtomicLeaseKeepsNoRecoveryPoint", s.atomicLeaseKeepsNoPoint)
	})
}

// recoveryLease returns the lease of a claim of p, as a RecoveryLease, or
// skips the test when the store keeps no recovery points.
func (s suite) recoveryLease(t *testing.T, store idemstore.Store, p idemstore.ClaimParams) idemstore.RecoveryLease {
	t.Helper()
	l := s.mustLease(t, store, p)
	rl, ok := l.(idemstore.RecoveryLease)
	if !ok {
		release(t, l)
		t.Skipf("the store's leases (%T) keep no recovery points", l)
	}
	return rl
}

func checkpoint(t testing.TB, l idemstore.RecoveryLease, point string, state idem.State) {
	t.Helper()
	ctx, cancel := callContext()
	defer cancel()
	if err := l.Checkpoint(ctx, idemstore.Recovery{Point: point, State: state}); err != nil {
		t.Fatalf("Checkpoint(%q): %v", point, err)
	}
}

func wantRecovery(t testing.TB, l idemstore.RecoveryLease, point string, state idem.State) {
	t.Helper()
	ctx, cancel := callContext()
	defer cancel()
	r, err := l.Recovery(ctx)
	if err != nil {
		t.Fatalf("Recovery: %v", err)
	}
	if r.Point != point || !maps.Equal(r.State, state) {
		t.Errorf("Recovery = %q %v; want %q %v", r.Point, r.State, point, state)
	}
}

// write makes one business write through the lease, when the store has
// transactions.
func (s suite) write(t testing.TB, l idemstore.Lease, store idemstore.Store, value string) {
	t.Helper()
	if s.h.Write == nil {
		return
	}
	ctx, cancel := callContext()
	defer cancel()
	if err := s.h.Write(l.Context(ctx), store, value); err != nil {
		t.Fatalf("write %q: %v", value, err)
	}
}

// wantRows checks how many committed business writes recorded value.
func (s suite) wantRows(t *testing.T, store idemstore.Store, value string, want int) {
	t.Helper()
	if s.h.Count == nil {
		return
	}
	if n := s.h.Count(t, store, value); n != want {
		t.Errorf("%d committed writes of %q; want %d", n, value, want)
	}
}

func (s suite) newKeyIsAtStarted(t *testing.T) {
	store := s.h.NewStore(t)
	l := s.recoveryLease(t, store, s.params(newScope("alice"), "a", epoch))
	wantRecovery(t, l, idemstore.RecoveryStarted, nil)
	release(t, l)
}

func (s suite) retryResumesAfterRelease(t *testing.T) {
	store := s.h.NewStore(t)
	scope := newScope("alice")
	p := s.params(scope, "a", epoch)
	l := s.recoveryLease(t, store, p)
	s.write(t, l, store, scope.Key+"-created")
	checkpoint(t, l, "created", idem.State{"payment_id": "pay_1"})
	s.write(t, l, store, scope.Key+"-lost")
	// The next phase's outcome is unknown: the holder releases the key.
	release(t, l)
	s.wantRows(t, store, scope.Key+"-created", 1)
	s.wantRows(t, store, scope.Key+"-lost", 0)

	// The retry comes at once, at the same time: the key has no holder.
	retry := s.recoveryLease(t, store, p)
	if info := retry.Info(); !info.TakenOver || info.Token != 2 {
		t.Errorf("retry's lease = %+v; want the key taken over with token 2", info)
	}
	wantRecovery(t, retry, "created", idem.State{"payment_id": "pay_1"})
	complete(t, retry, sampleResponse(`{"id":"pay_1"}`))
	if rec := s.mustRecord(t, store, p); rec.Status != idemstore.StatusCompleted {
		t.Errorf("key after completion is %q; want completed", rec.Status)
	}
	s.wantRows(t, store, scope.Key+"-created", 1)
}

func (s suite) takeoverResumes(t *testing.T) {
	store := s.h.NewStore(t)
	scope := newScope("alice")
	l := s.recoveryLease(t, store, s.params(scope, "a", epoch))
	checkpoint(t, l, "created", idem.State{"payment_id": "pay_1"})
	checkpoint(t, l, "charged", idem.State{"payment_id": "pay_1", "charge_id": "ch_1"})
	// The holder dies with its lease: a retry before the lock timeout finds
	// the key in flight, one after it takes it over where the holder was.
	if rec := s.mustRecord(t, store, s.params(scope, "a", epoch.Add(lockTimeout-time.Second))); rec.Status != idemstore.StatusInFlight {
		t.Fatalf("retry within the lease found %q; want in flight", rec.Status)
	}
	taken := s.recoveryLease(t, store, s.params(scope, "a", epoch.Add(lockTimeout)))
	if info := taken.Info(); !info.TakenOver || info.Token != 2 {
		t.Errorf("takeover's lease = %+v; want taken over with token 2", info)
	}
	wantRecovery(t, taken, "charged", idem.State{"payment_id": "pay_1", "charge_id": "ch_1"})
	complete(t, taken, sampleResponse(`{"id":"pay_1"}`))
}

// recoveryIsTheLastCheckpoint: Recovery returns the key's last committed
// point, the lease's own checkpoints included, and a point saved without
// state comes back without state, to the lease and to a takeover.
func (s suite) recoveryIsTheLastCheckpoint(t *testing.T) {
	store := s.h.NewStore(t)
	scope := newScope("alice")
	l := s.recoveryLease(t, store, s.params(scope, "a", epoch))
	wantRecovery(t, l, idemstore.RecoveryStarted, nil)
	checkpoint(t, l, "created", idem.State{"payment_id": "pay_1"})
	wantRecovery(t, l, "created", idem.State{"payment_id": "pay_1"})
	checkpoint(t, l, "accepted", nil)
	wantRecovery(t, l, "accepted", nil)
	// The holder dies: the takeover reads the point from the store.
	taken := s.recoveryLease(t, store, s.params(scope, "a", epoch.Add(lockTimeout)))
	if info := taken.Info(); !info.TakenOver {
		t.Fatalf("takeover's lease = %+v; want taken over", info)
	}
	wantRecovery(t, taken, "accepted", nil)
	complete(t, taken, sampleResponse(`{"id":"pay_1"}`))
}

func (s suite) staleHolderFencedOutOfCheckpoint(t *testing.T) {
	store := s.h.NewStore(t)
	scope := newScope("alice")
	old := s.recoveryLease(t, store, s.params(scope, "a", epoch))
	checkpoint(t, old, "created", idem.State{"payment_id": "pay_1"})
	taken := s.recoveryLease(t, store, s.params(scope, "a", epoch.Add(lockTimeout+time.Second)))

	// The stale holder wakes up and tries to commit its next phase: the
	// fence rolls its writes back and keeps the recovery point.
	s.write(t, old, store, scope.Key+"-old")
	ctx, cancel := callContext()
	defer cancel()
	err := old.Checkpoint(ctx, idemstore.Recovery{Point: "charged", State: idem.State{"charge_id": "ch_old"}})
	if !errors.Is(err, idemstore.ErrLeaseLost) {
		t.Fatalf("stale holder's Checkpoint = %v; want ErrLeaseLost", err)
	}
	s.wantRows(t, store, scope.Key+"-old", 0)
	wantRecovery(t, taken, "created", idem.State{"payment_id": "pay_1"})
	// Its Release frees nothing of the new holder's.
	if err := old.Release(ctx); err != nil {
		t.Fatalf("stale holder's Release: %v", err)
	}
	s.write(t, taken, store, scope.Key+"-new")
	checkpoint(t, taken, "charged", idem.State{"payment_id": "pay_1", "charge_id": "ch_new"})
	complete(t, taken, sampleResponse(`{"id":"pay_1"}`))
	s.wantRows(t, store, scope.Key+"-new", 1)
}

func (s suite) eachPhaseCommitsItsWrites(t *testing.T) {
	s.needTx(t)
	store := s.h.NewStore(t)
	scope := newScope("alice")
	l := s.recoveryLease(t, store, s.params(scope, "a", epoch))
	s.write(t, l, store, scope.Key+"-1")
	checkpoint(t, l, "one", nil)
	// Committed with its recovery point, before the key completes.
	s.wantRows(t, store, scope.Key+"-1", 1)
	checkpoint(t, l, "two", idem.State{"empty_phase": "yes"}) // a phase that wrote nothing
	s.write(t, l, store, scope.Key+"-3")
	s.wantRows(t, store, scope.Key+"-3", 0)
	complete(t, l, sampleResponse(`{}`))
	s.wantRows(t, store, scope.Key+"-3", 1)
}

func (s suite) replacedKeyStartsOver(t *testing.T) {
	store := s.h.NewStore(t)
	scope := newScope("alice")
	l := s.recoveryLease(t, store, s.params(scope, "a", epoch))
	checkpoint(t, l, "created", idem.State{"payment_id": "pay_1"})
	release(t, l)
	fresh := s.recoveryLease(t, store, s.params(scope, "b", epoch.Add(retention)))
	if fresh.Info().TakenOver {
		t.Errorf("a claim past retention took the key over; want it replaced")
	}
	wantRecovery(t, fresh, idemstore.RecoveryStarted, nil)
	release(t, fresh)
}

func (s suite) releaseWithoutPointFreesKey(t *testing.T) {
	store := s.h.NewStore(t)
	scope := newScope("alice")
	l := s.recoveryLease(t, store, s.params(scope, "a", epoch))
	release(t, l)
	// Freed: a different request may now use the key.
	other := s.mustLease(t, store, s.params(scope, "b", epoch))
	if info := other.Info(); info.TakenOver {
		t.Errorf("claim after release = %+v; want a new key", info)
	}
	release(t, other)
}

func (s suite) listsUnfinishedKeys(t *testing.T) {
	store := s.h.NewStore(t)
	rs, ok := store.(idemstore.RecoveryStore)
	if !ok {
		t.Skipf("%T cannot list unfinished keys", store)
	}
	claim := func(name string, at time.Time, point string) (idemstore.Scope, idemstore.RecoveryLease) {
		scope := idemstore.Scope{ClientID: "alice", Key: newScope("alice").Key + "-" + name}
		l := s.recoveryLease(t, store, s.params(scope, name, at))
		if point != "" {
			checkpoint(t, l, point, idem.State{"name": name})
		}
		return scope, l
	}
	now := epoch.Add(time.Hour)
	abandoned, _ := claim("abandoned", now.Add(-lockTimeout), "created")
	released, l := claim("released", now, "created")
	release(t, l)
	claim("alive", now.Add(-lockTimeout+time.Second), "created")
	nopoint, _ := claim("nopoint", now.Add(-2*lockTimeout), "")
	// Past retention, and no recovery point: listed by Started only when
	// Retention is 0, since StartedAfter (zero below) does not bound it.
	nopointOld, _ := claim("nopoint-old", now.Add(-retention-time.Second), "")
	claim("nopoint-alive", now.Add(-lockTimeout+time.Second), "")
	_, l = claim("completed", now.Add(-2*lockTimeout), "created")
	complete(t, l, sampleResponse(`{}`))
	old, _ := claim("old", now.Add(-retention), "created")

	keys, err := rs.Unfinished(context.Background(), idemstore.UnfinishedParams{Now: now, LockTimeout: lockTimeout, Retention: retention, Limit: 10})
	if err != nil {
		t.Fatalf("Unfinished: %v", err)
	}
	var got []idemstore.Scope
	for _, k := range keys {
		got = append(got, k.Scope)
	}
	if len(got) != 2 || got[0] != abandoned || got[1] != released {
		t.Fatalf("Unfinished = %v; want the abandoned key, then the released one", got)
	}
	if k := keys[0]; k.Method != "POST" || k.Path != "/v1/payments" || string(k.RequestHash) != string(hashOf("abandoned")) ||
		!sameTime(k.CreatedAt, now.Add(-lockTimeout)) || k.Status != idemstore.StatusInFlight {
		t.Errorf("listed record = %+v; want the claim's request and times", k)
	}
	if k := keys[1]; !k.LockedAt.IsZero() {
		t.Errorf("released key's LockedAt = %v; want zero: no holder", k.LockedAt)
	}
	keys, err = rs.Unfinished(context.Background(), idemstore.UnfinishedParams{Now: now, LockTimeout: lockTimeout, Retention: retention, Limit: 1})
	if err != nil || len(keys) != 1 || keys[0].Scope != abandoned {
		t.Errorf("Unfinished with Limit 1 = %v, %v; want the oldest key only", keys, err)
	}
	keys, err = rs.Unfinished(context.Background(), idemstore.UnfinishedParams{Now: now, LockTimeout: lockTimeout, Retention: retention, Limit: 0})
	if err != nil || len(keys) != 0 {
		t.Errorf("Unfinished with Limit 0 = %v, %v; want none", keys, err)
	}
	// Retention 0: keys never expire, and the old key is listed too.
	keys, err = rs.Unfinished(context.Background(), idemstore.UnfinishedParams{Now: now, LockTimeout: lockTimeout, Limit: 10})
	got = got[:0]
	for _, k := range keys {
		got = append(got, k.Scope)
	}
	if err != nil || len(got) != 3 || got[0] != old || got[1] != abandoned || got[2] != released {
		t.Errorf("Unfinished with Retention 0 = %v, %v; want the old key, the abandoned one, the released one", got, err)
	}

	// Started lists the expired keys of its operations that passed no
	// recovery point too; other operations' stay unlisted.
	// StartedAfter bounds them by creation time; CreatedUntil bounds the
	// whole listing; Retention bounds them as it bounds the others, and
	// 0 lists them however old.
	for _, tt := range []struct {
		started   []string
		after     time.Time
		until     time.Time
		retention time.Duration
		limit     int
		want      []idemstore.Scope
	}{
		{[]string{"POST /v1/refunds", "POST /v1/payments"}, time.Time{}, time.Time{}, retention, 10, []idemstore.Scope{nopoint, abandoned, released}},
		{[]string{"POST /v1/payments"}, time.Time{}, time.Time{}, retention, 2, []idemstore.Scope{nopoint, abandoned}},
		{[]string{"POST /v1/payments"}, now.Add(-2*lockTimeout - time.Second), time.Time{}, retention, 10, []idemstore.Scope{nopoint, abandoned, released}},
		{[]string{"POST /v1/payments"}, now.Add(-2 * lockTimeout), time.Time{}, retention, 10, []idemstore.Scope{abandoned, released}},
		{[]string{"POST /v1/refunds", "GET /v1/payments"}, time.Time{}, time.Time{}, retention, 10, []idemstore.Scope{abandoned, released}},
		{[]string{"POST /v1/payments"}, time.Time{}, now.Add(-2 * lockTimeout), retention, 10, []idemstore.Scope{nopoint}},
		{[]string{"POST /v1/payments"}, time.Time{}, now.Add(-lockTimeout), retention, 10, []idemstore.Scope{nopoint, abandoned}},
		{nil, time.Time{}, now.Add(-lockTimeout - time.Second), retention, 10, nil},
		{[]string{"POST /v1/payments"}, time.Time{}, time.Time{}, 0, 10, []idemstore.Scope{nopointOld, old, nopoint, abandoned, released}},
		{[]string{"POST /v1/payments"}, now.Add(-retention - 2*time.Second), time.Time{}, 0, 10, []idemstore.Scope{nopointOld, old, nopoint, abandoned, released}},
		{[]string{"POST /v1/payments"}, now.Add(-retention - time.Second), time.Time{}, 0, 10, []idemstore.Scope{old, nopoint, abandoned, released}},
	} {
		keys, err := rs.Unfinished(context.Background(), idemstore.UnfinishedParams{
			Now: now, LockTimeout: lockTimeout, Retention: tt.retention, Limit: tt.limit, Started: tt.started, StartedAfter: tt.after,
			CreatedUntil: tt.until,
		})
		if err != nil {
			t.Fatalf("Unfinished with Started %q after %v until %v, retention %v: %v", tt.started, tt.after, tt.until, tt.retention, err)
		}
		var got []idemstore.Scope
		for _, k := range keys {
			got = append(got, k.Scope)
		}
		if !slices.Equal(got, tt.want) {
			t.Errorf("Unfinished with Started %q after %v until %v, retention %v, limit %d = %v; want %v",
				tt.started, tt.after, tt.until, tt.retention, tt.limit, got, tt.want)
		}
	}
}

func (s suite) atomicLeaseKeepsNoPoint(t *testing.T) {
	if s.h.TwoPhaseOnly {
		t.Skip("the store keeps two-phase keys only (Harness.TwoPhaseOnly)")
	}
	store := s.h.NewStore(t)
	atomic := suite{h: s.h, mode: idem.ModeAtomic}
	l := atomic.mustLease(t, store, atomic.params(newScope("alice"), "a", epoch))
	defer release(t, l)
	rl, ok := l.(idemstore.RecoveryLease)
	if !ok {
		return
	}
	if err := rl.Checkpoint(context.Background(), idemstore.Recovery{Point: "created"}); !errors.Is(err, idemstore.ErrNoRecovery) {
		t.Errorf("atomic lease's Checkpoint = %v; want ErrNoRecovery", err)
	}
}
