package idem

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"time"

	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/internal/bodybuf"
	"github.com/idemkit/idem/internal/deadline"
	"github.com/idemkit/idem/internal/fingerprint"
	"github.com/idemkit/idem/internal/keyspec"
	"github.com/idemkit/idem/internal/recent"
)

// Middleware enforces the Idempotency-Key contract in front of a handler.
type Middleware struct {
	store         idemstore.Store
	cfg           *Config
	replayHeaders replayList
	recent        *recent.Keys // keys claimed here lately; see claimOnce
	tracing       tracing
	// storeCalls bounds each store call by Config.StoreTimeout, without a
	// timer of its own (see package deadline).
	storeCalls *deadline.Queue
	// wallClock is set when Config.Now is time.Now, the default, whose
	// reading claimOnce then uses to time the claim too; and claimsTimed
	// when Config.Metrics counts claims, so that they are timed only then.
	wallClock, claimsTimed bool
}

// New returns the middleware for a store. cfg.ClientID is required.
func New(store idemstore.Store, cfg *Config) (*Middleware, error) {
	if store == nil {
		return nil, errors.New("idem: a Store is required")
	}
	c, err := build(cfg)
	if err != nil {
		return nil, err
	}
	if c.ClientID == nil {
		return nil, errors.New("idem: Config.ClientID is required: keys must be scoped by client")
	}
	_, untimed := c.Metrics.(noMetrics)
	// The outcome of idemlog's line and of the request's span; a pointer,
	// whose methods the interface calls directly, where a value's go
	// through a wrapper that copies it.
	c.Metrics = &resultNoter{next: c.Metrics, traced: c.Tracer != nil}
	return &Middleware{
		store: store, cfg: c, replayHeaders: newReplayList(c.ReplayHeaders), recent: recent.New(), tracing: tracing{c.Tracer},
		storeCalls: deadline.NewQueue(c.StoreTimeout), wallClock: cfg != nil && cfg.Now == nil, claimsTimed: !untimed,
	}, nil
}

// Wrap returns next behind the contract. Its method value is a
// func(http.Handler) http.Handler, for routers that chain middleware.
func (m *Middleware) Wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m.serve(w, r, next)
	})
}

// call is one request that the middleware handles: where its answer goes,
// the handler it protects, and what parse read from it.
type call struct {
	w    http.ResponseWriter
	r    *http.Request
	next http.Handler

	scope idemstore.Scope
	path  string // the request's path as it is fingerprinted and recorded; see requestPath
	body  []byte
	// bodyHeld counts the runs of the handler that may still read the
	// body: one that panicked, or whose reader was being read when it
	// returned. The body's buffer is reused only when none may; see
	// package bodybuf.
	bodyHeld   int
	bodyHolder *[]byte                 // the holder of body's buffer; see bodybuf.Get
	fp         fingerprint.Fingerprint // without its field digests; see Fingerprint.WithFields
	fields     []byte                  // the field digests, encoded

	base *slog.Logger
	log  *slog.Logger // base with the client and the key's digest; see logger

	// traceContext is the request's W3C trace context, stored with the
	// key it claims; empty when it is not traced.
	traceContext string
	digest       string // the key's digest, for spans; see spanStart

	// The first run's execution, in the call's allocation; a rerun
	// allocates its own.
	first     execution
	firstUsed bool

	// values is room for the values of the answer's header fields, which
	// copyFields and copyFieldList take when they fit: one answer is
	// written a call.
	values [4]string
	// detached is the parent of finishContext's context.
	detached detachedContext
}

// spanStart describes a step of c's for a span.
func (m *Middleware) spanStart(c *call, step Step) SpanStart {
	if c.digest == "" {
		c.digest = keyspec.Digest(c.scope.Key)
	}
	return SpanStart{Step: step, Method: c.r.Method, Path: c.path, Route: c.r.Pattern, Mode: m.cfg.Mode, KeyDigest: c.digest}
}

