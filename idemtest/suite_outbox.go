package idemtest

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemoutbox"
)

// OutboxStore is a store with an outbox, as idempg.Store and
// idemsqlite.Store are.
type OutboxStore interface {
	idem.Store
	idemoutbox.Store
}

// OutboxHarness describes a store to [RunOutboxTests].
type OutboxHarness struct {
	// NewStores returns n stores on one fresh, empty database: the
	// instances of a service that share it. A store whose relays must not
	// run in several instances (SQLite) returns the same store n times.
	// Required.
	NewStores func(t *testing.T, n int) []OutboxStore
}

// RunOutboxTests runs the outbox conformance suite: enqueueing in the
// lease's transaction, delivery with retries, dead events, concurrent
// relays, a relay stopped mid-batch, the purge and the listing.
func RunOutboxTests(t *testing.T, h OutboxHarness) {
	t.Helper()
	o := outboxSuite{h: h}
	for _, mode := range []idem.Mode{idem.ModeAtomic, idem.ModeTwoPhase} {
		t.Run(mode.String(), func(t *testing.T) {
			t.Run("EnqueueCommitsWithResponse", func(t *testing.T) { o.enqueueCommits(t, mode) })
			t.Run("ReleaseEnqueuesNothing", func(t *testing.T) { o.releaseEnqueuesNothing(t, mode) })
			t.Run("RerunEnqueuesSameEventOnce", func(t *testing.T) { o.rerunEnqueuesOnce(t, mode) })
		})
	}
	t.Run("DeliversSignedWebhooks", o.deliversSigned)
	t.Run("RetriesWithBackoffUntilDelivered", o.retriesUntilDelivered)
	t.Run("ParksDeadEventAfterMaxAttempts", o.parksDead)
	t.Run("ConcurrentRelaysDeliverEachEventOnce", o.concurrentRelays)
	t.Run("StoppedRelayLosesNothing", o.stoppedRelay)
	t.Run("ReportsBacklogWhileBusy", o.reportsBacklogWhileBusy)
	t.Run("PurgesDeliveredAfterRetention", o.purgesDelivered)
	t.Run("ListsOwnEventsNewestFirst", o.listsOwnEvents)
}

type outboxSuite struct{ h OutboxHarness }

// outboxTimeout bounds each database call and each wait for deliveries.
const outboxTimeout = 20 * time.Second

var quietLog = slog.New(slog.DiscardHandler)

func (o outboxSuite) store(t *testing.T) OutboxStore {
	t.Helper()
	return o.h.NewStores(t, 1)[0]
}

// claim claims a new key of client and returns the lease and the context
// a handler would see.
func claim(t *testing.T, s OutboxStore, mode idem.Mode, scope idem.Scope) (idem.Lease, context.Context) {
	t.Helper()
	ctx := context.Background()
	res, err := s.Claim(ctx, idem.ClaimParams{
		Scope: scope, Method: http.MethodPost, Path: "/v1/things", RequestHash: hashOf(scope.Key),
		Mode: mode, Now: time.Now(), LockTimeout: lockTimeout, Retention: retention,
	})
	if err != nil || res.Lease == nil {
		t.Fatalf("Claim = %+v, %v; want a lease", res, err)
	}
	return res.Lease, idem.ContextWithScope(res.Lease.Context(ctx), scope)
}

func eventParams(purpose string, at time.Time) idemoutbox.EventParams {
	return idemoutbox.EventParams{
		Purpose: purpose, Type: "thing." + purpose,
		Payload: json.RawMessage(`{"purpose": "` + purpose + `", "n": 1}`), Now: at,
	}
}

// enqueueCommitted enqueues n events, each in its own committed lease of
// client, created at at, and returns their ids.
func enqueueCommitted(t *testing.T, s OutboxStore, client string, n int, at time.Time) []string {
	t.Helper()
	ids := make([]string, n)
	for i := range ids {
		lease, ctx := claim(t, s, idem.ModeAtomic, newScope(client))
		ev, err := idemoutbox.Enqueue(ctx, s, eventParams("created", at))
		if err != nil {
			t.Fatalf("Enqueue: %v", err)
		}
		if err := lease.Complete(context.Background(), &idem.Response{StatusCode: http.StatusCreated}); err != nil {
			t.Fatalf("Complete: %v", err)
		}
		ids[i] = ev.ID
	}
	return ids
}

