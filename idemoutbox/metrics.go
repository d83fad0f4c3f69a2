package idemoutbox

import (
	"context"
	"time"
)

// Result is the outcome of one delivery attempt, as [Metrics] counts it.
type Result string

// The results counted by [Metrics].
const (
	ResultDelivered Result = "delivered" // the deliverer succeeded
	ResultRetried   Result = "retried"   // the attempt failed; the event is retried later
	ResultDead      Result = "dead"      // the last allowed attempt failed; the event is parked
)

// Results returns every Result, in a new slice.
func Results() []Result { return []Result{ResultDelivered, ResultRetried, ResultDead} }

// Metrics receives what a [Relay] does. Methods must be safe for
// concurrent use.
type Metrics interface {
	// Delivery counts one delivery attempt by its result.
	Delivery(ctx context.Context, r Result)
	// Backlog reports the outbox after a relay's poll: the pending events,
	// the age of the oldest (0 when none), and the dead events.
	Backlog(ctx context.Context, pending int64, oldest time.Duration, dead int64)
}

type noMetrics struct{}

func (noMetrics) Delivery(context.Context, Result)                     {}
func (noMetrics) Backlog(context.Context, int64, time.Duration, int64) {}
