package idem

import (
	"context"
	"time"
)

// Result is what the middleware did with one request that it handled.
type Result string

// The results counted by [Metrics].
const (
	ResultExecuted       Result = "executed"        // the handler ran and its response was stored
	ResultReleased       Result = "released"        // the handler ran; nothing stored (4xx not processed, 5xx, panic)
	ResultReplayed       Result = "replayed"        // a stored response was replayed
	ResultInFlight       Result = "in_flight"       // 409: the first request with the key is still in flight
	ResultMismatch       Result = "mismatch"        // 422: the key was used with another request
	ResultRejected       Result = "rejected"        // 400, 401, 408, 413 or 415 before the store
	ResultUnavailable    Result = "unavailable"     // 503: the store failed; no result was recorded
	ResultOutcomeUnknown Result = "outcome_unknown" // 503: the commit of the result was sent and its answer lost
	ResultLeaseLost      Result = "lease_lost"      // 409: another request took the key over; the handler's writes rolled back
	ResultTakenOver      Result = "taken_over"      // a claim took over an expired lease (also counted as its final result)
	ResultConflictRerun  Result = "conflict_rerun"  // a transaction conflict made the middleware run the request again (in addition to the final result)
)

// Results returns every Result the middleware counts, in a new slice, for
// adapters that create each series up front.
func Results() []Result {
	return []Result{
		ResultExecuted, ResultReleased, ResultReplayed, ResultInFlight, ResultMismatch,
		ResultRejected, ResultUnavailable, ResultOutcomeUnknown, ResultLeaseLost, ResultTakenOver, ResultConflictRerun,
	}
}

// Metrics receives what the middleware does, for dashboards and alerts. The
// idemprom package implements it with Prometheus collectors. Methods must be
// safe for concurrent use and fast: they run on the request path.
type Metrics interface {
	// Request counts one result of a request. Takeovers and reruns are
	// counted in addition to the request's final result.
	Request(ctx context.Context, r Result)
	// Claim observes how long one Store.Claim call took, and whether it
	// failed.
	Claim(ctx context.Context, d time.Duration, err error)
}

type noMetrics struct{}

func (noMetrics) Request(context.Context, Result)             {}
func (noMetrics) Claim(context.Context, time.Duration, error) {}
