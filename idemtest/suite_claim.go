package idemtest

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemstore"
)

// The conformance cases about claims: new keys, replays, keys in flight,
// mismatches, races, expiry, takeovers and tenants.

func (s suite) claimsNewKey(t *testing.T) {
	t.Parallel()
	store := s.h.NewStore(t)
	l := s.mustLease(t, store, s.params(newScope("alice"), "a", epoch))
	if info := l.Info(); info.Token != 1 || info.TakenOver {
		t.Errorf("Info() = %+v, want token 1, not taken over", info)
	}
	release(t, l)
}

func (s suite) replaysCompletedKey(t *testing.T) {
	t.Parallel()
	store := s.h.NewStore(t)
	scope := newScope("alice")
	p := s.params(scope, "a", epoch)
	complete(t, s.mustLease(t, store, p), sampleResponse(`{"id":"pay_1"}`))

	later := s.params(scope, "a", epoch.Add(time.Hour))
	rec := s.mustRecord(t, store, later)
	if rec.Status != idemstore.StatusCompleted || rec.Response == nil {
		t.Fatalf("record status %q, response %v; want completed with a response", rec.Status, rec.Response)
	}
	want := sampleResponse(`{"id":"pay_1"}`)
	if rec.Response.StatusCode != want.StatusCode || !bytes.Equal(rec.Response.Body, want.Body) ||
		rec.Response.Header.Get("Location") != "/v1/payments/pay_1" || rec.Response.Header.Get("Content-Type") != "application/json" {
		t.Errorf("response = %d %v %q; want %d %v %q", rec.Response.StatusCode, rec.Response.Header, rec.Response.Body, want.StatusCode, want.Header, want.Body)
	}
	if rec.Scope != scope || rec.Method != p.Method || rec.Path != p.Path {
		t.Errorf("record identity = %+v %s %s; want %+v %s %s", rec.Scope, rec.Method, rec.Path, scope, p.Method, p.Path)
	}
	if !bytes.Equal(rec.RequestHash, p.RequestHash) || !bytes.Equal(rec.RequestFields, p.RequestFields) {
		t.Errorf("record request hash/fields changed: %x %q", rec.RequestHash, rec.RequestFields)
	}
	if !sameTime(rec.CreatedAt, epoch) {
		t.Errorf("CreatedAt = %v, want %v (the claim's Now)", rec.CreatedAt, epoch)
	}
}

func (s suite) reportsInFlight(t *testing.T) {
	t.Parallel()
	s.checkReportsInFlight(t, s.h.NewStore(t))
}

// inFlightDeadline is how long the in-flight test lets a second claim take
// while the holder keeps the key. A store that answers at once does so in
// far less on any machine; a store that waits for the holder never answers
// before the holder lets go, however long the deadline.
const inFlightDeadline = 10 * time.Second

// claimAnswer is what a Claim returned.
type claimAnswer struct {
	res idemstore.ClaimResult
	err error
}

// checkReportsInFlight checks that a claim of a key whose holder is still
// working answers that the key is in flight without waiting for the
// holder: the holder keeps its lease, or in atomic mode its transaction
// open, until the second claim has answered, and lets go only if it has
// not answered within deadline, which fails the test.
func (s suite) checkReportsInFlight(t testing.TB, store idemstore.Store) {
	t.Helper()
	scope := newScope("alice")
	l := s.mustLease(t, store, s.params(scope, "a", epoch))

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	answered := make(chan claimAnswer, 1)
	go func() {
		res, err := store.Claim(ctx, s.params(scope, "a", epoch.Add(time.Second)))
		answered <- claimAnswer{res, err}
	}()
	deadline := s.inFlightDeadline
	if deadline == 0 {
		deadline = inFlightDeadline
	}
	timer := time.NewTimer(deadline)
	defer timer.Stop()
	var a claimAnswer
	select {
	case a = <-answered:
		release(t, l) // only now: the answer came while the key was held
	case <-timer.C:
		// Let the holder go, so that a waiting claim returns, then fail.
		_ = l.Release(context.Background())
		cancel()
		select {
		case a = <-answered:
			if a.res.Lease != nil {
				_ = a.res.Lease.Release(context.Background())
			}
		case <-time.After(inFlightDeadline):
		}
		t.Fatalf("a second claim of a key in flight had not answered after %v while the holder kept the key: the store waits for the holder instead of reporting the key in flight at once", deadline)
	}
	if a.err != nil || a.res.Record == nil {
		if a.res.Lease != nil {
			_ = a.res.Lease.Release(context.Background())
		}
		t.Fatalf("second claim: record=%v lease=%v err=%v; want the record of the key in flight", a.res.Record != nil, a.res.Lease != nil, a.err)
	}
	rec := a.res.Record
	if rec.Status != idemstore.StatusInFlight {
		t.Errorf("status = %q, want started", rec.Status)
	}
	if s.mode == idem.ModeTwoPhase && !sameTime(rec.LockedAt, epoch) {
		t.Errorf("LockedAt = %v, want %v", rec.LockedAt, epoch)
	}
}