func listAll(t *testing.T, s OutboxStore, client string) []idemoutbox.Event {
	t.Helper()
	events, err := s.ListEvents(context.Background(), idemoutbox.ListParams{ClientID: client, Limit: 10000})
	if err != nil {
		t.Fatalf("ListEvents: %v", err)
	}
	return events
}

func stats(t *testing.T, s OutboxStore) idemoutbox.Stats {
	t.Helper()
	st, err := s.OutboxStats(context.Background())
	if err != nil {
		t.Fatalf("OutboxStats: %v", err)
	}
	return st
}

func (o outboxSuite) enqueueCommits(t *testing.T, mode idem.Mode) {
	t.Parallel()
	s := o.store(t)
	scope := newScope("client-a")
	at := time.Now().Truncate(time.Microsecond)
	lease, ctx := claim(t, s, mode, scope)
	ev, err := idemoutbox.Enqueue(ctx, s, eventParams("created", at))
	if err != nil {
		t.Fatalf("Enqueue: %v", err)
	}
	if ev.ID != idemoutbox.EventID(ctx, "created") || ev.ClientID != scope.ClientID {
		t.Fatalf("Enqueue = %+v; want the derived id and the scope's client", ev)
	}
	if got := listAll(t, s, scope.ClientID); len(got) != 0 {
		t.Fatalf("%d events visible before the commit, want 0", len(got))
	}
	if err := lease.Complete(context.Background(), &idem.Response{StatusCode: http.StatusCreated}); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	got := listAll(t, s, scope.ClientID)
	if len(got) != 1 {
		t.Fatalf("%d events after the commit, want 1", len(got))
	}
	e := got[0]
	if e.ID != ev.ID || e.Type != "thing.created" || string(e.Payload) != `{"purpose": "created", "n": 1}` ||
		e.Status != idemoutbox.StatusPending || e.Attempts != 0 || !e.CreatedAt.Equal(at) || !e.NextAttemptAt.Equal(at) {
		t.Fatalf("stored event %+v; want %+v, pending, due at its creation", e, ev)
	}
	if st := stats(t, s); st.Pending != 1 || !st.OldestPending.Equal(at) || st.Dead != 0 {
		t.Fatalf("OutboxStats = %+v; want 1 pending, oldest at %s", st, at)
	}
}

func (o outboxSuite) releaseEnqueuesNothing(t *testing.T, mode idem.Mode) {
	t.Parallel()
	s := o.store(t)
	scope := newScope("client-a")
	lease, ctx := claim(t, s, mode, scope)
	if _, err := idemoutbox.Enqueue(ctx, s, eventParams("created", time.Now())); err != nil {
		t.Fatalf("Enqueue: %v", err)
	}
	if err := lease.Release(context.Background()); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if got := listAll(t, s, scope.ClientID); len(got) != 0 {
		t.Fatalf("%d events after a release, want 0: a rolled-back request sent an event", len(got))
	}
	if st := stats(t, s); st.Pending != 0 {
		t.Fatalf("OutboxStats = %+v after a release; want nothing pending", st)
	}
}

func (o outboxSuite) rerunEnqueuesOnce(t *testing.T, mode idem.Mode) {
	t.Parallel()
	s := o.store(t)
	scope := newScope("client-a")
	at := time.Now()

	// A first run enqueues and is released (a rollback); the rerun
	// enqueues the same purpose twice and another purpose once.
	lease, ctx := claim(t, s, mode, scope)
	first, err := idemoutbox.Enqueue(ctx, s, eventParams("created", at))
	if err != nil {
		t.Fatalf("Enqueue: %v", err)
	}
	if err := lease.Release(context.Background()); err != nil {
		t.Fatalf("Release: %v", err)
	}
	lease, ctx = claim(t, s, mode, scope)
	for range 2 {
		again, err := idemoutbox.Enqueue(ctx, s, eventParams("created", at.Add(time.Second)))
		if err != nil {
			t.Fatalf("Enqueue again: %v", err)
		}
		if again.ID != first.ID {
			t.Fatalf("rerun enqueued id %s, first run %s; want the same", again.ID, first.ID)
		}
	}
	other, err := idemoutbox.Enqueue(ctx, s, eventParams("receipt", at))
	if err != nil {
		t.Fatalf("Enqueue receipt: %v", err)
	}
	if other.ID == first.ID {
		t.Fatal("two purposes of one request got the same event id")
	}
	if err := lease.Complete(context.Background(), &idem.Response{StatusCode: http.StatusCreated}); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	got := listAll(t, s, scope.ClientID)
	if len(got) != 2 {
		t.Fatalf("%d events, want 2 (one per purpose): %+v", len(got), got)
	}
	// Another client's request with the same key gets other ids.
	otherScope := idem.Scope{ClientID: "client-b", Key: scope.Key}
	if idemoutbox.EventID(idem.ContextWithScope(context.Background(), otherScope), "created") == first.ID {
		t.Fatal("two clients' requests with one key share an event id")
	}
}

