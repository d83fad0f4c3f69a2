package idemtest

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/idemoutbox"
)

func (o outboxSuite) deliversSigned(t *testing.T) {
	t.Parallel()
	s := o.store(t)
	clock := NewClock(time.Now())
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
	clock := NewClock(time.Now())
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
	clock := NewClock(time.Now())
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
	// receiver is fixed: each is delivered once more. Every id given is
	// tried, the dead one after two that change nothing.
	fixed.Store(true)
	ctx := context.Background()
	if n, err := s.RetryDead(ctx, clock.Now(), fine[0], "evt_unknown", dead[0]); err != nil || n != 1 {
		t.Fatalf("RetryDead(one delivered, one unknown, one dead) = %d, %v; want 1", n, err)
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
	clock := NewClock(time.Now())
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

// purgesInBatches checks that PurgeEvents goes on batch after batch until
// a batch finds fewer events than its size: five delivered events purged
// two at a time are all purged, the last batch short.
func (o outboxSuite) purgesInBatches(t *testing.T) {
	t.Parallel()
	s := o.store(t)
	clock := NewClock(time.Now())
	const n = 5
	enqueueCommitted(t, s, "client-a", n, clock.Now())
	r, srv := newReceiver(t, func(string, int) int { return http.StatusOK })
	relay := newRelay(t, s, r, srv, idemoutbox.RelayConfig{Now: clock.Now})
	drain(t, relay)
	clock.Advance(time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), outboxTimeout)
	defer cancel()
	if got, err := s.PurgeEvents(ctx, idemoutbox.PurgeParams{Before: clock.Now(), BatchSize: 2}); err != nil || got != n {
		t.Fatalf("PurgeEvents(BatchSize 2) = %d, %v; want %d", got, err, n)
	}
	if got := listAll(t, s, "client-a"); len(got) != 0 {
		t.Fatalf("%d delivered events left after the purge, want 0", len(got))
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