func (s suite) returnsRecordOnMismatch(t *testing.T) {
	t.Parallel()
	store := s.h.NewStore(t)
	scope := newScope("alice")
	complete(t, s.mustLease(t, store, s.params(scope, "a", epoch)), sampleResponse("{}"))
	rec := s.mustRecord(t, store, s.params(scope, "b", epoch.Add(time.Minute)))
	if !bytes.Equal(rec.RequestHash, hashOf("a")) {
		t.Errorf("RequestHash = %x, want the first request's %x", rec.RequestHash, hashOf("a"))
	}
	// The mismatching claim must not have changed the record.
	rec = s.mustRecord(t, store, s.params(scope, "a", epoch.Add(2*time.Minute)))
	if rec.Status != idemstore.StatusCompleted || string(rec.Response.Body) != "{}" {
		t.Errorf("record after mismatch = %q %q, want the completed original", rec.Status, rec.Response.Body)
	}
}

func (s suite) concurrentClaims(t *testing.T) {
	t.Parallel()
	store := s.h.NewStore(t)
	scope := newScope("alice")
	const n = 16
	results := make(chan idemstore.ClaimResult, n)
	errs := make(chan error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			res, err := store.Claim(ctx, s.params(scope, "a", epoch))
			if err != nil {
				errs <- err
				return
			}
			results <- res
		}()
	}
	close(start)
	wg.Wait()
	close(results)
	close(errs)
	for err := range errs {
		t.Errorf("concurrent claim failed: %v", err)
	}
	var owners []idemstore.Lease
	started := 0
	for res := range results {
		switch {
		case res.Lease != nil:
			owners = append(owners, res.Lease)
		case res.Record.Status == idemstore.StatusInFlight:
			started++
		}
	}
	if len(owners) != 1 || started != n-1 {
		t.Fatalf("%d owners and %d in-flight answers of %d claims; want 1 and %d", len(owners), started, n, n-1)
	}
	complete(t, owners[0], sampleResponse(`{"id":"pay_1"}`))

	var replays sync.WaitGroup
	for range n {
		replays.Add(1)
		go func() {
			defer replays.Done()
			res, err := store.Claim(context.Background(), s.params(scope, "a", epoch.Add(time.Second)))
			if err != nil || res.Record == nil || res.Record.Status != idemstore.StatusCompleted {
				t.Errorf("claim after completion: lease=%v err=%v; want the completed record", res.Lease != nil, err)
			}
		}()
	}
	replays.Wait()
}

func (s suite) releaseFreesKey(t *testing.T) {
	t.Parallel()
	store := s.h.NewStore(t)
	scope := newScope("alice")
	release(t, s.mustLease(t, store, s.params(scope, "a", epoch)))
	// A corrected retry, even with another body, owns the key.
	l := s.mustLease(t, store, s.params(scope, "b", epoch.Add(time.Second)))
	complete(t, l, sampleResponse("{}"))
	if rec := s.mustRecord(t, store, s.params(scope, "b", epoch.Add(2*time.Second))); rec.Status != idemstore.StatusCompleted {
		t.Errorf("status = %q, want completed", rec.Status)
	}
}