// startSpan starts the span of a step of c's, with the token of the lease
// it holds if any, when the middleware traces.
func (m *Middleware) startSpan(ctx context.Context, c *call, step Step, attempt int, lease idemstore.Lease) (context.Context, Span) {
	if m.tracing.tracer == nil {
		return ctx, noSpan{}
	}
	s := m.spanStart(c, step)
	s.Attempt = attempt
	if lease != nil {
		s.Token = lease.Info().Token
	}
	return m.tracing.tracer.Start(ctx, s)
}

// serveTraced is claimAndRun in the request's span, whose context the
// request then carries, and which the key is stored with.
func (m *Middleware) serveTraced(c *call) {
	note := &traceNote{}
	ctx := context.WithValue(c.r.Context(), traceNoteKey{}, note)
	ctx, span := m.tracing.tracer.Start(ctx, m.spanStart(c, StepRequest))
	defer func() { span.End(SpanEnd{Result: note.result}) }()
	c.r = c.r.WithContext(ctx)
	c.traceContext = m.tracing.traceContext(ctx)
	m.claimAndRun(c)
}

// logger returns the logger for every line about this request: it carries
// the client and the key's digest. It is built at the first line, since
// most requests log none.
func (c *call) logger() *slog.Logger {
	if c.log == nil {
		c.log = c.base.With("client_id", c.scope.ClientID, "key_digest", keyspec.Digest(c.scope.Key))
	}
	return c.log
}

// runOutcome is how one run of the handler under a lease ended.
type runOutcome int

const (
	// answered: a response, the handler's or a problem, was written.
	answered runOutcome = iota
	// conflicted: the lease's transaction hit a conflict that a rerun may
	// fix. The lease is released and nothing was written.
	conflicted
)

func (m *Middleware) serve(w http.ResponseWriter, r *http.Request, next http.Handler) {
	if !applies(r.Method) {
		next.ServeHTTP(w, r)
		return
	}
	required := m.cfg.Require(r)
	if !required && len(r.Header[HeaderKey]) == 0 { // canonical already
		next.ServeHTTP(w, r) // no key, and none needed
		return
	}
	c, rej := m.parse(w, r, required)
	if rej != nil {
		m.problem(w, r, rej.code, rej.detail, 0)
		return
	}
	c.next = next
	if m.tracing.tracer != nil {
		m.serveTraced(c)
	} else {
		m.claimAndRun(c)
	}
	if c.bodyHeld == 0 {
		bodybuf.Recycle(c.body, c.bodyHolder)
	}
}

// claimAndRun claims the key and runs the handler under the lease, again
// after a transaction conflict while reruns are left.
func (m *Middleware) claimAndRun(c *call) {
	for attempt := 0; ; attempt++ {
		lease := m.claim(c)
		if lease == nil {
			return
		}
		if m.run(c, lease, attempt) == answered {
			return
		}
		m.cfg.Metrics.Request(c.r.Context(), ResultConflictRerun)
		c.logger().InfoContext(c.r.Context(), "idem: transaction conflict; running the request again", "attempt", attempt+1)
		// Give the transaction that won a moment to commit, with jitter so
		// that reruns of one conflict do not collide again.
		pause := time.NewTimer(time.Duration(attempt+1)*10*time.Millisecond + rand.N(10*time.Millisecond))
		select {
		case <-pause.C:
		case <-c.r.Context().Done():
			pause.Stop()
			return
		}
	}
}

