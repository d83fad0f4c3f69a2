package idemtest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemstore"
)

// RunAdminTests runs the conformance cases of [idemstore.KeyAdmin] against the
// stores that h.NewStore returns, which must implement it: listing,
// reading, releasing and deleting keys as an operator does.
func RunAdminTests(t *testing.T, h Harness) {
	t.Helper()
	s := suite{h: h, mode: idem.ModeTwoPhase}
	t.Run("GetKey", s.adminGetKey)
	t.Run("ListKeysFiltersAndOrders", s.adminListKeys)
	t.Run("ListKeysOmitsBodiesUnlessAsked", s.adminListOmitsBodies)
	t.Run("ListKeysRejectsBadParams", s.adminListRejectsBadParams)
	t.Run("ReleaseRefusesLiveLease", s.adminReleaseRefusesLiveLease)
	t.Run("LeaseExpiryIsRecorded", s.adminLeaseExpiryIsRecorded)
	t.Run("ReleaseJudgesRecordedExpiry", s.adminReleaseJudgesRecordedExpiry)
	t.Run("ReleaseFreesStuckKeyForOneRetry", s.adminReleaseFreesStuckKey)
	t.Run("ForcedReleaseFencesOutHolder", s.adminForcedRelease)
	t.Run("ReleaseRefusesCompletedKey", s.adminReleaseRefusesCompleted)
	t.Run("ReleaseRejectsBadParams", s.adminReleaseRejectsBadParams)
	t.Run("DeleteCompletedKey", s.adminDeleteCompleted)
	t.Run("DeleteRefusesStartedKey", s.adminDeleteRefusesStarted)
	t.Run("DeleteFencesStalledHolder", s.adminDeleteFencesStalledHolder)
}

func (s suite) admin(t *testing.T) (idemstore.Store, idemstore.KeyAdmin) {
	t.Helper()
	store := s.h.NewStore(t)
	a, ok := store.(idemstore.KeyAdmin)
	if !ok {
		t.Fatalf("%T does not implement idemstore.KeyAdmin", store)
	}
	return store, a
}

func adminCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func (s suite) adminGetKey(t *testing.T) {
	t.Parallel()
	store, a := s.admin(t)
	ctx := adminCtx(t)
	scope := newScope("alice")
	if _, err := a.GetKey(ctx, scope); !errors.Is(err, idemstore.ErrKeyNotFound) {
		t.Fatalf("GetKey of an unknown key = %v, want ErrKeyNotFound", err)
	}
	complete(t, s.mustLease(t, store, s.params(scope, "a", epoch)), sampleResponse(`{"id":"pay_1"}`))
	rec, err := a.GetKey(ctx, scope)
	if err != nil {
		t.Fatalf("GetKey: %v", err)
	}
	if rec.Status != idemstore.StatusCompleted || rec.Response == nil || rec.Response.StatusCode != 201 ||
		string(rec.Response.Body) != `{"id":"pay_1"}` || rec.Response.Header.Get("Location") != "/v1/payments/pay_1" ||
		!sameTime(rec.CreatedAt, epoch) || rec.Scope != scope {
		t.Errorf("GetKey = %+v (response %+v), want the completed key with its response", rec, rec.Response)
	}
	other := idemstore.Scope{ClientID: "mallory", Key: scope.Key}
	if _, err := a.GetKey(ctx, other); !errors.Is(err, idemstore.ErrKeyNotFound) {
		t.Errorf("GetKey of another client's scope = %v, want ErrKeyNotFound", err)
	}
}