func (s suite) expiredKeyIsReplaced(t *testing.T) {
	t.Parallel()
	store := s.h.NewStore(t)
	scope := newScope("alice")
	complete(t, s.mustLease(t, store, s.params(scope, "a", epoch)), sampleResponse(`{"old":true}`))
	if rec := s.mustRecord(t, store, s.params(scope, "b", epoch.Add(retention-time.Second))); rec.Status != idemstore.StatusCompleted {
		t.Fatalf("before retention: status %q, want completed", rec.Status)
	}
	// Past retention the key is gone: even another request owns it anew.
	later := epoch.Add(retention + time.Second)
	l := s.mustLease(t, store, s.params(scope, "b", later))
	if info := l.Info(); info.TakenOver {
		t.Errorf("Info() = %+v; an expired key is new, not taken over", info)
	}
	complete(t, l, sampleResponse(`{"new":true}`))
	rec := s.mustRecord(t, store, s.params(scope, "b", later.Add(time.Second)))
	if string(rec.Response.Body) != `{"new":true}` || !bytes.Equal(rec.RequestHash, hashOf("b")) || !sameTime(rec.CreatedAt, later) {
		t.Errorf("record = %q hash %x created %v; want the new request's", rec.Response.Body, rec.RequestHash, rec.CreatedAt)
	}
}

func (s suite) isolatesTenants(t *testing.T) {
	t.Parallel()
	store := s.h.NewStore(t)
	a := newScope("alice")
	b := idemstore.Scope{ClientID: "bob", Key: a.Key}
	complete(t, s.mustLease(t, store, s.params(a, "a", epoch)), sampleResponse(`{"client":"alice"}`))
	// Bob's same key, with another body, is his own new key.
	lb := s.mustLease(t, store, s.params(b, "b", epoch))
	complete(t, lb, sampleResponse(`{"client":"bob"}`))
	ra := s.mustRecord(t, store, s.params(a, "a", epoch.Add(time.Second)))
	rb := s.mustRecord(t, store, s.params(b, "b", epoch.Add(time.Second)))
	if string(ra.Response.Body) != `{"client":"alice"}` || string(rb.Response.Body) != `{"client":"bob"}` {
		t.Errorf("alice sees %q, bob sees %q", ra.Response.Body, rb.Response.Body)
	}
	if ra.Scope != a || rb.Scope != b {
		t.Errorf("scopes = %+v, %+v", ra.Scope, rb.Scope)
	}
}

func (s suite) storesLargeResponse(t *testing.T) {
	t.Parallel()
	store := s.h.NewStore(t)
	scope := newScope("alice")
	body := make([]byte, 1<<20)
	for i := range body {
		body[i] = byte(i * 7)
	}
	resp := &idemstore.Response{
		StatusCode: http.StatusAccepted,
		Header:     http.Header{"Content-Type": {"application/octet-stream"}, "X-Multi": {"one", "two"}},
		Body:       body,
	}
	complete(t, s.mustLease(t, store, s.params(scope, "a", epoch)), resp)
	rec := s.mustRecord(t, store, s.params(scope, "a", epoch.Add(time.Second)))
	if rec.Response.StatusCode != http.StatusAccepted || !bytes.Equal(rec.Response.Body, body) {
		t.Errorf("response = %d, %d bytes (equal=%v); want 202 and the same %d bytes", rec.Response.StatusCode, len(rec.Response.Body), bytes.Equal(rec.Response.Body, body), len(body))
	}
	if got := rec.Response.Header.Values("X-Multi"); len(got) != 2 || got[0] != "one" || got[1] != "two" {
		t.Errorf("X-Multi = %q, want [one two]", got)
	}
}

func (s suite) cancelledClaim(t *testing.T) {
	t.Parallel()
	store := s.h.NewStore(t)
	scope := newScope("alice")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	res, err := store.Claim(ctx, s.params(scope, "a", epoch))
	if err == nil {
		if res.Lease != nil {
			release(t, res.Lease)
		}
		t.Fatalf("Claim with a cancelled context succeeded; want an error")
	}
	l := s.mustLease(t, store, s.params(scope, "a", epoch))
	complete(t, l, sampleResponse("{}"))
}

