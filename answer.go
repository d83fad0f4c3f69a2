package idem

import (
	"bytes"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/internal/fingerprint"
)

// unavailableRetryAfter is the Retry-After of 503 answers, in seconds.
const unavailableRetryAfter = 1

// problem answers with a problem of one of idem's kinds and counts its
// result.
func (m *Middleware) problem(w http.ResponseWriter, r *http.Request, code ProblemCode, detail string, retryAfter int) {
	m.cfg.Metrics.Request(r.Context(), resultOf(code))
	WriteProblem(w, code.Kind().New(m.cfg.ProblemTypeBase, detail), retryAfter)
}

// resultOf is the Result counted for a problem the middleware answers.
func resultOf(code ProblemCode) Result {
	switch code {
	case ProblemKeyInFlight:
		return ResultInFlight
	case ProblemKeyReused:
		return ResultMismatch
	case ProblemUnavailable:
		return ResultUnavailable
	case ProblemOutcomeUnknown:
		return ResultOutcomeUnknown
	}
	return ResultRejected
}

// unavailable answers 503: the store failed. detail says what became of
// the request.
func (m *Middleware) unavailable(c *call, detail string) {
	m.problem(c.w, c.r, ProblemUnavailable, detail, unavailableRetryAfter)
}

// answerExisting answers a request whose key is already held or completed.
func (m *Middleware) answerExisting(c *call, rec *idemstore.Record) {
	r := c.r
	// A key stored without a fingerprint (imported by other code) stands
	// for its request by itself (docs/http-contract.md, "The fingerprint").
	mismatch := len(rec.RequestHash) > 0 && !bytes.Equal(rec.RequestHash, c.fp.Sum[:])
	replay := !mismatch && rec.Status == idemstore.StatusCompleted && rec.Response != nil
	if m.tracing.tracer != nil {
		defer m.traceExisting(c, rec, mismatch, replay)()
	}
	if m.cfg.ExposeOriginalTrace && !mismatch {
		if id := OriginalTraceID(rec.TraceContext); id != "" {
			c.w.Header().Set(HeaderOriginalTrace, id)
		}
	}
	if mismatch {
		p := ProblemKeyReused.Kind().New(m.cfg.ProblemTypeBase, "")
		if rec.Method != r.Method || rec.Path != c.path {
			p.OriginalRequest = rec.Method + " " + rec.Path
			p.Detail = fmt.Sprintf("This key was first used for %s %s.", rec.Method, rec.Path)
		} else if first := fingerprint.KindChange(rec.RequestFields, c.fp); first != "" {
			// Fields of another media type compare as all different; name
			// the media type instead.
			p.Detail = fmt.Sprintf("This key was first used with %s, and this request has %s: the media type differs. A retry must send the first request's media type and body.", fingerprint.DescribeKind(first), fingerprint.DescribeKind(c.fp.Kind))
		} else if p.Fields = fingerprint.DiffFields(rec.RequestFields, c.fp.WithFields(c.fields)); len(p.Fields) > 0 {
			p.Detail = fmt.Sprintf("This key was first used with a different request: %s %s.", strings.Join(p.Fields, ", "), plural(len(p.Fields), "differs", "differ"))
		} else {
			p.Detail = "This key was first used with a different request: the query string or body differs."
		}
		m.cfg.Metrics.Request(r.Context(), ResultMismatch)
		WriteProblem(c.w, p, 0)
		return
	}
	if replay {
		m.cfg.Metrics.Request(r.Context(), ResultReplayed)
		m.replay(c.w, rec.Response, c.values[:0])
		return
	}
	m.problem(c.w, r, ProblemKeyInFlight, "The first request with this key is still being processed; retry with the same key after Retry-After.", m.inFlightRetryAfter(rec))
}

// traceExisting starts the span of an answer from a key that exists,
// linked to the trace stored with the key, and returns the function that
// ends it.
func (m *Middleware) traceExisting(c *call, rec *idemstore.Record, mismatch, replay bool) func() {
	step, end := StepInFlight, SpanEnd{Result: ResultInFlight, Status: http.StatusConflict}
	switch {
	case mismatch:
		step, end = StepMismatch, SpanEnd{Result: ResultMismatch, Status: http.StatusUnprocessableEntity}
	case replay:
		step, end = StepReplay, SpanEnd{Result: ResultReplayed, Status: rec.Response.StatusCode}
	}
	s := m.spanStart(c, step)
	s.Token, s.Link = rec.Token, rec.TraceContext
	_, span := m.tracing.tracer.Start(c.r.Context(), s)
	return func() { span.End(end) }
}