func (s suite) adminListKeys(t *testing.T) {
	t.Parallel()
	store, a := s.admin(t)
	ctx := adminCtx(t)
	// Three keys a minute apart: alice's oldest is stuck, bob's completed.
	k1, k2, k3 := newScope("alice"), newScope("bob"), newScope("alice")
	s.mustLease(t, store, s.params(k1, "a", epoch))
	complete(t, s.mustLease(t, store, s.params(k2, "b", epoch.Add(time.Minute))), sampleResponse("{}"))
	s.mustLease(t, store, s.params(k3, "c", epoch.Add(2*time.Minute)))
	for _, tt := range []struct {
		name string
		p    idemstore.ListKeysParams
		want []idemstore.Scope
	}{
		{"All", idemstore.ListKeysParams{}, []idemstore.Scope{k1, k2, k3}},
		{"Client", idemstore.ListKeysParams{ClientID: "alice"}, []idemstore.Scope{k1, k3}},
		{"Started", idemstore.ListKeysParams{Status: idemstore.StatusInFlight}, []idemstore.Scope{k1, k3}},
		{"Completed", idemstore.ListKeysParams{Status: idemstore.StatusCompleted}, []idemstore.Scope{k2}},
		{"CreatedBefore", idemstore.ListKeysParams{CreatedBefore: epoch.Add(90 * time.Second)}, []idemstore.Scope{k1, k2}},
		{"StartedAndOld", idemstore.ListKeysParams{Status: idemstore.StatusInFlight, CreatedBefore: epoch.Add(time.Minute)}, []idemstore.Scope{k1}},
		{"Limit", idemstore.ListKeysParams{Limit: 2}, []idemstore.Scope{k1, k2}},
		{"UnknownClient", idemstore.ListKeysParams{ClientID: "carol"}, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			recs, err := a.ListKeys(ctx, tt.p)
			if err != nil {
				t.Fatalf("ListKeys: %v", err)
			}
			var got []idemstore.Scope
			for _, r := range recs {
				got = append(got, r.Scope)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("ListKeys(%+v) = %v, want %v", tt.p, got, tt.want)
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Fatalf("ListKeys(%+v) = %v, want %v (oldest first)", tt.p, got, tt.want)
				}
			}
		})
	}
	recs, err := a.ListKeys(ctx, idemstore.ListKeysParams{ClientID: "alice", Limit: 1})
	if err != nil || len(recs) != 1 {
		t.Fatalf("ListKeys = %d records, %v; want 1", len(recs), err)
	}
	if r := recs[0]; r.Status != idemstore.StatusInFlight || !sameTime(r.LockedAt, epoch) || !sameTime(r.LeaseExpires, epoch.Add(lockTimeout)) ||
		r.Token != 1 || r.Method != "POST" || r.Path != "/v1/payments" {
		t.Errorf("listed %+v, want the started key with its lease", r)
	}
}

func (s suite) adminListOmitsBodies(t *testing.T) {
	t.Parallel()
	store, a := s.admin(t)
	ctx := adminCtx(t)
	scope := newScope("alice")
	complete(t, s.mustLease(t, store, s.params(scope, "a", epoch)), sampleResponse(`{"secret":"card"}`))
	recs, err := a.ListKeys(ctx, idemstore.ListKeysParams{})
	if err != nil || len(recs) != 1 || recs[0].Response == nil {
		t.Fatalf("ListKeys = %v, %v; want one completed key", recs, err)
	}
	if r := recs[0].Response; len(r.Body) != 0 || r.StatusCode != 201 || r.Header.Get("Location") != "/v1/payments/pay_1" {
		t.Errorf("listed response %d %v body %q; want the status and headers, no body", r.StatusCode, r.Header, r.Body)
	}
	recs, err = a.ListKeys(ctx, idemstore.ListKeysParams{WithBody: true})
	if err != nil || len(recs) != 1 || recs[0].Response == nil || string(recs[0].Response.Body) != `{"secret":"card"}` {
		t.Fatalf("ListKeys with bodies = %v, %v; want the body", recs, err)
	}
}

func (s suite) adminListRejectsBadParams(t *testing.T) {
	t.Parallel()
	_, a := s.admin(t)
	for _, p := range []idemstore.ListKeysParams{{Limit: -1}, {Status: "done"}} {
		if _, err := a.ListKeys(adminCtx(t), p); err == nil {
			t.Errorf("ListKeys(%+v) succeeded, want an error", p)
		}
	}
}

func (s suite) releaseParams(scope idemstore.Scope, now time.Time, force bool) idemstore.ReleaseKeyParams {
	return idemstore.ReleaseKeyParams{Scope: scope, Now: now, LockTimeout: lockTimeout, Force: force}
}