func (s suite) takesOverExpiredLease(t *testing.T) {
	t.Parallel()
	store := s.h.NewStore(t)
	scope := newScope("alice")
	old := s.mustLease(t, store, s.params(scope, "a", epoch))
	if rec := s.mustRecord(t, store, s.params(scope, "a", epoch.Add(lockTimeout-time.Second))); rec.Status != idemstore.StatusInFlight {
		t.Fatalf("within the lock timeout: status %q, want started", rec.Status)
	}
	taken := s.mustLease(t, store, s.params(scope, "a", epoch.Add(lockTimeout+time.Second)))
	if info := taken.Info(); !info.TakenOver || info.Token != 2 {
		t.Errorf("Info() = %+v, want taken over with token 2", info)
	}
	if err := old.Complete(context.Background(), sampleResponse(`{"holder":"old"}`)); !errors.Is(err, idemstore.ErrLeaseLost) {
		t.Errorf("stale holder's Complete = %v, want ErrLeaseLost", err)
	}
	complete(t, taken, sampleResponse(`{"holder":"new"}`))
	rec := s.mustRecord(t, store, s.params(scope, "a", epoch.Add(lockTimeout+2*time.Second)))
	if string(rec.Response.Body) != `{"holder":"new"}` || rec.Token != 2 {
		t.Errorf("stored %q token %d, want the new holder's response and token 2", rec.Response.Body, rec.Token)
	}
}

func (s suite) noTakeoverWithDifferentRequest(t *testing.T) {
	t.Parallel()
	store := s.h.NewStore(t)
	scope := newScope("alice")
	l := s.mustLease(t, store, s.params(scope, "a", epoch))
	rec := s.mustRecord(t, store, s.params(scope, "b", epoch.Add(lockTimeout+time.Second)))
	if !bytes.Equal(rec.RequestHash, hashOf("a")) {
		t.Errorf("RequestHash = %x, want the original request's", rec.RequestHash)
	}
	complete(t, l, sampleResponse("{}"))
}

func (s suite) staleHolderCannotRelease(t *testing.T) {
	t.Parallel()
	store := s.h.NewStore(t)
	scope := newScope("alice")
	old := s.mustLease(t, store, s.params(scope, "a", epoch))
	taken := s.mustLease(t, store, s.params(scope, "a", epoch.Add(lockTimeout+time.Second)))
	release(t, old) // must not free the new holder's key
	if rec := s.mustRecord(t, store, s.params(scope, "a", epoch.Add(lockTimeout+2*time.Second))); rec.Status != idemstore.StatusInFlight || rec.Token != 2 {
		t.Errorf("after the stale release: status %q token %d, want started with token 2", rec.Status, rec.Token)
	}
	complete(t, taken, sampleResponse("{}"))
}

// staleHolderAfterTakeoverRelease: a lease that took a key over and then
// released it, before any recovery point, deletes it, and the next claim
// makes it anew, at token 1 again: the token of the holder it was taken
// from, which may still run. That holder's Complete must not pass on the
// new claim's key (the chaos run once stored a second payment so): its
// fence is its row as well as its token.
func (s suite) staleHolderAfterTakeoverRelease(t *testing.T) {
	t.Parallel()
	store := s.h.NewStore(t)
	scope := newScope("alice")
	old := s.mustLease(t, store, s.params(scope, "a", epoch))
	taken := s.mustLease(t, store, s.params(scope, "a", epoch.Add(lockTimeout+time.Second)))
	release(t, taken)
	again := s.mustLease(t, store, s.params(scope, "a", epoch.Add(lockTimeout+2*time.Second)))
	if info := again.Info(); info.TakenOver || info.Token != 1 {
		t.Errorf("claim after the release: Info() = %+v; want a new key at token 1", info)
	}
	if err := old.Complete(context.Background(), sampleResponse(`{"holder":"old"}`)); !errors.Is(err, idemstore.ErrLeaseLost) {
		t.Errorf("the first holder's Complete = %v, want ErrLeaseLost", err)
	}
	complete(t, again, sampleResponse(`{"holder":"again"}`))
	if rec := s.mustRecord(t, store, s.params(scope, "a", epoch.Add(lockTimeout+3*time.Second))); string(rec.Response.Body) != `{"holder":"again"}` {
		t.Errorf("stored %q, want the last holder's response", rec.Response.Body)
	}
}

func (s suite) staleHolderOfExpiredKey(t *testing.T) {
	t.Parallel()
	store := s.h.NewStore(t)
	scope := newScope("alice")
	old := s.mustLease(t, store, s.params(scope, "a", epoch))
	// Long past retention the key is new again, even while its old holder
	// still thinks it owns it.
	later := epoch.Add(retention + time.Second)
	fresh := s.mustLease(t, store, s.params(scope, "a", later))
	if info := fresh.Info(); info.TakenOver || info.Token <= 1 {
		t.Errorf("Info() = %+v; want a new lease whose token is above the old one's", info)
	}
	if err := old.Complete(context.Background(), sampleResponse(`{"holder":"old"}`)); !errors.Is(err, idemstore.ErrLeaseLost) {
		t.Errorf("the old holder's Complete = %v, want ErrLeaseLost", err)
	}
	complete(t, fresh, sampleResponse(`{"holder":"new"}`))
	if rec := s.mustRecord(t, store, s.params(scope, "a", later.Add(time.Second))); string(rec.Response.Body) != `{"holder":"new"}` {
		t.Errorf("stored %q, want the new holder's response", rec.Response.Body)
	}
}