// inFlightRetryAfter is the Retry-After, in seconds, of the 409 for a key
// in flight: in two-phase mode what is left of the holder's lease, rounded
// up, at least 1 and at most the lock timeout; 1 in atomic mode, where the
// holder's transaction decides and there is no lease to wait for.
//
// The clock is read again after the claim: the holder may have claimed the
// key while this request's claim waited, after this request's first
// reading. What is left of a lease is never more than the lock timeout,
// even when the holder's clock is ahead of this one.
func (m *Middleware) inFlightRetryAfter(rec *idemstore.Record) int {
	if m.cfg.Mode != ModeTwoPhase || rec.LockedAt.IsZero() {
		return 1
	}
	left := min(rec.LockedAt.Add(m.cfg.LockTimeout).Sub(m.cfg.Now()), m.cfg.LockTimeout)
	return max(1, int((left+time.Second-1)/time.Second))
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// replay answers with a stored response, marked as replayed. The values
// of its header fields go in buf when they fit (see copyFields).
func (m *Middleware) replay(w http.ResponseWriter, resp *idemstore.Response, buf []string) {
	h := w.Header()
	// The replay header and Content-Length share the values' room.
	values := copyFields(h, resp.Header, nil, 2, buf)
	h[HeaderReplayed] = append(values[:0:1], "true")
	if !bodyAllowed(resp.StatusCode) {
		w.WriteHeader(resp.StatusCode)
		return
	}
	h["Content-Length"] = append(values[1:1:2], strconv.Itoa(len(resp.Body)))
	w.WriteHeader(resp.StatusCode)
	w.Write(resp.Body)
}

// copyFields copies the fields of src to dst, all of them or those named,
// with their values in one slice, and returns the rest of that slice: room
// for extra more values. Each field's values are capped, so that appending
// to one never writes into another's. The slice is buf, an empty slice
// that nothing else uses while dst does, when it has room for one value a
// field and the extra ones; else a new one.
//
// It reads src once: the slice has room for one value a field, as most
// fields have, and grows for those with more, while the fields copied
// before keep the values they point to.
func copyFields(dst, src http.Header, names []string, extra int, buf []string) []string {
	values := buf[:0]
	if cap(values) < len(src)+extra {
		values = make([]string, 0, len(src)+extra)
	}
	for name, v := range src {
		switch {
		case names != nil && !slices.Contains(names, name):
		case len(v) == 0:
			if names == nil {
				dst[name] = slices.Clone(v) // as it was: nil or empty
			}
		default:
			start := len(values)
			values = append(values, v...)
			dst[name] = values[start:len(values):len(values)]
		}
	}
	if cap(values)-len(values) < extra {
		values = make([]string, 0, extra)
	}
	return values[len(values) : len(values) : len(values)+extra]
}

// copyFieldList is copyFields of all the fields of a header, which fields
// lists, each with values: it reads a list rather than a map. As
// copyFields, it makes room for one value a field at first.
func copyFieldList(dst http.Header, fields []field, extra int, buf []string) []string {
	values := buf[:0]
	if cap(values) < len(fields)+extra {
		values = make([]string, 0, len(fields)+extra)
	}
	for i := range fields {
		f := &fields[i]
		start := len(values)
		if len(f.values) == 1 { // most fields: no call to copy one value
			values = append(values, f.values[0])
		} else {
			values = append(values, f.values...)
		}
		dst[f.name] = values[start:len(values):len(values)]
	}
	if cap(values)-len(values) < extra {
		values = make([]string, 0, extra)
	}
	return values[len(values) : len(values) : len(values)+extra]
}

// writeBody writes the status and, when the status allows one, the body
// with its Content-Length, whose value goes in spare's room if it has any.
func writeBody(w http.ResponseWriter, status int, body []byte, spare []string) {
	if !bodyAllowed(status) {
		w.WriteHeader(status)
		return
	}
	w.Header()["Content-Length"] = append(spare[:0:min(1, cap(spare))], strconv.Itoa(len(body))) // canonical already
	w.WriteHeader(status)
	w.Write(body)
}

func bodyAllowed(status int) bool {
	return status >= 200 && status != http.StatusNoContent && status != http.StatusNotModified
}