func (s suite) adminReleaseRefusesLiveLease(t *testing.T) {
	t.Parallel()
	store, a := s.admin(t)
	scope := newScope("alice")
	l := s.mustLease(t, store, s.params(scope, "a", epoch))
	_, err := a.ReleaseKey(adminCtx(t), s.releaseParams(scope, epoch.Add(lockTimeout-time.Second), false))
	var live *idemstore.LeaseLiveError
	if !errors.As(err, &live) || !errors.Is(err, idemstore.ErrLeaseLive) || !sameTime(live.Expires, epoch.Add(lockTimeout)) {
		t.Fatalf("ReleaseKey of a live lease = %v, want a LeaseLiveError expiring at %s", err, epoch.Add(lockTimeout))
	}
	// Refused means untouched: the holder still completes.
	complete(t, l, sampleResponse("{}"))
}

// adminLeaseExpiryIsRecorded: the store records each lease's expiry, the
// claim's time plus its lock timeout, when a request claims the key and
// when one takes it over, and forgets it when the key is released.
func (s suite) adminLeaseExpiryIsRecorded(t *testing.T) {
	t.Parallel()
	store, a := s.admin(t)
	ctx := adminCtx(t)
	scope := newScope("alice")
	expiry := func(want time.Time) {
		t.Helper()
		rec, err := a.GetKey(ctx, scope)
		if err != nil {
			t.Fatalf("GetKey: %v", err)
		}
		if want.IsZero() != rec.LeaseExpires.IsZero() || !sameTime(rec.LeaseExpires, want) {
			t.Errorf("GetKey: LeaseExpires = %v, want %v", rec.LeaseExpires, want)
		}
		recs, err := a.ListKeys(ctx, idemstore.ListKeysParams{ClientID: scope.ClientID})
		if err != nil || len(recs) != 1 {
			t.Fatalf("ListKeys = %d records, %v; want 1", len(recs), err)
		}
		if got := recs[0].LeaseExpires; want.IsZero() != got.IsZero() || !sameTime(got, want) {
			t.Errorf("ListKeys: LeaseExpires = %v, want %v", got, want)
		}
	}
	p := s.params(scope, "a", epoch)
	p.LockTimeout = 10 * time.Minute
	s.mustLease(t, store, p) // its process dies
	expiry(epoch.Add(10 * time.Minute))

	p.Now, p.LockTimeout = epoch.Add(11*time.Minute), 45*time.Second
	taken := s.mustLease(t, store, p)
	if !taken.Info().TakenOver {
		t.Fatalf("claim after the lease expired: Info() = %+v, want a takeover", taken.Info())
	}
	expiry(epoch.Add(11*time.Minute + 45*time.Second))

	if _, err := a.ReleaseKey(ctx, s.releaseParams(scope, epoch.Add(time.Hour), false)); err != nil {
		t.Fatalf("ReleaseKey: %v", err)
	}
	expiry(time.Time{})
}

// adminReleaseJudgesRecordedExpiry: a release judges a lease by the expiry
// the store recorded, not by the lock timeout it is given, which serves only
// for keys without one: a 10-minute lease is live a minute in, whatever
// the operator's flag says, and a 30-second one is not.
func (s suite) adminReleaseJudgesRecordedExpiry(t *testing.T) {
	t.Parallel()
	store, a := s.admin(t)
	ctx := adminCtx(t)
	long, short := newScope("alice"), newScope("alice")
	p := s.params(long, "a", epoch)
	p.LockTimeout = 10 * time.Minute
	s.mustLease(t, store, p)
	s.mustLease(t, store, s.params(short, "a", epoch))

	release := func(scope idemstore.Scope, now time.Time, flag time.Duration) error {
		_, err := a.ReleaseKey(ctx, idemstore.ReleaseKeyParams{Scope: scope, Now: now, LockTimeout: flag})
		return err
	}
	var live *idemstore.LeaseLiveError
	err := release(long, epoch.Add(time.Minute), lockTimeout)
	if !errors.As(err, &live) || !sameTime(live.Expires, epoch.Add(10*time.Minute)) || !sameTime(live.LockedAt, epoch) {
		t.Fatalf("ReleaseKey of a 10-minute lease a minute in, given a %s lock timeout = %v; want a LeaseLiveError expiring at %s",
			lockTimeout, err, epoch.Add(10*time.Minute))
	}
	if err := release(short, epoch.Add(time.Minute), time.Hour); err != nil {
		t.Errorf("ReleaseKey of a %s lease a minute in, given a 1h lock timeout = %v; want it released", lockTimeout, err)
	}
	if err := release(long, epoch.Add(10*time.Minute), lockTimeout); err != nil {
		t.Errorf("ReleaseKey of the 10-minute lease when it expired = %v; want it released", err)
	}
}

