package idemtest

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/idemkit/idem/idemoutbox"
	"github.com/idemkit/idem/idemstore"
)

var _ idemoutbox.Store = (*MemoryStore)(nil)

type memoryLeaseKey struct{}

// memoryOutbox is the MemoryStore's outbox. Its fields are guarded by the
// store's mu.
type memoryOutbox struct {
	events map[string]*idemoutbox.Event
	taken  map[string]bool // in a batch being delivered
}

// commit adds events enqueued under a completed lease; an id that exists
// is kept as it is.
func (o *memoryOutbox) commit(events []idemoutbox.Event) {
	for _, e := range events {
		if o.events == nil {
			o.events = map[string]*idemoutbox.Event{}
		}
		if _, ok := o.events[e.ID]; !ok {
			e.Payload = bytes.Clone(e.Payload)
			e.CreatedAt = e.CreatedAt.Truncate(time.Microsecond)
			e.NextAttemptAt = e.NextAttemptAt.Truncate(time.Microsecond)
			o.events[e.ID] = &e
		}
	}
}

// EnqueueEvent implements idemoutbox.Enqueuer: the event is kept when the
// lease whose context ctx is completes, and dropped if it is released.
func (s *MemoryStore) EnqueueEvent(ctx context.Context, e idemoutbox.Event) error {
	l, ok := ctx.Value(memoryLeaseKey{}).(*memoryLease)
	if !ok || l.store != s {
		return errors.New("idemtest: enqueue event: no lease of this store in context")
	}
	if e.ID == "" {
		return errors.New("idemtest: enqueue event: the event has no id")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if l.ended {
		return fmt.Errorf("idemtest: enqueue event: %w", idemstore.ErrLeaseEnded)
	}
	if !slices.ContainsFunc(l.events, func(x idemoutbox.Event) bool { return x.ID == e.ID }) {
		l.events = append(l.events, e)
	}
	return nil
}

// DeliverBatch implements idemoutbox.Store. Events of a batch are marked
// taken until their outcomes are recorded, so concurrent relays on one
// MemoryStore never deliver one event at the same time.
func (s *MemoryStore) DeliverBatch(ctx context.Context, p idemoutbox.BatchParams, deliver func(context.Context, []idemoutbox.Event) []idemoutbox.Outcome) (int, error) {
	if p.Limit <= 0 {
		return 0, errors.New("idemtest: deliver batch: BatchParams.Limit must be positive")
	}
	s.mu.Lock()
	var due []idemoutbox.Event
	for _, e := range s.outbox.events {
		if e.Status == idemoutbox.StatusPending && !e.NextAttemptAt.After(p.Now) && !s.outbox.taken[e.ID] {
			due = append(due, *e)
		}
	}
	slices.SortFunc(due, func(a, b idemoutbox.Event) int { return a.NextAttemptAt.Compare(b.NextAttemptAt) })
	if len(due) > p.Limit {
		due = due[:p.Limit]
	}
	if s.outbox.taken == nil {
		s.outbox.taken = map[string]bool{}
	}
	for _, e := range due {
		s.outbox.taken[e.ID] = true
	}
	s.mu.Unlock()
	if len(due) == 0 {
		return 0, nil
	}

	outcomes := deliver(ctx, due)
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range due {
		delete(s.outbox.taken, e.ID)
	}
	if len(outcomes) != len(due) {
		return 0, fmt.Errorf("idemtest: deliver batch: %d outcomes for %d events", len(outcomes), len(due))
	}
	if err := ctx.Err(); err != nil {
		return 0, err // nothing recorded: the events are delivered again
	}
	for i, o := range outcomes {
		e := s.outbox.events[due[i].ID]
		if e == nil || e.Status != idemoutbox.StatusPending {
			continue
		}
		// Times are kept to the microsecond, as the database stores keep them.
		e.Status, e.NextAttemptAt = o.Status, o.NextAttemptAt.Truncate(time.Microsecond)
		e.Attempts++
		if o.Error != "" {
			e.LastError = o.Error
		}
		if o.Status == idemoutbox.StatusDelivered {
			e.DeliveredAt = o.At.Truncate(time.Microsecond)
		}
	}
	return len(due), nil
}

// PurgeEvents implements idemoutbox.Store.
func (s *MemoryStore) PurgeEvents(ctx context.Context, p idemoutbox.PurgeParams) (int64, error) {
	if err := p.Validate(); err != nil {
		return 0, fmt.Errorf("idemtest: purge events: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var n int64
	for id, e := range s.outbox.events {
		if e.Status == idemoutbox.StatusDelivered && e.DeliveredAt.Before(p.Before) && !s.outbox.taken[id] {
			delete(s.outbox.events, id)
			n++
		}
	}
	return n, nil
}

// OutboxStats implements idemoutbox.Store.
func (s *MemoryStore) OutboxStats(ctx context.Context) (idemoutbox.Stats, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var st idemoutbox.Stats
	for _, e := range s.outbox.events {
		switch e.Status {
		case idemoutbox.StatusPending:
			st.Pending++
			if st.OldestPending.IsZero() || e.CreatedAt.Before(st.OldestPending) {
				st.OldestPending = e.CreatedAt
			}
		case idemoutbox.StatusDead:
			st.Dead++
		}
	}
	return st, nil
}

// RetryDead implements idemoutbox.Store.
func (s *MemoryStore) RetryDead(ctx context.Context, now time.Time, ids ...string) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var n int64
	for id, e := range s.outbox.events {
		if e.Status == idemoutbox.StatusDead && (len(ids) == 0 || slices.Contains(ids, id)) {
			e.Status, e.Attempts, e.NextAttemptAt = idemoutbox.StatusPending, 0, now.Truncate(time.Microsecond)
			n++
		}
	}
	return n, nil
}

// ListEvents implements idemoutbox.Store.
func (s *MemoryStore) ListEvents(ctx context.Context, p idemoutbox.ListParams) ([]idemoutbox.Event, error) {
	if p.ClientID == "" || p.Limit <= 0 {
		return nil, errors.New("idemtest: list events: ListParams.ClientID and a positive Limit are required")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []idemoutbox.Event
	for _, e := range s.outbox.events {
		if e.ClientID != p.ClientID {
			continue
		}
		if a := p.After; a != nil && !(e.CreatedAt.Before(a.CreatedAt) || (e.CreatedAt.Equal(a.CreatedAt) && e.ID < a.ID)) {
			continue
		}
		c := *e
		c.Payload = bytes.Clone(e.Payload)
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b idemoutbox.Event) int {
		if c := b.CreatedAt.Compare(a.CreatedAt); c != 0 {
			return c
		}
		return cmp.Compare(b.ID, a.ID)
	})
	if len(out) > p.Limit {
		out = out[:p.Limit]
	}
	return out, nil
}
