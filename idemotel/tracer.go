package idemotel

import (
	"context"
	"net/http"
	"strconv"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemkit/idem"
)

// ScopeName is the instrumentation scope of idem's spans.
const ScopeName = "github.com/idemkit/idem/idemotel"

// The attributes of idem's spans. None carries a key or a body.
const (
	AttrOperation  = attribute.Key("idem.operation")   // "POST /v1/payments": the method and path the key was first used with
	AttrRoute      = attribute.Key("http.route")       // the route pattern, when the router set one
	AttrMode       = attribute.Key("idem.mode")        // "atomic" or "two-phase"
	AttrKeyDigest  = attribute.Key("idem.key_digest")  // the digest of the client's key, as idem's logs show it
	AttrAttempt    = attribute.Key("idem.attempt")     // runs before this one that hit a conflict, or that the resumer left unfinished
	AttrLeaseToken = attribute.Key("idem.lease_token") // the lease's fencing token
	AttrOutcome    = attribute.Key("idem.outcome")     // the request's idem.Result: executed, replayed, in_flight, mismatch, ...
	AttrStatusCode = attribute.Key("http.response.status_code")
	AttrPurged     = attribute.Key("idem.purged_keys") // keys a purge pass deleted
	// AttrLinkKind is set on a span's link to the trace stored with the
	// key: "ran_key" for a replay, a 422 or a resume, "holds_key" for a 409.
	AttrLinkKind = attribute.Key("idem.link")
)

// Config configures a [Tracer]. A nil *Config uses every default.
type Config struct {
	// TracerProvider makes the tracer. Defaults to otel.GetTracerProvider().
	TracerProvider trace.TracerProvider
}

// Tracer implements [idem.Tracer] with OpenTelemetry.
type Tracer struct {
	tracer trace.Tracer
}

var _ idem.Tracer = (*Tracer)(nil)

// New returns a Tracer. Set it as idem.Config.Tracer, in the one Config
// that the middleware, the Resumer and the Purger are built from.
func New(cfg *Config) (*Tracer, error) {
	var c Config
	if cfg != nil {
		c = *cfg
	}
	if c.TracerProvider == nil {
		c.TracerProvider = otel.GetTracerProvider()
	}
	return &Tracer{tracer: c.TracerProvider.Tracer(ScopeName)}, nil
}

// Start implements [idem.Tracer].
func (t *Tracer) Start(ctx context.Context, s idem.SpanStart) (context.Context, idem.Span) {
	var buf [6]attribute.KeyValue
	attrs := buf[:0]
	if s.Step == idem.StepRequest || s.Step == idem.StepResume {
		// What the request or the operation is; its steps, the spans
		// under the request's, inherit it.
		if s.Method != "" {
			attrs = append(attrs, AttrOperation.String(s.Method+" "+s.Path))
		}
		if s.Route != "" {
			attrs = append(attrs, AttrRoute.String(s.Route))
		}
		attrs = append(attrs, AttrMode.String(s.Mode.String()))
		if s.KeyDigest != "" {
			attrs = append(attrs, AttrKeyDigest.String(s.KeyDigest))
		}
	}
	if s.Step == idem.StepRun || s.Step == idem.StepResume || s.Attempt > 0 {
		attrs = append(attrs, AttrAttempt.Int(s.Attempt))
	}
	if s.Token > 0 {
		attrs = append(attrs, AttrLeaseToken.Int64(s.Token))
	}
	opts := []trace.SpanStartOption{trace.WithAttributes(attrs...)}
	if sc := SpanContextOf(s.Link); sc.IsValid() {
		kind := "ran_key"
		if s.Step == idem.StepInFlight {
			kind = "holds_key"
		}
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: sc, Attributes: []attribute.KeyValue{AttrLinkKind.String(kind)}}))
		if s.Step == idem.StepResume {
			// The operation goes on in the trace that started it.
			ctx = trace.ContextWithRemoteSpanContext(ctx, sc)
		}
	}
	ctx, span := t.tracer.Start(ctx, string(s.Step), opts...)
	return ctx, spanOf{span}
}

// TraceContext implements [idem.Tracer]: the traceparent of the span in
// ctx.
func (t *Tracer) TraceContext(ctx context.Context) string {
	return TraceContext(trace.SpanContextFromContext(ctx))
}

// TraceContext formats sc as a W3C traceparent field value; "" when sc is
// not valid.
func TraceContext(sc trace.SpanContext) string {
	if !sc.IsValid() {
		return ""
	}
	tid, sid := sc.TraceID(), sc.SpanID()
	const hex = "0123456789abcdef"
	b := make([]byte, 0, 55)
	b = append(b, "00-"...)
	for _, c := range tid {
		b = append(b, hex[c>>4], hex[c&0xf])
	}
	b = append(b, '-')
	for _, c := range sid {
		b = append(b, hex[c>>4], hex[c&0xf])
	}
	f := byte(sc.TraceFlags())
	b = append(b, '-', hex[f>>4], hex[f&0xf])
	return string(b)
}

// SpanContextOf parses a W3C traceparent field value, as stored with a
// key, into a remote span context; the zero SpanContext when tc is not
// one.
func SpanContextOf(tc string) trace.SpanContext {
	if tc == "" {
		return trace.SpanContext{}
	}
	ctx := propagation.TraceContext{}.Extract(context.Background(), traceparent(tc))
	return trace.SpanContextFromContext(ctx)
}

// traceparent is a carrier of one traceparent field.
type traceparent string

func (c traceparent) Get(key string) string {
	if key == "traceparent" {
		return string(c)
	}
	return ""
}
func (traceparent) Set(string, string) {}
func (traceparent) Keys() []string     { return []string{"traceparent"} }

// spanOf ends an OpenTelemetry span with what its step came to.
type spanOf struct{ span trace.Span }

func (s spanOf) End(e idem.SpanEnd) {
	var attrs [4]attribute.KeyValue
	n := 0
	if e.Result != "" {
		attrs[n] = AttrOutcome.String(string(e.Result))
		n++
	}
	if e.Status != 0 {
		attrs[n] = AttrStatusCode.Int(e.Status)
		n++
	}
	if e.Token > 0 {
		attrs[n] = AttrLeaseToken.Int64(e.Token)
		n++
	}
	if e.Keys > 0 {
		attrs[n] = AttrPurged.Int64(e.Keys)
		n++
	}
	if n > 0 {
		s.span.SetAttributes(attrs[:n]...)
	}
	switch {
	case e.Err != nil:
		s.span.RecordError(e.Err)
		s.span.SetStatus(codes.Error, e.Err.Error())
	case e.Result == idem.ResultUnavailable || e.Result == idem.ResultOutcomeUnknown:
		s.span.SetStatus(codes.Error, string(e.Result))
	case e.Status >= 500:
		s.span.SetStatus(codes.Error, strconv.Itoa(e.Status))
	}
	s.span.End()
}

// Extract returns next behind a handler that puts the W3C trace context
// of the request's traceparent and tracestate fields in its context, so
// that idem's spans join the caller's trace. A service that runs
// OpenTelemetry's HTTP instrumentation (otelhttp) needs none: its server
// span is the parent of idem's.
func Extract(next http.Handler) http.Handler {
	prop := propagation.TraceContext{}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Traceparent") != "" {
			r = r.WithContext(prop.Extract(r.Context(), propagation.HeaderCarrier(r.Header)))
		}
		next.ServeHTTP(w, r)
	})
}