func (s suite) adminReleaseFreesStuckKey(t *testing.T) {
	t.Parallel()
	store, a := s.admin(t)
	ctx := adminCtx(t)
	scope := newScope("alice")
	dead := s.mustLease(t, store, s.params(scope, "a", epoch)) // its process died
	now := epoch.Add(2 * time.Minute)
	before, err := a.ReleaseKey(ctx, s.releaseParams(scope, now, false))
	if err != nil {
		t.Fatalf("ReleaseKey: %v", err)
	}
	if before.Status != idemstore.StatusInFlight || before.Token != 1 {
		t.Errorf("ReleaseKey returned %+v, want the started key as it was", before)
	}
	// A different request is still refused: the key stays the first
	// request's.
	if rec := s.mustRecord(t, store, s.params(scope, "b", now)); rec.Status != idemstore.StatusInFlight {
		t.Errorf("a different request found status %q, want started", rec.Status)
	}
	// The client's retry runs, once.
	retry := s.mustLease(t, store, s.params(scope, "a", now))
	if rec := s.mustRecord(t, store, s.params(scope, "a", now)); rec.Status != idemstore.StatusInFlight {
		t.Errorf("a second retry found status %q, want started (the first retry holds it)", rec.Status)
	}
	if info := retry.Info(); info.Token <= before.Token {
		t.Errorf("the retry's lease has token %d; want one above the released holder's %d", info.Token, before.Token)
	}
	// The released holder is fenced while the retry holds the key, not
	// only once the key is completed.
	if err := dead.Complete(context.Background(), sampleResponse(`{"run":"dead"}`)); !errors.Is(err, idemstore.ErrLeaseLost) {
		t.Errorf("the released holder's Complete = %v, want ErrLeaseLost", err)
	}
	complete(t, retry, sampleResponse(`{"run":"retry"}`))
	rec := s.mustRecord(t, store, s.params(scope, "a", now.Add(time.Second)))
	if rec.Status != idemstore.StatusCompleted || string(rec.Response.Body) != `{"run":"retry"}` {
		t.Errorf("stored %q %q, want the retry's response", rec.Status, rec.Response.Body)
	}
}

func (s suite) adminForcedRelease(t *testing.T) {
	t.Parallel()
	store, a := s.admin(t)
	scope := newScope("alice")
	holder := s.mustLease(t, store, s.params(scope, "a", epoch))
	if _, err := a.ReleaseKey(adminCtx(t), s.releaseParams(scope, epoch.Add(time.Second), true)); err != nil {
		t.Fatalf("forced ReleaseKey: %v", err)
	}
	if err := holder.Complete(context.Background(), sampleResponse("{}")); !errors.Is(err, idemstore.ErrLeaseLost) {
		t.Errorf("the holder's Complete after a forced release = %v, want ErrLeaseLost", err)
	}
	complete(t, s.mustLease(t, store, s.params(scope, "a", epoch.Add(2*time.Second))), sampleResponse("{}"))
}

func (s suite) adminReleaseRefusesCompleted(t *testing.T) {
	t.Parallel()
	store, a := s.admin(t)
	ctx := adminCtx(t)
	scope := newScope("alice")
	complete(t, s.mustLease(t, store, s.params(scope, "a", epoch)), sampleResponse(`{"run":"first"}`))
	for _, force := range []bool{false, true} {
		if _, err := a.ReleaseKey(ctx, s.releaseParams(scope, epoch.Add(time.Hour), force)); !errors.Is(err, idemstore.ErrKeyCompleted) {
			t.Errorf("ReleaseKey (force %v) of a completed key = %v, want ErrKeyCompleted", force, err)
		}
	}
	if rec := s.mustRecord(t, store, s.params(scope, "a", epoch.Add(time.Hour))); string(rec.Response.Body) != `{"run":"first"}` {
		t.Errorf("after the refused release: %q, want the stored response", rec.Response.Body)
	}
	if _, err := a.ReleaseKey(ctx, s.releaseParams(newScope("alice"), epoch, false)); !errors.Is(err, idemstore.ErrKeyNotFound) {
		t.Errorf("ReleaseKey of an unknown key = %v, want ErrKeyNotFound", err)
	}
}