// claim claims the key. It returns the lease when the request now owns the
// key, and nil when it has answered the request itself: with the stored
// response, a 409 or 422 for a key that exists, or a 503 when the store
// failed.
func (m *Middleware) claim(c *call) idemstore.Lease {
	ctx := c.r.Context()
	res, err := m.claimWaiting(c)
	switch {
	case err != nil && ctx.Err() != nil:
		return nil // the client went away; nothing was claimed
	case err != nil:
		c.logger().ErrorContext(ctx, "idem: claim failed", "err", err)
		m.unavailable(c, "The idempotency store did not answer; the request was not processed.")
		return nil
	case res.Record != nil:
		m.answerExisting(c, res.Record)
		return nil
	case res.Lease == nil:
		c.logger().ErrorContext(ctx, "idem: claim failed", "err", errors.New("the store returned neither a lease nor a record"))
		m.unavailable(c, "The idempotency store did not answer; the request was not processed.")
		return nil
	}
	if info := res.Lease.Info(); info.TakenOver {
		m.cfg.Metrics.Request(ctx, ResultTakenOver)
		c.logger().InfoContext(ctx, "idem: took over an expired lease", "token", info.Token)
	}
	return res.Lease
}

// mayRerun reports whether a conflict in the given attempt (0 for the
// first run) is answered by running the request again.
func (m *Middleware) mayRerun(attempt int) bool {
	return m.cfg.Mode == ModeAtomic && attempt < m.cfg.MaxConflictRetries
}

// finishContext bounds a call that finishes a lease. It does not depend on
// the client staying connected: a handler that finished its work commits
// it, and the client's retry gets the replay. Stop it when the call
// returns.
func (m *Middleware) finishContext(c *call) *deadline.Context {
	c.detached = detachedContext{c.r.Context()}
	return m.storeCalls.WithTimeout(&c.detached)
}

// detachedContext is the values of parent without its cancellation, as
// context.WithoutCancel returns it, but in the call's allocation rather
// than one of its own. It is only the parent of finishContext's, which
// cancels on its own: its Done is nil, which tells the context package
// that it is never canceled, so that the package never looks through it
// for a parent to cancel with.
type detachedContext struct{ parent context.Context }

func (detachedContext) Deadline() (time.Time, bool) { return time.Time{}, false }
func (detachedContext) Done() <-chan struct{}       { return nil }
func (detachedContext) Err() error                  { return nil }
func (d *detachedContext) Value(key any) any        { return d.parent.Value(key) }

// run runs the handler under the lease, then stores its response or
// releases the key, and answers. It answers nothing and reports conflicted
// when the lease's transaction hit a conflict and attempt may be rerun.
func (m *Middleware) run(c *call, lease idemstore.Lease, attempt int) runOutcome {
	rec := m.execute(c, lease, attempt)
	if rec.streamed() {
		c.w = &discardWriter{} // the client has the response; see StreamResponse
		defer rec.abortIfBroken()
	}
	finish := m.finishContext(c)
	defer finish.Stop()
	var ctx context.Context = finish
	rerun := func() bool { return m.mayRerun(attempt) && reportsConflict(lease) }
	switch {
	case rerun():
		sctx, span := m.startSpan(ctx, c, StepRelease, attempt, lease)
		err := lease.Release(sctx)
		span.End(SpanEnd{Err: err})
		if err != nil {
			c.logger().ErrorContext(ctx, "idem: release after a transaction conflict failed", "err", err)
			m.unavailable(c, "The request hit a transaction conflict and its result was not recorded, and the idempotency store did not confirm that its key was freed; retry with the same key after Retry-After.")
			return answered
		}
		return conflicted
	case rec.unfinished() || m.cfg.Outcome(rec.statusCode()) == OutcomeRelease:
		// An unfinished phased operation is released whatever the policy:
		// its key keeps its recovery point, and the retry resumes.
		m.release(ctx, c, lease, rec, attempt)
		return answered
	}
	sctx, span := ctx, untraced
	if m.tracing.tracer != nil { // see untraced
		sctx, span = m.startSpan(ctx, c, StepComplete, attempt, lease)
	}
	err := lease.Complete(sctx, m.responseOf(rec))
	if m.tracing.tracer != nil { // untraced, no SpanEnd to build and pass
		span.End(SpanEnd{Status: rec.statusCode(), Err: err})
	}
	if err != nil && rerun() {
		return conflicted // Complete rolled back; the commit itself hit the conflict
	}
	if err != nil {
		m.answerNotStored(ctx, c, lease, err)
		return answered
	}
	// Stored: the handler's response is the answer.
	m.cfg.Metrics.Request(c.r.Context(), ResultExecuted)
	rec.writeTo(c.w, c.values[:0])
	return answered
}

