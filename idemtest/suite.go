package idemtest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem"
)

// Harness describes a store to [RunStoreTests].
type Harness struct {
	// NewStore returns a fresh, empty store. It is called once per subtest;
	// register cleanup with t.Cleanup. Required.
	NewStore func(t *testing.T) idem.Store

	// Write performs one business write, recording value, inside the
	// transaction that the lease put into ctx (see idem.Lease.Context). It
	// returns the write's error. Count returns how many committed business
	// writes recorded value. Both nil: the store has no transactions, and
	// the atomicity tests are skipped.
	Write func(ctx context.Context, store idem.Store, value string) error
	Count func(t *testing.T, store idem.Store, value string) int

	// NewUnmigrated returns a fresh store whose database has none of the
	// store's schema, for the schema tests. The store must have the
	// methods of a migrating store, as idempg and idemsqlite do:
	//
	//	Migrate(ctx context.Context) error
	//	MigrateTo(ctx context.Context, version int) error
	//	SchemaVersion(ctx context.Context) (int, error)
	//
	// nil skips the schema tests.
	NewUnmigrated func(t *testing.T) idem.Store
}

// purger is a store that deletes keys past retention. A store from
// Harness.NewStore that has this method gets the purge tests.
type purger interface {
	Purge(ctx context.Context, p idem.PurgeParams) (int64, error)
}

// migrator is a store with a versioned schema (see Harness.NewUnmigrated).
type migrator interface {
	Migrate(ctx context.Context) error
	MigrateTo(ctx context.Context, version int) error
	SchemaVersion(ctx context.Context) (int, error)
}

// epoch is the suite's clock origin; stores must use ClaimParams.Now.
var epoch = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

const (
	lockTimeout = 30 * time.Second
	retention   = 24 * time.Hour
)

// RunStoreTests runs the store conformance suite, in both modes, then the
// tests of purge and of the schema for stores that have them.
func RunStoreTests(t *testing.T, h Harness) {
	t.Helper()

	for _, mode := range []idem.Mode{idem.ModeAtomic, idem.ModeTwoPhase} {
		t.Run(mode.String(), func(t *testing.T) {
			s := suite{h: h, mode: mode}
			t.Run("ClaimsNewKey", s.claimsNewKey)
			t.Run("ReplaysCompletedKey", s.replaysCompletedKey)
			t.Run("ReportsKeyInFlightWithoutWaiting", s.reportsInFlight)
			t.Run("ReturnsRecordOnMismatch", s.returnsRecordOnMismatch)
			t.Run("ConcurrentClaimsElectOneOwner", s.concurrentClaims)
			t.Run("ReleaseFreesKey", s.releaseFreesKey)
			t.Run("ExpiredKeyIsReplaced", s.expiredKeyIsReplaced)
			t.Run("IsolatesTenants", s.isolatesTenants)
			t.Run("StoresLargeBinaryResponse", s.storesLargeResponse)
			t.Run("CancelledClaimLeavesNothing", s.cancelledClaim)
			t.Run("CompletedLeaseHasEnded", s.completedLeaseHasEnded)
			t.Run("ReleasedLeaseHasEnded", s.releasedLeaseHasEnded)
			if mode == idem.ModeTwoPhase {
				t.Run("TakesOverExpiredLease", s.takesOverExpiredLease)
				t.Run("NoTakeoverWithDifferentRequest", s.noTakeoverWithDifferentRequest)
				t.Run("StaleHolderCannotRelease", s.staleHolderCannotRelease)
				t.Run("StaleHolderOfExpiredKeyCannotComplete", s.staleHolderOfExpiredKey)
				t.Run("LostLeaseHasEnded", s.lostLeaseHasEnded)
			}
			t.Run("CommitsBusinessWritesWithResponse", s.commitsWrites)
			t.Run("ReleaseRollsBackBusinessWrites", s.releaseRollsBack)
			t.Run("NoWritesAfterLeaseEnded", s.noWritesAfterEnd)
			if mode == idem.ModeTwoPhase {
				t.Run("StaleHolderWritesRollBack", s.staleHolderWritesRollBack)
			}
		})
	}
	s := suite{h: h, mode: idem.ModeTwoPhase}
	t.Run("Purge", func(t *testing.T) {
		t.Run("DeletesKeysCreatedBefore", s.purgeDeletesOldKeys)
		t.Run("ZeroBatchSizeMeansDefault", s.purgeZeroBatchSize)
		t.Run("RejectsNegativeBatchSize", s.purgeRejectsNegativeBatchSize)
		t.Run("RequiresBefore", s.purgeRequiresBefore)
	})
	t.Run("Schema", func(t *testing.T) {
		t.Run("VersionBeforeAndAfterMigration", s.schemaVersion)
	})
}