// leaseCarriesCreatedAt: a lease's Info().CreatedAt is its row's
// created_at as the store keeps it, which a takeover keeps and a row made
// anew (past retention, or after a purge) renews. idem.Phases derive
// their later phases' downstream keys from it: the same for every holder
// of one row, new for a key reused after its retention.
func (s suite) leaseCarriesCreatedAt(t *testing.T) {
	t.Parallel()
	store := s.h.NewStore(t)
	scope := newScope("alice")
	// At a time below a microsecond, which some stores cannot keep.
	wantAbout := func(what string, got, at time.Time) {
		t.Helper()
		if got.After(at) || at.Sub(got) >= time.Microsecond {
			t.Fatalf("%s: CreatedAt = %v; want the claim's Now, %v, as the store keeps it", what, got, at)
		}
	}
	stored := func(what string, at time.Time, want time.Time) {
		t.Helper()
		if rec := s.mustRecord(t, store, s.params(scope, "a", at)); !rec.CreatedAt.Equal(want) {
			t.Fatalf("%s: the row's CreatedAt = %v; the lease's = %v", what, rec.CreatedAt, want)
		}
	}
	t0 := epoch.Add(1234567 * time.Nanosecond)
	first := s.mustLease(t, store, s.params(scope, "a", t0))
	created := first.Info().CreatedAt
	wantAbout("first claim", created, t0)
	if s.mode == idem.ModeTwoPhase {
		taken := s.mustLease(t, store, s.params(scope, "a", t0.Add(lockTimeout+time.Second)))
		if got := taken.Info().CreatedAt; !got.Equal(created) {
			t.Fatalf("takeover: CreatedAt = %v; want the row's, %v", got, created)
		}
		first = taken
	}
	complete(t, first, sampleResponse("{}"))
	stored("completed", t0.Add(lockTimeout+2*time.Second), created)

	t1 := t0.Add(retention + time.Hour)
	replaced := s.mustLease(t, store, s.params(scope, "a", t1))
	renewed := replaced.Info().CreatedAt
	wantAbout("claim past retention", renewed, t1)
	complete(t, replaced, sampleResponse("{}"))
	stored("replaced", t1.Add(time.Second), renewed)

	pg, ok := store.(purger)
	if !ok {
		return
	}
	t2 := t1.Add(retention + time.Hour)
	if n, err := pg.Purge(context.Background(), idemstore.PurgeParams{Before: t2.Add(-retention)}); err != nil || n != 1 {
		t.Fatalf("Purge = %d, %v; want the key", n, err)
	}
	again := s.mustLease(t, store, s.params(scope, "a", t2))
	wantAbout("claim after the purge", again.Info().CreatedAt, t2)
	complete(t, again, sampleResponse("{}"))
	stored("claimed after the purge", t2.Add(time.Second), again.Info().CreatedAt)
}

// refusesAtomicClaim: a store that keeps two-phase keys only
// (Harness.TwoPhaseOnly) refuses a claim in ModeAtomic with an error, and
// the key stays free for a two-phase claim.
func (s suite) refusesAtomicClaim(t *testing.T) {
	t.Parallel()
	store := s.h.NewStore(t)
	scope := newScope("alice")
	res, err := store.Claim(context.Background(), s.params(scope, "a", epoch))
	if err == nil {
		if res.Lease != nil {
			_ = res.Lease.Release(context.Background())
		}
		t.Fatalf("an atomic claim succeeded (lease=%v); want an error from a two-phase-only store", res.Lease != nil)
	}
	twoPhase := suite{h: s.h, mode: idem.ModeTwoPhase}
	l := twoPhase.mustLease(t, store, twoPhase.params(scope, "a", epoch))
	if info := l.Info(); info.Token != 1 || info.TakenOver {
		t.Errorf("two-phase claim after the refused one: Info() = %+v; want a new key at token 1", info)
	}
	release(t, l)
}
