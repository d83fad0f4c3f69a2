package idemoutbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/idemkit/idem"
)

// Status is the delivery state of an event.
type Status string

// The states of an event.
const (
	// StatusPending means the event waits for a delivery attempt, the
	// first or a retry, at NextAttemptAt.
	StatusPending Status = "pending"
	// StatusDelivered means a delivery succeeded. The event is purged
	// after the relay's retention.
	StatusDelivered Status = "delivered"
	// StatusDead means every allowed attempt failed. The event stays until
	// an operator deletes it.
	StatusDead Status = "dead"
)

// Event is an event in the outbox.
type Event struct {
	// ID is stable across reruns of the request that enqueued it: see
	// [EventID]. It is the webhook-id of every delivery.
	ID string
	// ClientID is the client whose request enqueued the event.
	ClientID string
	// Type names what happened, such as "payment.succeeded".
	Type string
	// Destination is where the event goes, such as a webhook URL; ""
	// means the deliverer's default.
	Destination string
	// Payload is the event's JSON document, byte for byte as enqueued.
	Payload json.RawMessage
	// CreatedAt is when the event was enqueued.
	CreatedAt time.Time

	// The delivery state, as the store has it.
	Status        Status
	Attempts      int       // delivery attempts made so far
	NextAttemptAt time.Time // when a pending event is due
	DeliveredAt   time.Time // zero unless delivered
	LastError     string    // the last failed attempt's error, "" if none
}

// EventParams are the inputs of [Enqueue].
type EventParams struct {
	// Purpose distinguishes the events of one request, such as
	// "payment.succeeded" or "receipt". Together with the request's client
	// and idempotency key it makes the event id. Required.
	Purpose string
	// Type is the event type that receivers see. Required.
	Type string
	// Payload is a JSON document. Required.
	Payload json.RawMessage
	// Destination is where the event goes; "" means the deliverer's
	// default (the relay's webhook URL).
	Destination string
	// Now is the event's creation time. Defaults to time.Now().
	Now time.Time
}

// Enqueuer writes an event in the transaction that a lease put into ctx,
// the context that idemstore.Lease.Context returned: the middleware's request
// context inside a handler. A second event with the same id is ignored.
// idempg.Store and idemsqlite.Store implement it.
type Enqueuer interface {
	EnqueueEvent(ctx context.Context, e Event) error
}

// Errors of [Enqueue].
var (
	// ErrNoScope means the context carries no idempotency key: Enqueue
	// runs inside a handler behind the idem middleware, or in a context
	// from idem.ContextWithScope.
	ErrNoScope = errors.New("idemoutbox: no idempotency key in context")
	// ErrInvalidEvent means the event's parameters are incomplete or its
	// payload is not JSON.
	ErrInvalidEvent = errors.New("idemoutbox: invalid event")
)

// eventPurposePrefix keeps event ids apart from the keys that idem.DeriveKey
// derives for downstream calls with the same purpose.
const eventPurposePrefix = "idemoutbox-event:"

// EventID returns the id of the event with the given purpose for the
// request whose context this is: "evt_" and a one-way digest of the client,
// the idempotency key and the purpose, and, in a phase after an
// operation's first recovery point, the creation of the key's row, as
// idem.DeriveKey derives. It is the same on every rerun and in every
// process, and different from idem.DeriveKey(ctx, purpose). It returns ""
// when the context carries no key.
func EventID(ctx context.Context, purpose string) string {
	k := idem.DeriveKey(ctx, eventPurposePrefix+purpose)
	if k == "" {
		return ""
	}
	return "evt_" + strings.TrimPrefix(k, "idk_")
}

// Enqueue writes an event in the transaction of the request whose context
// ctx is, through s. The event commits with the request's business writes
// and stored response, or rolls back with them. It returns the event it
// asked the store to write; when an event with the same id exists (from a
// committed earlier run of the request), the store keeps that one and
// writes nothing.
func Enqueue(ctx context.Context, s Enqueuer, p EventParams) (Event, error) {
	scope, ok := idem.ScopeFromContext(ctx)
	if !ok {
		return Event{}, ErrNoScope
	}
	switch {
	case p.Purpose == "":
		return Event{}, fmt.Errorf("%w: EventParams.Purpose is required", ErrInvalidEvent)
	case p.Type == "":
		return Event{}, fmt.Errorf("%w: EventParams.Type is required", ErrInvalidEvent)
	case !json.Valid(p.Payload):
		return Event{}, fmt.Errorf("%w: EventParams.Payload is not a JSON document", ErrInvalidEvent)
	}
	now := p.Now
	if now.IsZero() {
		now = time.Now()
	}
	now = now.Truncate(time.Microsecond).UTC() // what the stores keep
	e := Event{
		ID:            EventID(ctx, p.Purpose),
		ClientID:      scope.ClientID,
		Type:          p.Type,
		Destination:   p.Destination,
		Payload:       p.Payload,
		CreatedAt:     now,
		Status:        StatusPending,
		NextAttemptAt: now,
	}
	if err := s.EnqueueEvent(ctx, e); err != nil {
		return Event{}, fmt.Errorf("idemoutbox: enqueue %s: %w", e.Type, err)
	}
	return e, nil
}