type suite struct {
	h    Harness
	mode idem.Mode
	// inFlightDeadline overrides the in-flight test's deadline, for the
	// test that shows that the check fails for a store that waits.
	inFlightDeadline time.Duration
}

var keySeq struct {
	sync.Mutex
	n int
}

func newScope(client string) idem.Scope {
	keySeq.Lock()
	defer keySeq.Unlock()
	keySeq.n++
	return idem.Scope{ClientID: client, Key: fmt.Sprintf("key-%d-%d", time.Now().UnixNano(), keySeq.n)}
}

func hashOf(s string) []byte {
	sum := sha256.Sum256([]byte(s))
	return sum[:]
}

func (s suite) params(scope idem.Scope, body string, now time.Time) idem.ClaimParams {
	return idem.ClaimParams{
		Scope: scope, Method: http.MethodPost, Path: "/v1/payments",
		RequestHash: hashOf(body), RequestFields: []byte(`{"/amount":"` + body + `"}`),
		Mode: s.mode, Now: now, LockTimeout: lockTimeout, Retention: retention,
	}
}

func (s suite) claim(t testing.TB, store idem.Store, p idem.ClaimParams) idem.ClaimResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := store.Claim(ctx, p)
	if err != nil {
		t.Fatalf("Claim: %v", err)
	}
	if (res.Lease == nil) == (res.Record == nil) {
		t.Fatalf("Claim returned lease=%v record=%v; want exactly one", res.Lease != nil, res.Record != nil)
	}
	return res
}

func (s suite) mustLease(t testing.TB, store idem.Store, p idem.ClaimParams) idem.Lease {
	t.Helper()
	res := s.claim(t, store, p)
	if res.Lease == nil {
		t.Fatalf("Claim returned a record (status %q); want a lease", res.Record.Status)
	}
	return res.Lease
}

func (s suite) mustRecord(t testing.TB, store idem.Store, p idem.ClaimParams) *idem.Record {
	t.Helper()
	res := s.claim(t, store, p)
	if res.Record == nil {
		t.Fatalf("Claim returned a lease (token %d); want the existing record", res.Lease.Info().Token)
	}
	return res.Record
}

func complete(t testing.TB, l idem.Lease, resp *idem.Response) {
	t.Helper()
	if err := l.Complete(context.Background(), resp); err != nil {
		t.Fatalf("Complete: %v", err)
	}
}

func release(t testing.TB, l idem.Lease) {
	t.Helper()
	if err := l.Release(context.Background()); err != nil {
		t.Fatalf("Release: %v", err)
	}
}

func sampleResponse(body string) *idem.Response {
	return &idem.Response{
		StatusCode: http.StatusCreated,
		Header:     http.Header{"Content-Type": {"application/json"}, "Location": {"/v1/payments/pay_1"}},
		Body:       []byte(body),
	}
}

func sameTime(a, b time.Time) bool { return a.Sub(b).Abs() < time.Millisecond }

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
	if rec.Status != idem.StatusCompleted || rec.Response == nil {
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
	res idem.ClaimResult
	err error
}

