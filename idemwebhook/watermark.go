package idemwebhook

import (
	"context"
	"errors"
	"time"
)

// Watermarks keeps, per endpoint and object, the newest event applied to
// the object, in the transaction of the handler's lease: it moves with the
// handler's writes and rolls back with them. idempg.Store and
// idemsqlite.Store implement it.
type Watermarks interface {
	// AdvanceWatermark moves the object's watermark to (p.Time,
	// p.EventID) unless it is past it already, and reports whether it
	// moved: false means that a newer event of the object was applied.
	// Watermarks are ordered by time, then by event id, so that events of
	// one time are ordered the same way whichever arrives first. An event
	// at the watermark itself (the same time and id) does not move it:
	// it was applied already, as after a redelivery that came after its
	// key was purged. Ask once per event. Times are kept to the
	// microsecond.
	AdvanceWatermark(ctx context.Context, p WatermarkParams) (bool, error)
}

// WatermarkParams are the inputs of [Watermarks.AdvanceWatermark].
type WatermarkParams struct {
	Endpoint string    // the receiver's endpoint; required
	Object   string    // the object's id, such as "pay_123"; required
	Time     time.Time // the event's time; required
	EventID  string    // the event's id; required
}

// Errors of [Newest].
var (
	// ErrNoEvent means the context is not a delivery's: Newest runs in
	// a handler behind a Receiver, or with a context from
	// ContextWithEvent.
	ErrNoEvent = errors.New("idemwebhook: no webhook event in context")
	// ErrNoTime means the event's payload says not when it happened, so
	// it cannot be ordered: pass a time of the handler's own to
	// Watermarks.AdvanceWatermark.
	ErrNoTime = errors.New("idemwebhook: the event has no time")
	// ErrNoObject means Newest was called without an object.
	ErrNoObject = errors.New("idemwebhook: no object to order the event by")
)

// Newest reports whether the event being handled is the newest applied to
// object so far at its endpoint, and then records it as the object's
// watermark, in the handler's transaction: a handler applies the event when
// it is newest, and answers 2xx without applying it when a newer event of
// the object was applied already (providers deliver out of order). The
// event's time is [Event.Time]: a Standard Webhooks payload's timestamp,
// a Stripe event's created.
//
// Two deliveries of events of one object that run at the same time are
// ordered by the store: the second waits for the first's transaction, or
// hits a conflict that the middleware answers by running it again. When
// Newest fails, the handler should answer 500 at once: the middleware
// answers the delivery for what happened (a 409 when another delivery of
// the event holds it, a 503 when the store failed) and rolls back.
func Newest(ctx context.Context, w Watermarks, object string) (bool, error) {
	ev, ok := EventFromContext(ctx)
	switch {
	case !ok:
		return false, ErrNoEvent
	case ev.Time.IsZero():
		return false, ErrNoTime
	case object == "":
		return false, ErrNoObject
	}
	return w.AdvanceWatermark(ctx, WatermarkParams{Endpoint: ev.Endpoint, Object: object, Time: ev.Time, EventID: ev.ID})
}
