package idem

import "context"

// Step names one step of the work that a [Tracer] traces.
type Step string

// The steps traced. A request that the middleware handles is one
// StepRequest span, whose children are its claim, each run of the handler
// with the completion or release after it, or the answer it got from a key
// that exists: a replay, a 409 or a 422.
const (
	StepRequest  Step = "idem.request"   // a request the middleware handles, from its claim to its answer
	StepClaim    Step = "idem.claim"     // one Store.Claim call
	StepRun      Step = "idem.run"       // one run of the handler under a lease; the handler's own spans are its children
	StepComplete Step = "idem.complete"  // storing the response with the handler's writes
	StepRelease  Step = "idem.release"   // freeing the key: the response is not to be stored, or the run is rerun
	StepReplay   Step = "idem.replay"    // the stored response replayed; linked to the run that stored it
	StepInFlight Step = "idem.in_flight" // 409: the key is in flight; linked to its holder's trace
	StepMismatch Step = "idem.mismatch"  // 422: the key was used with another request; linked to that request's trace
	StepResume   Step = "idem.resume"    // the Resumer's run of one key's phases; continues the trace that started it
	StepPurge    Step = "idem.purge"     // one run of the Purger
)

// Tracer receives what the middleware, the [Resumer] and the [Purger] do
// as spans, for a tracing backend. The idemotel package implements it with
// OpenTelemetry. Methods must be safe for concurrent use.
//
// The middleware stores, with each key it claims, the trace context that
// TraceContext returns for the request, and hands it back in
// [SpanStart.Link] for every later answer from that key: a replay, a 409 or
// a 422 can then point to the trace of the request that ran it, and the
// Resumer continues it.
type Tracer interface {
	// Start starts the span of a step as a child of the span in ctx, and
	// returns a context that carries it. For StepResume the span continues
	// the trace of s.Link instead, when it has one.
	Start(ctx context.Context, s SpanStart) (context.Context, Span)
	// TraceContext returns the W3C trace context of the span in ctx, as a
	// traceparent field value ("00-<trace-id>-<span-id>-<flags>"), or ""
	// when ctx carries none. It is stored with a key that the request
	// claims, at most 512 bytes.
	TraceContext(ctx context.Context) string
}

// Span is a span that a [Tracer] started.
type Span interface {
	// End ends the span with what its step came to.
	End(e SpanEnd)
}

// SpanStart describes the step a span traces. It never carries a key or a
// body: the key appears as its digest.
type SpanStart struct {
	Step Step
	// Method and Path are the operation's, the request's or the key's
	// ("POST", "/v1/payments"); empty for a purge.
	Method, Path string
	// Route is the route pattern that matched the request
	// (http.Request.Pattern), when the router set one.
	Route string
	// Mode is the middleware's mode.
	Mode Mode
	// KeyDigest is the digest of the client's key, as the logs show it.
	KeyDigest string
	// Attempt counts the runs of the handler under one request that hit a
	// transaction conflict before this one, or the Resumer's runs of the
	// key that left it unfinished.
	Attempt int
	// Token is the lease's fencing token, when the step holds one.
	Token int64
	// Link is the trace context stored with the key: of the request that
	// ran it, for a replay; of its holder, for a 409; of the first
	// request, for a 422; of the request that started the operation, for
	// a resume. Empty when the key was stored without one.
	Link string
}

// SpanEnd is what a step came to.
type SpanEnd struct {
	// Result is the request's result, for StepRequest, StepReplay,
	// StepInFlight and StepMismatch; empty otherwise.
	Result Result
	// Status is the HTTP status of the response, when the step has one.
	Status int
	// Token is the fencing token of the lease that a claim or a resume
	// obtained; 0 for none.
	Token int64
	// Keys is the number of keys a purge deleted.
	Keys int64
	// Err is the error that ended the step, if any. It is recorded in the
	// span; it never reaches the client.
	Err error
}

// traceContextMax is the longest trace context stored with a key.
const traceContextMax = 512

// OriginalTraceID returns the trace id of a W3C trace context
// (traceparent) that a store returned, or "" when tc is not one.
func OriginalTraceID(tc string) string {
	// version "-" trace-id(32) "-" parent-id(16) "-" flags(2)
	if len(tc) < 55 || tc[2] != '-' || tc[35] != '-' || tc[52] != '-' {
		return ""
	}
	id := tc[3:35]
	zero := true
	for i := range len(id) {
		switch ch := id[i]; {
		case ch >= '0' && ch <= '9', ch >= 'a' && ch <= 'f':
			zero = zero && ch == '0'
		default:
			return ""
		}
	}
	if zero {
		return ""
	}
	return id
}

// traceNoteKey carries, in a traced request's context, the traceNote that
// its request span ends with.
type traceNoteKey struct{}

// traceNote is what a traced request came to, filled in by resultNoter.
type traceNote struct {
	result Result
}

// tracing holds the tracer of the middleware, the resumer or the purger;
// nil when none is configured, which costs a request nothing.
type tracing struct {
	tracer Tracer
}

// traceContext returns ctx's trace context to store with a key: ""
// without a tracer, or when it is longer than traceContextMax.
func (t tracing) traceContext(ctx context.Context) string {
	if t.tracer == nil {
		return ""
	}
	if tc := t.tracer.TraceContext(ctx); len(tc) <= traceContextMax {
		return tc
	}
	return ""
}

// start starts a span when a tracer is configured.
func (t tracing) start(ctx context.Context, s SpanStart) (context.Context, Span) {
	if t.tracer == nil {
		return ctx, noSpan{}
	}
	return t.tracer.Start(ctx, s)
}

type noSpan struct{}

func (noSpan) End(SpanEnd) {}

// untraced is the span of a step when the middleware does not trace. The
// steps of every request (claim, run, complete) check for a tracer before
// they call startSpan, rather than leave the check to it: the call's
// arguments and results cost more than the check, which most middlewares,
// untraced, are left with.
var untraced Span = noSpan{}