// checkReportsInFlight checks that a claim of a key whose holder is still
// working answers that the key is in flight without waiting for the
// holder: the holder keeps its lease, or in atomic mode its transaction
// open, until the second claim has answered, and lets go only if it has
// not answered within deadline, which fails the test.
func (s suite) checkReportsInFlight(t testing.TB, store idem.Store) {
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
	if rec.Status != idem.StatusInFlight {
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
	if rec.Status != idem.StatusCompleted || string(rec.Response.Body) != "{}" {
		t.Errorf("record after mismatch = %q %q, want the completed original", rec.Status, rec.Response.Body)
	}
}

func (s suite) concurrentClaims(t *testing.T) {
	t.Parallel()
	store := s.h.NewStore(t)
	scope := newScope("alice")
	const n = 16
	results := make(chan idem.ClaimResult, n)
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
	var owners []idem.Lease
	started := 0
	for res := range results {
		switch {
		case res.Lease != nil:
			owners = append(owners, res.Lease)
		case res.Record.Status == idem.StatusInFlight:
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
			if err != nil || res.Record == nil || res.Record.Status != idem.StatusCompleted {
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
	if rec := s.mustRecord(t, store, s.params(scope, "b", epoch.Add(2*time.Second))); rec.Status != idem.StatusCompleted {
		t.Errorf("status = %q, want completed", rec.Status)
	}
}

func (s suite) expiredKeyIsReplaced(t *testing.T) {
	t.Parallel()
	store := s.h.NewStore(t)
	scope := newScope("alice")
	complete(t, s.mustLease(t, store, s.params(scope, "a", epoch)), sampleResponse(`{"old":true}`))
	if rec := s.mustRecord(t, store, s.params(scope, "b", epoch.Add(retention-time.Second))); rec.Status != idem.StatusCompleted {
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
	b := idem.Scope{ClientID: "bob", Key: a.Key}
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
	resp := &idem.Response{
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
	if rec := s.mustRecord(t, store, s.params(scope, "a", epoch.Add(lockTimeout-time.Second))); rec.Status != idem.StatusInFlight {
		t.Fatalf("within the lock timeout: status %q, want started", rec.Status)
	}
	taken := s.mustLease(t, store, s.params(scope, "a", epoch.Add(lockTimeout+time.Second)))
	if info := taken.Info(); !info.TakenOver || info.Token != 2 {
		t.Errorf("Info() = %+v, want taken over with token 2", info)
	}
	if err := old.Complete(context.Background(), sampleResponse(`{"holder":"old"}`)); !errors.Is(err, idem.ErrLeaseLost) {
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
	if rec := s.mustRecord(t, store, s.params(scope, "a", epoch.Add(lockTimeout+2*time.Second))); rec.Status != idem.StatusInFlight || rec.Token != 2 {
		t.Errorf("after the stale release: status %q token %d, want started with token 2", rec.Status, rec.Token)
	}
	complete(t, taken, sampleResponse("{}"))
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
	if err := old.Complete(context.Background(), sampleResponse(`{"holder":"old"}`)); !errors.Is(err, idem.ErrLeaseLost) {
		t.Errorf("the old holder's Complete = %v, want ErrLeaseLost", err)
	}
	complete(t, fresh, sampleResponse(`{"holder":"new"}`))
	if rec := s.mustRecord(t, store, s.params(scope, "a", later.Add(time.Second))); string(rec.Response.Body) != `{"holder":"new"}` {
		t.Errorf("stored %q, want the new holder's response", rec.Response.Body)
	}
}

func (s suite) needTx(t *testing.T) {
	t.Helper()
	if s.h.Write == nil || s.h.Count == nil {
		t.Skip("the store has no transactions (Harness.Write and Harness.Count are nil)")
	}
}

func (s suite) commitsWrites(t *testing.T) {
	s.needTx(t)
	t.Parallel()
	store := s.h.NewStore(t)
	scope := newScope("alice")
	l := s.mustLease(t, store, s.params(scope, "a", epoch))
	if err := s.h.Write(l.Context(context.Background()), store, scope.Key); err != nil {
		t.Fatalf("business write: %v", err)
	}
	complete(t, l, sampleResponse("{}"))
	if n := s.h.Count(t, store, scope.Key); n != 1 {
		t.Errorf("%d business rows after Complete, want 1", n)
	}
}

func (s suite) releaseRollsBack(t *testing.T) {
	s.needTx(t)
	t.Parallel()
	store := s.h.NewStore(t)
	scope := newScope("alice")
	l := s.mustLease(t, store, s.params(scope, "a", epoch))
	if err := s.h.Write(l.Context(context.Background()), store, scope.Key); err != nil {
		t.Fatalf("business write: %v", err)
	}
	release(t, l)
	if n := s.h.Count(t, store, scope.Key); n != 0 {
		t.Errorf("%d business rows after Release, want 0", n)
	}
	// The key is free again and the retry's write commits once.
	l = s.mustLease(t, store, s.params(scope, "a", epoch.Add(time.Second)))
	if err := s.h.Write(l.Context(context.Background()), store, scope.Key); err != nil {
		t.Fatalf("business write: %v", err)
	}
	complete(t, l, sampleResponse("{}"))
	if n := s.h.Count(t, store, scope.Key); n != 1 {
		t.Errorf("%d business rows after the retry, want 1", n)
	}
}

func (s suite) staleHolderWritesRollBack(t *testing.T) {
	s.needTx(t)
	t.Parallel()
	store := s.h.NewStore(t)
	scope := newScope("alice")
	old := s.mustLease(t, store, s.params(scope, "a", epoch))
	taken := s.mustLease(t, store, s.params(scope, "a", epoch.Add(lockTimeout+time.Second)))

	// The new holder finishes first; the stale holder, waking up, writes and
	// tries to commit: the fence must roll its writes back.
	if err := s.h.Write(taken.Context(context.Background()), store, scope.Key+"-new"); err != nil {
		t.Fatalf("new holder's write: %v", err)
	}
	complete(t, taken, sampleResponse(`{"holder":"new"}`))
	if err := s.h.Write(old.Context(context.Background()), store, scope.Key+"-old"); err != nil {
		t.Fatalf("stale holder's write: %v", err)
	}
	if err := old.Complete(context.Background(), sampleResponse(`{"holder":"old"}`)); !errors.Is(err, idem.ErrLeaseLost) {
		t.Errorf("stale holder's Complete = %v, want ErrLeaseLost", err)
	}
	if n := s.h.Count(t, store, scope.Key+"-old"); n != 0 {
		t.Errorf("%d rows from the stale holder, want 0", n)
	}
	if n := s.h.Count(t, store, scope.Key+"-new"); n != 1 {
		t.Errorf("%d rows from the new holder, want 1", n)
	}
}

// wantEnded checks that err, from a call on an ended lease, wraps
// idem.ErrLeaseEnded.
func wantEnded(t testing.TB, call string, err error) {
	t.Helper()
	if !errors.Is(err, idem.ErrLeaseEnded) {
		t.Errorf("%s on an ended lease = %v, want an error wrapping idem.ErrLeaseEnded", call, err)
	}
}

func (s suite) completedLeaseHasEnded(t *testing.T) {
	t.Parallel()
	store := s.h.NewStore(t)
	scope := newScope("alice")
	l := s.mustLease(t, store, s.params(scope, "a", epoch))
	complete(t, l, sampleResponse(`{"call":"first"}`))
	wantEnded(t, "a second Complete", l.Complete(context.Background(), sampleResponse(`{"call":"second"}`)))
	wantEnded(t, "Release after Complete", l.Release(context.Background()))
	rec := s.mustRecord(t, store, s.params(scope, "a", epoch.Add(time.Second)))
	if rec.Status != idem.StatusCompleted || string(rec.Response.Body) != `{"call":"first"}` {
		t.Errorf("record = %q %q, want the first response, completed", rec.Status, rec.Response.Body)
	}
}

func (s suite) releasedLeaseHasEnded(t *testing.T) {
	t.Parallel()
	store := s.h.NewStore(t)
	scope := newScope("alice")
	l := s.mustLease(t, store, s.params(scope, "a", epoch))
	release(t, l)
	wantEnded(t, "a second Release", l.Release(context.Background()))
	wantEnded(t, "Complete after Release", l.Complete(context.Background(), sampleResponse(`{"holder":"old"}`)))
	// The ended lease touches nothing of the key's next holder.
	next := s.mustLease(t, store, s.params(scope, "a", epoch.Add(time.Second)))
	wantEnded(t, "a third Release", l.Release(context.Background()))
	if rec := s.mustRecord(t, store, s.params(scope, "a", epoch.Add(2*time.Second))); rec.Status != idem.StatusInFlight {
		t.Errorf("the next holder's key is %q, want started", rec.Status)
	}
	complete(t, next, sampleResponse(`{"holder":"next"}`))
	if rec := s.mustRecord(t, store, s.params(scope, "a", epoch.Add(3*time.Second))); string(rec.Response.Body) != `{"holder":"next"}` {
		t.Errorf("stored %q, want the next holder's response", rec.Response.Body)
	}
}

func (s suite) lostLeaseHasEnded(t *testing.T) {
	t.Parallel()
	store := s.h.NewStore(t)
	scope := newScope("alice")
	old := s.mustLease(t, store, s.params(scope, "a", epoch))
	taken := s.mustLease(t, store, s.params(scope, "a", epoch.Add(lockTimeout+time.Second)))
	if err := old.Complete(context.Background(), sampleResponse(`{"holder":"old"}`)); !errors.Is(err, idem.ErrLeaseLost) {
		t.Fatalf("stale holder's Complete = %v, want ErrLeaseLost", err)
	}
	wantEnded(t, "Release after a lost Complete", old.Release(context.Background()))
	if rec := s.mustRecord(t, store, s.params(scope, "a", epoch.Add(lockTimeout+2*time.Second))); rec.Status != idem.StatusInFlight || rec.Token != 2 {
		t.Errorf("after the stale holder's calls: status %q token %d, want started with token 2", rec.Status, rec.Token)
	}
	complete(t, taken, sampleResponse("{}"))
}

func (s suite) noWritesAfterEnd(t *testing.T) {
	s.needTx(t)
	t.Parallel()
	store := s.h.NewStore(t)
	scope := newScope("alice")
	l := s.mustLease(t, store, s.params(scope, "a", epoch))
	ctx := l.Context(context.Background())
	complete(t, l, sampleResponse("{}"))
	wantEnded(t, "a business write", s.h.Write(ctx, store, scope.Key))
	if n := s.h.Count(t, store, scope.Key); n != 0 {
		t.Errorf("%d business rows written after the lease ended, want 0", n)
	}
}

// purgerOf returns store's Purge, or skips the test for a store without one.
func purgerOf(t *testing.T, store idem.Store) purger {
	t.Helper()
	p, ok := store.(purger)
	if !ok {
		t.Skip("the store has no Purge(context.Context, idem.PurgeParams) (int64, error) method")
	}
	return p
}

// completedKeys stores n completed keys created at created.
func (s suite) completedKeys(t *testing.T, store idem.Store, n int, created time.Time) []idem.Scope {
	t.Helper()
	scopes := make([]idem.Scope, n)
	for i := range scopes {
		scopes[i] = newScope("alice")
		complete(t, s.mustLease(t, store, s.params(scopes[i], "a", created)), sampleResponse("{}"))
	}
	return scopes
}

// wantKept checks that the keys of scopes are still stored, at now.
func (s suite) wantKept(t *testing.T, store idem.Store, scopes []idem.Scope, now time.Time) {
	t.Helper()
	for _, scope := range scopes {
		if rec := s.mustRecord(t, store, s.params(scope, "a", now)); rec.Status != idem.StatusCompleted {
			t.Errorf("key %s: status %q, want completed", scope.Key, rec.Status)
		}
	}
}

func (s suite) purgeDeletesOldKeys(t *testing.T) {
	t.Parallel()
	store := s.h.NewStore(t)
	pg := purgerOf(t, store)
	old := s.completedKeys(t, store, 5, epoch)
	young := s.completedKeys(t, store, 2, epoch.Add(2*time.Hour))
	n, err := pg.Purge(context.Background(), idem.PurgeParams{Before: epoch.Add(time.Hour), BatchSize: 2})
	if err != nil || n != int64(len(old)) {
		t.Fatalf("Purge = %d, %v; want %d, nil", n, err, len(old))
	}
	s.wantKept(t, store, young, epoch.Add(3*time.Hour))
	for _, scope := range old {
		// Within retention, so the key was purged, not expired.
		l := s.mustLease(t, store, s.params(scope, "a", epoch.Add(3*time.Hour)))
		release(t, l)
	}
	if n, err := pg.Purge(context.Background(), idem.PurgeParams{Before: epoch.Add(time.Hour), BatchSize: 2}); err != nil || n != 0 {
		t.Errorf("second Purge = %d, %v; want 0, nil", n, err)
	}
}

func (s suite) purgeZeroBatchSize(t *testing.T) {
	t.Parallel()
	store := s.h.NewStore(t)
	pg := purgerOf(t, store)
	old := s.completedKeys(t, store, 3, epoch)
	n, err := pg.Purge(context.Background(), idem.PurgeParams{Before: epoch.Add(time.Hour)})
	if err != nil || n != int64(len(old)) {
		t.Fatalf("Purge with BatchSize 0 = %d, %v; want %d, nil (the default batch size)", n, err, len(old))
	}
}

func (s suite) purgeRejectsNegativeBatchSize(t *testing.T) {
	t.Parallel()
	store := s.h.NewStore(t)
	pg := purgerOf(t, store)
	old := s.completedKeys(t, store, 2, epoch)
	p := idem.PurgeParams{Before: epoch.Add(time.Hour), BatchSize: -1}
	n, err := pg.Purge(context.Background(), p)
	if want := p.Validate(); want == nil || !errors.Is(err, want) || n != 0 {
		t.Errorf("Purge with BatchSize -1 = %d, %v; want 0 and an error wrapping %v", n, err, want)
	}
	s.wantKept(t, store, old, epoch.Add(2*time.Hour))
}

func (s suite) purgeRequiresBefore(t *testing.T) {
	t.Parallel()
	store := s.h.NewStore(t)
	pg := purgerOf(t, store)
	old := s.completedKeys(t, store, 1, epoch)
	p := idem.PurgeParams{BatchSize: 10}
	n, err := pg.Purge(context.Background(), p)
	if want := p.Validate(); want == nil || !errors.Is(err, want) || n != 0 {
		t.Errorf("Purge without Before = %d, %v; want 0 and an error wrapping %v", n, err, want)
	}
	s.wantKept(t, store, old, epoch.Add(2*time.Hour))
}

func (s suite) schemaVersion(t *testing.T) {
	if s.h.NewUnmigrated == nil {
		t.Skip("Harness.NewUnmigrated is nil")
	}
	t.Parallel()
	store := s.h.NewUnmigrated(t)
	m, ok := store.(migrator)
	if !ok {
		t.Fatalf("%T from Harness.NewUnmigrated has no Migrate, MigrateTo and SchemaVersion methods", store)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	version := func(want int, when string) {
		t.Helper()
		if v, err := m.SchemaVersion(ctx); err != nil || v != want {
			t.Fatalf("SchemaVersion %s = %d, %v; want %d", when, v, err, want)
		}
	}
	// Reading the version of an empty database finds none and changes
	// nothing, however often it is read.
	version(0, "before migration")
	version(0, "read again before migration")
	if err := m.Migrate(ctx); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	newest, err := m.SchemaVersion(ctx)
	if err != nil || newest < 1 {
		t.Fatalf("SchemaVersion after Migrate = %d, %v; want the newest version, at least 1", newest, err)
	}
	complete(t, s.mustLease(t, store, s.params(newScope("alice"), "a", epoch)), sampleResponse("{}"))
	if err := m.Migrate(ctx); err != nil {
		t.Fatalf("Migrate again: %v", err)
	}
	version(newest, "after a second Migrate")
	if err := m.MigrateTo(ctx, newest+1); err == nil {
		t.Errorf("MigrateTo(%d), past the newest, succeeded", newest+1)
	}
	version(newest, "after MigrateTo past the newest")
	if err := m.MigrateTo(ctx, 0); err != nil {
		t.Fatalf("MigrateTo(0): %v", err)
	}
	version(0, "after MigrateTo(0)")
	if err := m.MigrateTo(ctx, -1); err != nil {
		t.Fatalf("MigrateTo(-1): %v", err)
	}
	version(newest, "after MigrateTo(-1)")
	complete(t, s.mustLease(t, store, s.params(newScope("alice"), "a", epoch)), sampleResponse("{}"))
}