func (s suite) adminReleaseRejectsBadParams(t *testing.T) {
	t.Parallel()
	_, a := s.admin(t)
	scope := newScope("alice")
	for _, p := range []idemstore.ReleaseKeyParams{{Scope: scope, LockTimeout: lockTimeout}, {Scope: scope, Now: epoch}} {
		if _, err := a.ReleaseKey(adminCtx(t), p); err == nil || errors.Is(err, idemstore.ErrKeyNotFound) {
			t.Errorf("ReleaseKey(%+v) = %v, want a parameter error", p, err)
		}
	}
}

func (s suite) adminDeleteCompleted(t *testing.T) {
	t.Parallel()
	store, a := s.admin(t)
	ctx := adminCtx(t)
	scope := newScope("alice")
	complete(t, s.mustLease(t, store, s.params(scope, "a", epoch)), sampleResponse("{}"))
	before, err := a.DeleteKey(ctx, scope)
	if err != nil {
		t.Fatalf("DeleteKey: %v", err)
	}
	if before.Status != idemstore.StatusCompleted || before.Response == nil || before.Response.StatusCode != 201 || len(before.Response.Body) != 0 {
		t.Errorf("DeleteKey returned %+v, want the completed key without its body", before)
	}
	if _, err := a.GetKey(ctx, scope); !errors.Is(err, idemstore.ErrKeyNotFound) {
		t.Errorf("GetKey after DeleteKey = %v, want ErrKeyNotFound", err)
	}
	// The next request with the key runs as new, even a different one.
	complete(t, s.mustLease(t, store, s.params(scope, "b", epoch.Add(time.Minute))), sampleResponse("{}"))
	if _, err := a.DeleteKey(ctx, newScope("alice")); !errors.Is(err, idemstore.ErrKeyNotFound) {
		t.Errorf("DeleteKey of an unknown key = %v, want ErrKeyNotFound", err)
	}
}

func (s suite) adminDeleteRefusesStarted(t *testing.T) {
	t.Parallel()
	store, a := s.admin(t)
	scope := newScope("alice")
	l := s.mustLease(t, store, s.params(scope, "a", epoch))
	if _, err := a.DeleteKey(adminCtx(t), scope); !errors.Is(err, idemstore.ErrKeyInFlight) {
		t.Errorf("DeleteKey of a started key = %v, want ErrKeyInFlight", err)
	}
	complete(t, l, sampleResponse("{}"))
}

// adminDeleteFencesStalledHolder: the first holder of a key stalls, a
// retry takes the key over and completes it, and an operator deletes the
// completed key; the next request claims it anew, at token 1 again. The
// stalled holder, when it wakes, must not complete the new claim's key,
// whose token is its own: a lease is fenced by its row as well as its
// token.
func (s suite) adminDeleteFencesStalledHolder(t *testing.T) {
	t.Parallel()
	store, a := s.admin(t)
	ctx := adminCtx(t)
	scope := newScope("alice")
	stalled := s.mustLease(t, store, s.params(scope, "a", epoch))
	complete(t, s.mustLease(t, store, s.params(scope, "a", epoch.Add(lockTimeout+time.Second))), sampleResponse(`{"holder":"retry"}`))
	if _, err := a.DeleteKey(ctx, scope); err != nil {
		t.Fatalf("DeleteKey: %v", err)
	}
	fresh := s.mustLease(t, store, s.params(scope, "a", epoch.Add(lockTimeout+time.Minute)))
	if info := fresh.Info(); info.TakenOver || info.Token != 1 {
		t.Fatalf("claim after the delete: Info() = %+v; want a new key at token 1", info)
	}
	if err := stalled.Complete(ctx, sampleResponse(`{"holder":"stalled"}`)); !errors.Is(err, idemstore.ErrLeaseLost) {
		t.Errorf("the stalled holder's Complete = %v, want ErrLeaseLost", err)
	}
	complete(t, fresh, sampleResponse(`{"holder":"fresh"}`))
	if rec := s.mustRecord(t, store, s.params(scope, "a", epoch.Add(lockTimeout+2*time.Minute))); string(rec.Response.Body) != `{"holder":"fresh"}` {
		t.Errorf("stored %q, want the new holder's response", rec.Response.Body)
	}
}