// fakeClock is an injected clock that tests move by hand.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// receiver is a webhook endpoint that verifies every request and counts
// deliveries by event id. answer, if set, picks the status of each
// delivery (its attempt number counts from 1); nil answers 204.
type receiver struct {
	secret string
	answer func(id string, attempt int) int
	// arrived, if set, is sent each delivery's id before it is answered.
	arrived chan string

	mu       sync.Mutex
	attempts map[string]int // deliveries per id, answered or not
	ok       map[string]int // 2xx answers per id
	inflight map[string]bool
	overlaps int // deliveries of an id while another of it was in flight
	invalid  []string
}

func newReceiver(t *testing.T, answer func(id string, attempt int) int) (*receiver, *httptest.Server) {
	r := &receiver{
		secret: idemoutbox.NewSecret(), answer: answer,
		attempts: map[string]int{}, ok: map[string]int{}, inflight: map[string]bool{},
	}
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	return r, srv
}

func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, err := idemoutbox.VerifyRequest(r.secret, req, nil)
	id := req.Header.Get(idemoutbox.HeaderID)
	r.mu.Lock()
	if err != nil {
		r.invalid = append(r.invalid, fmt.Sprintf("%s: %v", id, err))
		r.mu.Unlock()
		http.Error(w, "bad signature", http.StatusUnauthorized)
		return
	}
	var msg struct {
		Type string          `json:"type"`
		Data json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(body, &msg); err != nil || msg.Type == "" || len(msg.Data) == 0 {
		r.invalid = append(r.invalid, fmt.Sprintf("%s: body %s", id, body))
	}
	if r.inflight[id] {
		r.overlaps++
	}
	r.inflight[id] = true
	r.attempts[id]++
	attempt := r.attempts[id]
	r.mu.Unlock()

	if r.arrived != nil {
		r.arrived <- id
	}
	status := http.StatusNoContent
	if r.answer != nil {
		status = r.answer(id, attempt)
	}

	r.mu.Lock()
	delete(r.inflight, id)
	if status >= 200 && status < 300 {
		r.ok[id]++
	}
	r.mu.Unlock()
	w.WriteHeader(status)
}

func (r *receiver) snapshot() (attempts, ok map[string]int, overlaps int, invalid []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	attempts, ok = map[string]int{}, map[string]int{}
	for k, v := range r.attempts {
		attempts[k] = v
	}
	for k, v := range r.ok {
		ok[k] = v
	}
	return attempts, ok, r.overlaps, append([]string(nil), r.invalid...)
}

func (r *receiver) delivered() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.ok)
}

// countingMetrics counts a relay's delivery results.
type countingMetrics struct {
	mu      sync.Mutex
	results map[idemoutbox.Result]int
	backlog idemoutbox.Stats
	reports []int64 // pending, per Backlog call
}

func (m *countingMetrics) Delivery(_ context.Context, r idemoutbox.Result) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.results == nil {
		m.results = map[idemoutbox.Result]int{}
	}
	m.results[r]++
}

func (m *countingMetrics) Backlog(_ context.Context, pending int64, _ time.Duration, dead int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.backlog = idemoutbox.Stats{Pending: pending, Dead: dead}
	m.reports = append(m.reports, pending)
}

func (m *countingMetrics) count(r idemoutbox.Result) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.results[r]
}

func newRelay(t *testing.T, s OutboxStore, r *receiver, srv *httptest.Server, cfg idemoutbox.RelayConfig) *idemoutbox.Relay {
	t.Helper()
	wh, err := idemoutbox.NewWebhook(&idemoutbox.WebhookConfig{URL: srv.URL, Secret: r.secret, Timeout: outboxTimeout})
	if err != nil {
		t.Fatalf("NewWebhook: %v", err)
	}
	if cfg.Logger == nil {
		cfg.Logger = quietLog
	}
	relay, err := idemoutbox.NewRelay(s, wh, &cfg)
	if err != nil {
		t.Fatalf("NewRelay: %v", err)
	}
	return relay
}

