package idemtest

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemoutbox"
	"github.com/idemkit/idem/idemstore"
)

// OutboxStore is a store with an outbox, as idempg.Store and
// idemsqlite.Store are.
type OutboxStore interface {
	idemstore.Store
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
	t.Run("PurgesInBatches", o.purgesInBatches)
	t.Run("ListsOwnEventsNewestFirst", o.listsOwnEvents)
	t.Run("RejectsNonPositiveLimits", o.rejectsNonPositiveLimits)
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
func claim(t *testing.T, s OutboxStore, mode idem.Mode, scope idemstore.Scope) (idemstore.Lease, context.Context) {
	t.Helper()
	ctx := context.Background()
	res, err := s.Claim(ctx, idemstore.ClaimParams{
		Scope: scope, Method: http.MethodPost, Path: "/v1/things", RequestHash: hashOf(scope.Key),
		TwoPhase: mode == idem.ModeTwoPhase, Now: time.Now(), LockTimeout: lockTimeout, Retention: retention,
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
		if err := lease.Complete(context.Background(), &idemstore.Response{StatusCode: http.StatusCreated}); err != nil {
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
	if err := lease.Complete(context.Background(), &idemstore.Response{StatusCode: http.StatusCreated}); err != nil {
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
	if err := lease.Complete(context.Background(), &idemstore.Response{StatusCode: http.StatusCreated}); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	got := listAll(t, s, scope.ClientID)
	if len(got) != 2 {
		t.Fatalf("%d events, want 2 (one per purpose): %+v", len(got), got)
	}
	// Another client's request with the same key gets other ids.
	otherScope := idemstore.Scope{ClientID: "client-b", Key: scope.Key}
	if idemoutbox.EventID(idem.ContextWithScope(context.Background(), otherScope), "created") == first.ID {
		t.Fatal("two clients' requests with one key share an event id")
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

// rejectsNonPositiveLimits: DeliverBatch and ListEvents refuse a Limit of
// zero or below, and deliver or list nothing.
func (o outboxSuite) rejectsNonPositiveLimits(t *testing.T) {
	t.Parallel()
	s := o.store(t)
	enqueueCommitted(t, s, "client-a", 1, time.Now())
	for _, limit := range []int{0, -1} {
		delivered := 0
		_, err := s.DeliverBatch(context.Background(), idemoutbox.BatchParams{Limit: limit, Now: time.Now()},
			func(_ context.Context, events []idemoutbox.Event) []idemoutbox.Outcome {
				delivered += len(events)
				return make([]idemoutbox.Outcome, len(events))
			})
		if err == nil || delivered != 0 {
			t.Errorf("DeliverBatch with Limit %d: err %v, %d events delivered; want an error and none", limit, err, delivered)
		}
		if events, err := s.ListEvents(context.Background(), idemoutbox.ListParams{ClientID: "client-a", Limit: limit}); err == nil || len(events) != 0 {
			t.Errorf("ListEvents with Limit %d: %d events, err %v; want an error and none", limit, len(events), err)
		}
	}
}
