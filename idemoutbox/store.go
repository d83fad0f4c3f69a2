package idemoutbox

import (
	"context"
	"errors"
	"time"

	"github.com/idemkit/idem/idemstore"
)

// Store keeps the outbox of an idempotency store. idempg.Store and
// idemsqlite.Store implement it; [Relay] consumes it.
type Store interface {
	Enqueuer

	// DeliverBatch takes up to p.Limit pending events due at p.Now, oldest
	// due first, calls deliver once with them, and records the outcome
	// deliver returns for each (outcomes[i] is events[i]'s). No other
	// DeliverBatch is given any of these events until their outcomes are
	// recorded or the call fails: on idempg, in any process; on idemsqlite
	// and idemtest.MemoryStore, on the same Store value. It
	// returns the number of events taken; 0 means none was due. When it
	// fails, no outcome is recorded and the events are delivered again
	// later.
	DeliverBatch(ctx context.Context, p BatchParams, deliver func(ctx context.Context, events []Event) []Outcome) (int, error)

	// PurgeEvents deletes delivered events delivered before p.Before, in
	// batches of p.BatchSize, and returns how many it deleted, also when
	// it fails part way. Pending and dead events are never purged.
	PurgeEvents(ctx context.Context, p PurgeParams) (int64, error)

	// OutboxStats counts the outbox's events.
	OutboxStats(ctx context.Context) (Stats, error)

	// RetryDead makes dead events pending again, due at now, with their
	// attempts reset to 0, and returns how many; for operators, once the
	// receiver is fixed. An empty ids retries every dead event; otherwise
	// only the dead events among ids.
	RetryDead(ctx context.Context, now time.Time, ids ...string) (int64, error)

	// ListEvents returns a client's events, newest first.
	ListEvents(ctx context.Context, p ListParams) ([]Event, error)
}

// BatchParams are the inputs of [Store.DeliverBatch].
type BatchParams struct {
	Now   time.Time // events with NextAttemptAt at or before Now are due
	Limit int       // at most this many events; must be positive
}

// Outcome is the result of one delivery attempt, to be recorded.
type Outcome struct {
	// Status is StatusDelivered, StatusPending (retry at NextAttemptAt)
	// or StatusDead.
	Status        Status
	NextAttemptAt time.Time
	// At is when the attempt ended: DeliveredAt of a delivered event.
	At time.Time
	// Error is the failed attempt's error; "" for a delivery, which keeps
	// the last error of the attempts before it.
	Error string
}

// PurgeParams are the inputs of [Store.PurgeEvents].
type PurgeParams struct {
	// Before deletes events delivered before this time. Required.
	Before time.Time
	// BatchSize is the number of events deleted per statement. 0 means
	// the store's default, PurgeBatchSizeDefault (1000) unless it names
	// a smaller one (idemsqlite).
	BatchSize int
	// Share is the most of its time the purge spends in its batches, as
	// idemstore.PurgeParams.Share: after each batch it pauses
	// idemstore.PurgePause of the batch's duration. 0 means the store's
	// default, idemstore.PurgeShareDefault (0.2) unless it names a lower
	// one (idemsqlite); 1 sends the batches back to back; outside [0, 1]
	// is an error.
	Share float64
}

// PurgeBatchSizeDefault is the default of [PurgeParams.BatchSize].
const PurgeBatchSizeDefault = 1000

// Validate reports whether a store can purge with p.
func (p PurgeParams) Validate() error {
	switch {
	case p.Before.IsZero():
		return errors.New("idemoutbox: PurgeParams.Before is required")
	case p.BatchSize < 0:
		return errors.New("idemoutbox: PurgeParams.BatchSize must not be negative")
	case !idemstore.ValidPurgeShare(p.Share):
		return errors.New("idemoutbox: PurgeParams.Share must be from 0 to 1")
	}
	return nil
}

// WithDefaults returns p with a zero BatchSize replaced by the default.
func (p PurgeParams) WithDefaults() PurgeParams {
	if p.BatchSize == 0 {
		p.BatchSize = PurgeBatchSizeDefault
	}
	return p
}

// Stats counts an outbox's events.
type Stats struct {
	// Pending is the backlog: events not delivered yet and not dead.
	Pending int64
	// OldestPending is the creation time of the oldest pending event;
	// zero when none is pending.
	OldestPending time.Time
	// Dead is the number of events parked after their last attempt.
	Dead int64
}

// ListParams are the inputs of [Store.ListEvents].
type ListParams struct {
	// ClientID selects the client whose events are listed. Required.
	ClientID string
	// Limit is the page size; must be positive.
	Limit int
	// After continues a listing after the cursor of the previous page's
	// last event ([Event.Cursor]); nil starts with the newest event.
	After *Cursor
}

// Cursor is a position in a client's events, newest first.
type Cursor struct {
	CreatedAt time.Time
	ID        string
}

// Cursor returns the position of e in its client's events.
func (e Event) Cursor() Cursor { return Cursor{CreatedAt: e.CreatedAt, ID: e.ID} }