// drain runs DeliverOnce until a batch takes nothing.
func drain(t *testing.T, relay *idemoutbox.Relay) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), outboxTimeout)
	defer cancel()
	total := 0
	for {
		n, err := relay.DeliverOnce(ctx)
		if err != nil {
			t.Fatalf("DeliverOnce: %v", err)
		}
		if n == 0 {
			return total
		}
		total += n
	}
}

func checkReceived(t *testing.T, r *receiver, ids []string, wantAttempts int) {
	t.Helper()
	attempts, ok, overlaps, invalid := r.snapshot()
	if len(invalid) > 0 {
		t.Fatalf("%d deliveries failed verification, first: %s", len(invalid), invalid[0])
	}
	if overlaps != 0 {
		t.Fatalf("%d deliveries overlapped another of the same event", overlaps)
	}
	if len(attempts) != len(ids) {
		t.Fatalf("receiver saw %d distinct events, want %d", len(attempts), len(ids))
	}
	for _, id := range ids {
		if attempts[id] != wantAttempts || ok[id] != 1 {
			t.Fatalf("event %s: %d deliveries, %d accepted; want %d and 1", id, attempts[id], ok[id], wantAttempts)
		}
	}
}

func (o outboxSuite) deliversSigned(t *testing.T) {
	t.Parallel()
	s := o.store(t)
	clock := &fakeClock{now: time.Now()}
	ids := enqueueCommitted(t, s, "client-a", 25, clock.Now())
	r, srv := newReceiver(t, nil)
	m := &countingMetrics{}
	relay := newRelay(t, s, r, srv, idemoutbox.RelayConfig{BatchSize: 10, Now: clock.Now, Metrics: m})
	if n := drain(t, relay); n != len(ids) {
		t.Fatalf("relay took %d events, want %d", n, len(ids))
	}
	checkReceived(t, r, ids, 1)
	if got := m.count(idemoutbox.ResultDelivered); got != len(ids) {
		t.Fatalf("metrics counted %d deliveries, want %d", got, len(ids))
	}
	for _, e := range listAll(t, s, "client-a") {
		if e.Status != idemoutbox.StatusDelivered || e.Attempts != 1 || !e.DeliveredAt.Equal(clock.Now().Truncate(time.Microsecond)) {
			t.Fatalf("event after delivery: %+v; want delivered at the relay's clock after 1 attempt", e)
		}
	}
	if err := relay.ReportBacklog(context.Background()); err != nil {
		t.Fatalf("ReportBacklog: %v", err)
	}
	if m.backlog.Pending != 0 || m.backlog.Dead != 0 {
		t.Fatalf("backlog %+v after delivering everything, want empty", m.backlog)
	}
}

func (o outboxSuite) retriesUntilDelivered(t *testing.T) {
	t.Parallel()
	s := o.store(t)
	clock := &fakeClock{now: time.Now()}
	ids := enqueueCommitted(t, s, "client-a", 5, clock.Now())
	const failures = 3
	r, srv := newReceiver(t, func(_ string, attempt int) int {
		if attempt <= failures {
			return []int{500, 503, 429}[attempt-1]
		}
		return 200
	})
	m := &countingMetrics{}
	var waits []int
	var mu sync.Mutex
	backoff := func(attempt int) time.Duration {
		mu.Lock()
		defer mu.Unlock()
		waits = append(waits, attempt)
		return time.Duration(attempt) * time.Minute
	}
	relay := newRelay(t, s, r, srv, idemoutbox.RelayConfig{MaxAttempts: failures + 1, Backoff: backoff, Now: clock.Now, Metrics: m})
	for attempt := 1; attempt <= failures; attempt++ {
		if n := drain(t, relay); n != len(ids) {
			t.Fatalf("attempt %d: relay took %d events, want %d", attempt, n, len(ids))
		}
		// Nothing is due again before its backoff has passed.
		clock.Advance(time.Duration(attempt)*time.Minute - time.Microsecond)
		if n := drain(t, relay); n != 0 {
			t.Fatalf("attempt %d: %d events retried before their backoff passed", attempt, n)
		}
		clock.Advance(time.Microsecond)
	}
	if n := drain(t, relay); n != len(ids) {
		t.Fatalf("last attempt: relay took %d events, want %d", n, len(ids))
	}
	checkReceived(t, r, ids, failures+1)
	if got, want := m.count(idemoutbox.ResultRetried), failures*len(ids); got != want {
		t.Fatalf("metrics counted %d retries, want %d", got, want)
	}
	if len(waits) != failures*len(ids) {
		t.Fatalf("backoff asked %d times, want %d", len(waits), failures*len(ids))
	}
	for _, e := range listAll(t, s, "client-a") {
		if e.Status != idemoutbox.StatusDelivered || e.Attempts != failures+1 || e.LastError == "" {
			t.Fatalf("event %+v; want delivered after %d attempts, the last error kept", e, failures+1)
		}
	}
}