// reportsConflict reports whether the lease's transaction hit a
// serialization failure or deadlock.
func reportsConflict(lease idemstore.Lease) bool {
	cr, ok := lease.(idemstore.ConflictReporter)
	return ok && cr.Conflicted()
}

// release frees the key of a response that is not to be stored, and
// answers with that response.
func (m *Middleware) release(ctx context.Context, c *call, lease idemstore.Lease, rec *recorder, attempt int) {
	sctx, span := m.startSpan(ctx, c, StepRelease, attempt, lease)
	err := lease.Release(sctx)
	span.End(SpanEnd{Status: rec.statusCode(), Err: err})
	var exists *idemstore.ExistsError
	if errors.As(err, &exists) && exists.Record != nil {
		// A speculative claim found the key: the handler's response is
		// not this key's.
		m.answerExisting(c, exists.Record)
		return
	}
	if err != nil {
		c.logger().ErrorContext(ctx, "idem: release failed", "err", err)
		m.unavailable(c, "The result of this request was not recorded, and the idempotency store did not confirm that its key was freed; retry with the same key after Retry-After.")
		return
	}
	m.cfg.Metrics.Request(c.r.Context(), ResultReleased)
	rec.writeTo(c.w, c.values[:0])
}

// answerNotStored answers after Complete failed with err. It is apart from
// run so that the targets of its errors.As, which escape, are
// allocated only when Complete fails.
func (m *Middleware) answerNotStored(ctx context.Context, c *call, lease idemstore.Lease, err error) {
	var (
		completed *idemstore.CompletedError
		exists    *idemstore.ExistsError
	)
	switch {
	case errors.As(err, &exists) && exists.Record != nil:
		// A speculative claim found the key held or completed: nothing of
		// the handler's ran in the store, and its response is not this
		// key's.
		m.answerExisting(c, exists.Record)
	case errors.As(err, &completed) && completed.Record != nil:
		// Another request stored the key first: answer as a claim that had
		// found its row would, with the replay or 422.
		c.logger().WarnContext(ctx, "idem: another request completed the key first; the handler's writes were rolled back")
		m.answerExisting(c, completed.Record)
	case errors.Is(err, idemstore.ErrLeaseLost):
		c.logger().WarnContext(ctx, "idem: lease lost; the handler's writes were rolled back")
		m.cfg.Metrics.Request(c.r.Context(), ResultLeaseLost)
		WriteProblem(c.w, ProblemKeyInFlight.Kind().New(m.cfg.ProblemTypeBase, "Another request took this key over; retry with the same key to get its result."), 1)
	case errors.Is(err, idemstore.ErrOutcomeUnknown):
		c.logger().ErrorContext(ctx, "idem: the commit of the result was sent and its answer lost; the outcome is unknown", "err", err)
		if m.cfg.Mode == ModeTwoPhase {
			// Release frees the key only if the commit did not happen: it
			// never frees a completed key. Either way the retry need not
			// wait for the lease to run out.
			if err := lease.Release(ctx); err != nil {
				c.logger().ErrorContext(ctx, "idem: release after an unknown outcome failed; the key is freed when its lease expires, unless the commit happened", "err", err)
			}
		}
		m.problem(c.w, c.r, ProblemOutcomeUnknown, "The connection to the idempotency store was lost while the result was being committed, so whether this request took effect is unknown. Retry with the same Idempotency-Key, never a new one: the retry returns the result if it was recorded, and runs the request if it was not.", unavailableRetryAfter)
	case m.cfg.Mode == ModeTwoPhase:
		// The handler's own effects stand; only its response was not
		// stored. Free the committed claim now, so the client's retry need
		// not wait for the lease to run out.
		c.logger().ErrorContext(ctx, "idem: storing the response failed; the key is released", "err", err)
		if err := lease.Release(ctx); err != nil {
			c.logger().ErrorContext(ctx, "idem: release after a failed complete failed; the key is freed when its lease expires", "err", err)
		}
		m.unavailable(c, "The idempotency store failed to record the result, and the key was released. Retry with the same key after Retry-After: the request runs again under it.")
	default:
		// A store returns ErrOutcomeUnknown when its commit may have
		// happened; any other error from Complete means it did not.
		c.logger().ErrorContext(ctx, "idem: storing the response failed; the handler's writes were rolled back", "err", err)
		m.unavailable(c, "The idempotency store failed to record the result, and the request's writes were rolled back with it. Retry with the same key after Retry-After.")
	}
}

