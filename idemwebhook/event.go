package idemwebhook

import (
	"context"
	"time"
)

// Provider names of [Event.Provider].
const (
	ProviderStandardWebhooks = "standard-webhooks"
	ProviderStripe           = "stripe"
)

// Event is what the receiver learnt of a verified delivery. The handler
// behind the receiver reads it with [EventFromContext].
type Event struct {
	// Endpoint is the receiver's [Config.Endpoint].
	Endpoint string
	// Provider is the delivery's format: ProviderStandardWebhooks or
	// ProviderStripe.
	Provider string
	// ID is the provider's event id: webhook-id, or a Stripe event's id.
	// It is the same on every delivery of the event, and it is the
	// idempotency key of the delivery.
	ID string
	// Type is the event's type, such as "payment.updated"; "" when the
	// payload does not say.
	Type string
	// Time is when the event happened, as the payload says: a Standard
	// Webhooks payload's "timestamp" (RFC 3339), a Stripe event's
	// "created" (whole seconds). Zero when the payload does not say. It is
	// the time that [Newest] compares.
	Time time.Time
	// SignedAt is the signed timestamp of this delivery: webhook-timestamp,
	// or Stripe-Signature's t. A provider signs each attempt anew, so it
	// says when the delivery was sent, not when the event happened.
	SignedAt time.Time
	// Object is the id of the object the event is about, when the payload
	// names it: the "id" of a Standard Webhooks payload's "data", or of a
	// Stripe event's "data.object". "" otherwise.
	Object string
}

type eventKey struct{}

// EventFromContext returns the event of the delivery whose context this
// is: the context of a request that the receiver verified.
func EventFromContext(ctx context.Context) (Event, bool) {
	e, ok := ctx.Value(eventKey{}).(*Event)
	if !ok {
		return Event{}, false
	}
	return *e, true
}

// ContextWithEvent returns a context that carries e, as the receiver
// gives its handler. Use it to test handlers that call [Newest].
func ContextWithEvent(ctx context.Context, e Event) context.Context {
	return context.WithValue(ctx, eventKey{}, &e)
}