func (o outboxSuite) parksDead(t *testing.T) {
	t.Parallel()
	s := o.store(t)
	clock := &fakeClock{now: time.Now()}
	dead := enqueueCommitted(t, s, "client-a", 2, clock.Now())
	fine := enqueueCommitted(t, s, "client-b", 1, clock.Now())
	failing := map[string]bool{dead[0]: true, dead[1]: true}
	var fixed atomic.Bool // the receiver is repaired
	r, srv := newReceiver(t, func(id string, _ int) int {
		if failing[id] && !fixed.Load() {
			return http.StatusInternalServerError
		}
		return http.StatusOK
	})
	m := &countingMetrics{}
	const maxAttempts = 3
	relay := newRelay(t, s, r, srv, idemoutbox.RelayConfig{MaxAttempts: maxAttempts, Now: clock.Now, Metrics: m})
	for range maxAttempts {
		drain(t, relay)
		clock.Advance(idemoutbox.BackoffMax + time.Second) // past any jittered backoff
	}
	if n := drain(t, relay); n != 0 {
		t.Fatalf("relay took %d events after the dead ones' last attempt, want 0", n)
	}
	attempts, ok, _, _ := r.snapshot()
	for _, id := range dead {
		if attempts[id] != maxAttempts || ok[id] != 0 {
			t.Fatalf("dead event %s: %d attempts, want %d", id, attempts[id], maxAttempts)
		}
	}
	if ok[fine[0]] != 1 {
		t.Fatalf("healthy event delivered %d times, want 1", ok[fine[0]])
	}
	for _, e := range listAll(t, s, "client-a") {
		if e.Status != idemoutbox.StatusDead || e.Attempts != maxAttempts || e.LastError == "" {
			t.Fatalf("event %+v; want dead after %d attempts with its last error", e, maxAttempts)
		}
	}
	if st := stats(t, s); st.Dead != 2 || st.Pending != 0 {
		t.Fatalf("OutboxStats = %+v; want 2 dead, none pending", st)
	}
	if got := m.count(idemoutbox.ResultDead); got != 2 {
		t.Fatalf("metrics counted %d dead events, want 2", got)
	}

	// An operator retries one dead event, then the rest, once the
	// receiver is fixed: each is delivered once more.
	fixed.Store(true)
	ctx := context.Background()
	if n, err := s.RetryDead(ctx, clock.Now(), dead[0], fine[0], "evt_unknown"); err != nil || n != 1 {
		t.Fatalf("RetryDead(one dead, one delivered, one unknown) = %d, %v; want 1", n, err)
	}
	if n := drain(t, relay); n != 1 {
		t.Fatalf("relay took %d events after one was retried, want 1", n)
	}
	if n, err := s.RetryDead(ctx, clock.Now()); err != nil || n != 1 {
		t.Fatalf("RetryDead() = %d, %v; want the 1 left", n, err)
	}
	if n := drain(t, relay); n != 1 {
		t.Fatalf("relay took %d events after the rest were retried, want 1", n)
	}
	_, ok, _, _ = r.snapshot()
	for _, id := range dead {
		if ok[id] != 1 {
			t.Fatalf("retried event %s accepted %d times, want 1", id, ok[id])
		}
	}
	if st := stats(t, s); st.Dead != 0 || st.Pending != 0 {
		t.Fatalf("OutboxStats = %+v after the retries; want nothing dead or pending", st)
	}
}