// execute runs the handler under the lease and buffers its response. When
// the handler panics, it releases the lease, which rolls back the handler's
// writes and frees the key, and lets the panic go on to the server.
func (m *Middleware) execute(c *call, lease idemstore.Lease, attempt int) *recorder {
	base, span := c.r.Context(), untraced
	if m.tracing.tracer != nil { // see untraced
		base, span = m.startSpan(base, c, StepRun, attempt, lease)
	}
	finished := false
	defer func() {
		if finished {
			return
		}
		span.End(SpanEnd{Err: errHandlerPanicked})
		ctx := m.finishContext(c)
		defer ctx.Stop()
		m.cfg.Metrics.Request(ctx, ResultReleased)
		var exists *idemstore.ExistsError
		if err := lease.Release(ctx); err != nil && !errors.As(err, &exists) {
			c.logger().ErrorContext(ctx, "idem: release after panic failed", "err", err)
		}
	}()
	x := &c.first
	if c.firstUsed {
		x = &execution{}
	}
	c.firstUsed = true
	x.rec.header = make(http.Header)
	x.rec.body = *bytes.NewBuffer(x.bodyBuf[:0])
	x.ctx = scopeContext{Context: lease.Context(base), scope: &c.scope}
	rec := &x.rec
	if m.cfg.Mode == ModeTwoPhase {
		// Phases.Run finds the lease in the context and reports an
		// unfinished operation back.
		x.phases = phaseHost{lease: lease, base: m.cfg.ProblemTypeBase, storeTimeout: m.cfg.StoreTimeout}
		rec.phases, x.ctx.phases = &x.phases, &x.phases
	}
	req := c.r.WithContext(&x.ctx)
	c.bodyHeld++
	x.body.Attach(c.body)
	req.Body = &x.body
	req.ContentLength = int64(len(c.body))
	if m.cfg.Mode == ModeTwoPhase {
		rec.client = c.w // the response may stream; see StreamResponse
	}
	c.next.ServeHTTP(rec, req)
	finished = true
	if m.tracing.tracer != nil { // untraced, no SpanEnd to build and pass
		span.End(SpanEnd{Status: rec.statusCode()})
	}
	// The handler is done with its body: a reader of it that the handler
	// left behind reads nothing more, and unless it is reading now, the
	// buffer may go to another request.
	if x.body.Detach() {
		c.bodyHeld--
	}
	return rec
}

// errHandlerPanicked ends the span of a run whose handler panicked.
var errHandlerPanicked = errors.New("idem: the handler panicked; its writes were rolled back and its key released")

// execution is what one run of the handler needs besides its request, in
// one allocation: the recorder of its response and room for its body, the
// reader of the request's body, the context that carries the scope, and in
// ModeTwoPhase the phases' host that the context carries as well.
type execution struct {
	rec    recorder
	body   bodybuf.Reader
	ctx    scopeContext
	phases phaseHost // in ModeTwoPhase
	// bodyBuf is where the recorder buffers a response's body first, so
	// that one of most APIs' sizes needs no allocation of its own.
	bodyBuf [256]byte
}