func (o outboxSuite) concurrentRelays(t *testing.T) {
	t.Parallel()
	stores := o.h.NewStores(t, 2)
	start := time.Now()
	const events = 200
	ids := enqueueCommitted(t, stores[0], "client-a", events, start)
	// Slow, flaky answers widen the window in which two relays could
	// deliver one event at once.
	var mu sync.Mutex
	calls := 0
	r, srv := newReceiver(t, func(_ string, _ int) int {
		mu.Lock()
		calls++
		n := calls
		mu.Unlock()
		if n%3 == 0 {
			return http.StatusBadGateway
		}
		return http.StatusOK
	})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, s := range stores {
		relay := newRelay(t, s, r, srv, idemoutbox.RelayConfig{
			BatchSize: 7, PollInterval: 5 * time.Millisecond,
			Backoff: func(int) time.Duration { return 0 }, MaxAttempts: 1000,
		})
		wg.Go(func() {
			if err := relay.Run(ctx); err != nil {
				t.Errorf("Run: %v", err)
			}
		})
	}
	// Done when every event was accepted and its outcome recorded: a
	// relay stopped between the two would deliver it again, as it may.
	deadline := time.Now().Add(outboxTimeout)
	for time.Now().Before(deadline) {
		if r.delivered() == events && stats(t, stores[0]).Pending == 0 {
			break
		}
		waitBriefly()
	}
	cancel()
	wg.Wait()
	attempts, ok, overlaps, invalid := r.snapshot()
	if len(invalid) > 0 || overlaps != 0 {
		t.Fatalf("%d invalid deliveries, %d overlapping deliveries of one event; want none", len(invalid), overlaps)
	}
	for _, id := range ids {
		if ok[id] != 1 {
			t.Fatalf("event %s accepted %d times (%d attempts), want exactly once", id, ok[id], attempts[id])
		}
	}
	if st := stats(t, stores[0]); st.Pending != 0 {
		t.Fatalf("OutboxStats = %+v after delivery, want nothing pending", st)
	}
}

// waitBriefly yields between polls of a condition that other goroutines
// make true; the deadline of the poll, not this pause, bounds the test.
func waitBriefly() {
	t := time.NewTimer(5 * time.Millisecond)
	<-t.C
}

func (o outboxSuite) stoppedRelay(t *testing.T) {
	t.Parallel()
	s := o.store(t)
	ids := enqueueCommitted(t, s, "client-a", 12, time.Now())
	r, srv := newReceiver(t, nil)
	r.arrived = make(chan string)
	relay := newRelay(t, s, r, srv, idemoutbox.RelayConfig{BatchSize: 5, Parallelism: 1, PollInterval: time.Hour})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- relay.Run(ctx) }()
	// The first delivery of the first batch is under way: stop the relay.
	select {
	case <-r.arrived:
	case <-time.After(outboxTimeout):
		t.Fatal("no delivery arrived")
	}
	cancel()
	go func() {
		for range r.arrived { // let the cancelled deliveries finish
		}
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run after cancel: %v", err)
		}
	case <-time.After(outboxTimeout):
		t.Fatal("Run did not return after its context was cancelled")
	}
	// A new relay, as after a restart, delivers every event.
	restarted := newRelay(t, s, r, srv, idemoutbox.RelayConfig{BatchSize: 5})
	drain(t, restarted)
	close(r.arrived)
	// Overlaps are not checked: the receiver may still be answering a
	// request that the stopped relay abandoned when the restarted relay
	// delivers the same event again, as at-least-once delivery allows.
	_, ok, _, invalid := r.snapshot()
	if len(invalid) > 0 {
		t.Fatalf("%d deliveries failed verification, first: %s", len(invalid), invalid[0])
	}
	for _, id := range ids {
		if ok[id] < 1 {
			t.Fatalf("event %s was never delivered: the stopped relay lost it", id)
		}
	}
	if st := stats(t, s); st.Pending != 0 {
		t.Fatalf("OutboxStats = %+v after the restart, want nothing pending", st)
	}
}

func (o outboxSuite) purgesDelivered(t *testing.T) {
	t.Parallel()
	s := o.store(t)
	clock := &fakeClock{now: time.Now()}
	delivered := enqueueCommitted(t, s, "client-a", 3, clock.Now())
	pending := enqueueCommitted(t, s, "client-b", 1, clock.Now())
	r, srv := newReceiver(t, func(id string, _ int) int {
		if id == pending[0] {
			return http.StatusServiceUnavailable
		}
		return http.StatusOK
	})
	const keep = 24 * time.Hour
	relay := newRelay(t, s, r, srv, idemoutbox.RelayConfig{Retention: keep, Now: clock.Now, Backoff: func(int) time.Duration { return 1000 * keep }})
	drain(t, relay)
	ctx := context.Background()
	clock.Advance(keep - time.Second)
	if n, err := relay.Purge(ctx); err != nil || n != 0 {
		t.Fatalf("Purge within retention = %d, %v; want 0", n, err)
	}
	clock.Advance(2 * time.Second)
	if n, err := relay.Purge(ctx); err != nil || n != int64(len(delivered)) {
		t.Fatalf("Purge past retention = %d, %v; want %d", n, err, len(delivered))
	}
	if got := listAll(t, s, "client-a"); len(got) != 0 {
		t.Fatalf("%d delivered events left after the purge, want 0", len(got))
	}
	if got := listAll(t, s, "client-b"); len(got) != 1 || got[0].Status != idemoutbox.StatusPending {
		t.Fatalf("pending event after the purge: %+v; want kept", got)
	}
	if _, err := s.PurgeEvents(ctx, idemoutbox.PurgeParams{}); err == nil {
		t.Fatal("PurgeEvents without Before succeeded")
	}
}

func (o outboxSuite) listsOwnEvents(t *testing.T) {
	t.Parallel()
	s := o.store(t)
	base := time.Now().Truncate(time.Microsecond)
	var mine []string
	for i := range 5 {
		mine = append(mine, enqueueCommitted(t, s, "client-a", 1, base.Add(time.Duration(i)*time.Second))...)
	}
	// Two events at one instant are ordered by id.
	mine = append(mine, enqueueCommitted(t, s, "client-a", 1, base.Add(4*time.Second))...)
	enqueueCommitted(t, s, "client-b", 2, base.Add(10*time.Second))

	var got []string
	var after *idemoutbox.Cursor
	var lastEvent idemoutbox.Event
	for page := 0; ; page++ {
		events, err := s.ListEvents(context.Background(), idemoutbox.ListParams{ClientID: "client-a", Limit: 2, After: after})
		if err != nil {
			t.Fatalf("ListEvents: %v", err)
		}
		if len(events) == 0 {
			break
		}
		if page > 10 {
			t.Fatal("listing does not end")
		}
		for i, e := range events {
			if e.ClientID != "client-a" {
				t.Fatalf("client-a's listing shows an event of %s", e.ClientID)
			}
			if len(got) > 0 || i > 0 {
				prev := events[max(i-1, 0)]
				if i == 0 {
					prev = lastEvent
				}
				if e.CreatedAt.After(prev.CreatedAt) || (e.CreatedAt.Equal(prev.CreatedAt) && e.ID >= prev.ID) {
					t.Fatalf("listing not newest first: %+v after %+v", e, prev)
				}
			}
			got = append(got, e.ID)
			lastEvent = e
		}
		c := events[len(events)-1].Cursor()
		after = &c
	}
	if len(got) != len(mine) {
		t.Fatalf("listing shows %d events, want %d", len(got), len(mine))
	}
	seen := map[string]bool{}
	for _, id := range got {
		seen[id] = true
	}
	for _, id := range mine {
		if !seen[id] {
			t.Fatalf("event %s missing from the listing", id)
		}
	}
}

func (o outboxSuite) reportsBacklogWhileBusy(t *testing.T) {
	t.Parallel()
	s := o.store(t)
	const events = 5
	enqueueCommitted(t, s, "client-a", events, time.Now())
	r, srv := newReceiver(t, nil)
	m := &countingMetrics{}
	// Batches of one come full until the outbox is empty: the backlog is
	// reported while they do, not only once the relay is idle.
	relay := newRelay(t, s, r, srv, idemoutbox.RelayConfig{BatchSize: 1, PollInterval: time.Nanosecond, Metrics: m})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- relay.Run(ctx) }()
	deadline := time.Now().Add(outboxTimeout)
	for r.delivered() < events && time.Now().Before(deadline) {
		waitBriefly()
	}
	// The relay is running: a second Run of it is refused at once.
	if err := relay.Run(ctx); err == nil {
		t.Error("a second Run of a running relay returned nil, want an error")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	busy := 0
	for _, p := range m.reports {
		if p > 0 {
			busy++
		}
	}
	if r.delivered() != events || busy == 0 {
		t.Fatalf("%d events delivered, backlog reports %v; want %d delivered and a nonzero backlog reported while busy", r.delivered(), m.reports, events)
	}
}
