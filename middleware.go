package idem

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Defaults of [Config].
const (
	LockTimeoutDefault        = 30 * time.Second
	RetentionDefault          = 24 * time.Hour
	MaxBodyBytesDefault       = 1 << 20
	StoreTimeoutDefault       = 10 * time.Second
	MaxConflictRetriesDefault = 3
)

// NoConflictRetries, as [Config.MaxConflictRetries], turns reruns off: a
// request whose transaction hits a serialization failure or deadlock runs
// once, and when its response then cannot be stored, the client gets 503
// and may retry with the same key.
const NoConflictRetries = -1

// unavailableRetryAfter is the Retry-After of 503 answers, in seconds.
const unavailableRetryAfter = 1

// Headers that are never stored or replayed, whatever the configuration.
var forbiddenReplayHeaders = []string{
	"Set-Cookie", "Authorization", "Proxy-Authorization", "Proxy-Authenticate",
	"Www-Authenticate", "Cookie", "Content-Length", "Transfer-Encoding", "Connection",
	"Idempotent-Replayed",
}

// Config configures the middleware.
type Config struct {
	// ClientID returns the authenticated client of a request, from the
	// auth layer. Keys are scoped by it. A request for which it returns
	// false or "" gets 401 and never reaches the store. Required.
	ClientID func(r *http.Request) (string, bool)

	// Require decides which requests must carry a key; a request that must
	// and does not gets 400. Defaults to RequireNonIdempotent (POST, PATCH).
	Require RequirePolicy

	// Mode is how the store runs the handler. Defaults to ModeAtomic.
	Mode Mode

	// LockTimeout is how long a two-phase lease lasts before another request
	// may take the key over. Choose it comfortably longer than the slowest
	// legitimate request. Defaults to LockTimeoutDefault (30 s).
	LockTimeout time.Duration

	// Retention is how long a key is kept; a key older than this is treated
	// as unused. Publish it to clients. Defaults to RetentionDefault (24 h).
	Retention time.Duration

	// MaxBodyBytes is the largest request body accepted, checked before any
	// store work; larger bodies get 413. Defaults to MaxBodyBytesDefault (1 MiB).
	MaxBodyBytes int64

	// ExcludeFields are top-level body fields left out of the fingerprint,
	// as JSON pointers ("/client_timestamp"): fields that change on every
	// attempt of one logical request. Defaults to none.
	ExcludeFields []string

	// ReplayHeaders are response headers stored and replayed in addition to
	// Content-Type, Content-Language and Location. Set-Cookie and
	// authentication headers are never stored. Defaults to none.
	ReplayHeaders []string

	// Outcome decides which responses are stored. Defaults to
	// DefaultOutcomePolicy, which releases the key on 5xx.
	Outcome OutcomePolicy

	// MaxConflictRetries is how many times an atomic request whose
	// transaction hit a serialization failure or deadlock is run again
	// (see ConflictReporter). NoConflictRetries turns reruns off; other
	// negative values are invalid. Defaults to MaxConflictRetriesDefault (3).
	MaxConflictRetries int

	// MaxPreferWait is the longest a request waits, when its key is in
	// flight for the same request and it sends Prefer: wait=N (RFC 7240),
	// for the first request to finish; it then gets the stored response,
	// with Preference-Applied, instead of 409. A waiting request claims the
	// key again after pauses that grow to 250 ms, so it costs at most a few
	// store calls per second. Defaults to 0: Prefer: wait is ignored.
	MaxPreferWait time.Duration

	// StoreTimeout bounds each store call, so a stuck database answers 503
	// instead of holding requests. Defaults to StoreTimeoutDefault (10 s).
	StoreTimeout time.Duration

	// ProblemTypeBase prefixes the problem type URIs. Defaults to
	// ProblemTypeBaseDefault ("/problems/"); serve ProblemsHandler there.
	ProblemTypeBase string

	// Logger receives store failures and takeovers. Defaults to slog.Default().
	Logger *slog.Logger

	// Metrics receives a Result for every request handled and the time of
	// every claim. Defaults to none.
	Metrics Metrics

	// Now is the clock. Defaults to time.Now.
	Now func() time.Time
}

func (c *Config) withDefaults() *Config {
	out := Config{}
	if c != nil {
		out = *c
	}
	if out.Require == nil {
		out.Require = RequireNonIdempotent
	}
	if out.LockTimeout == 0 {
		out.LockTimeout = LockTimeoutDefault
	}
	if out.Retention == 0 {
		out.Retention = RetentionDefault
	}
	if out.MaxBodyBytes == 0 {
		out.MaxBodyBytes = MaxBodyBytesDefault
	}
	if out.Outcome == nil {
		out.Outcome = DefaultOutcomePolicy
	}
	if out.MaxConflictRetries == 0 {
		out.MaxConflictRetries = MaxConflictRetriesDefault
	}
	if out.StoreTimeout == 0 {
		out.StoreTimeout = StoreTimeoutDefault
	}
	if out.ProblemTypeBase == "" {
		out.ProblemTypeBase = ProblemTypeBaseDefault
	}
	if out.Logger == nil {
		out.Logger = slog.Default()
	}
	if out.Metrics == nil {
		out.Metrics = noMetrics{}
	}
	if out.Now == nil {
		out.Now = time.Now
	}
	return &out
}

func (c *Config) validate() error {
	if c.ClientID == nil {
		return errors.New("idem: Config.ClientID is required: keys must be scoped by client")
	}
	if c.Mode != ModeAtomic && c.Mode != ModeTwoPhase {
		return fmt.Errorf("idem: unknown Config.Mode %d", c.Mode)
	}
	if c.LockTimeout < 0 || c.Retention < 0 || c.MaxBodyBytes < 0 || c.StoreTimeout < 0 || c.MaxPreferWait < 0 {
		return errors.New("idem: durations and sizes in Config must not be negative")
	}
	if c.MaxConflictRetries < NoConflictRetries {
		return fmt.Errorf("idem: Config.MaxConflictRetries %d is invalid; use NoConflictRetries to turn reruns off", c.MaxConflictRetries)
	}
	if c.Retention <= c.LockTimeout {
		return fmt.Errorf("idem: Config.Retention (%s) must be longer than Config.LockTimeout (%s)", c.Retention, c.LockTimeout)
	}
	for _, ptr := range c.ExcludeFields {
		if !strings.HasPrefix(ptr, "/") || strings.Count(ptr, "/") != 1 || len(ptr) < 2 {
			return fmt.Errorf("idem: Config.ExcludeFields entry %q must be a top-level JSON pointer such as \"/timestamp\"", ptr)
		}
	}
	for _, h := range c.ReplayHeaders {
		if slices.Contains(forbiddenReplayHeaders, http.CanonicalHeaderKey(h)) {
			return fmt.Errorf("idem: Config.ReplayHeaders must not contain %q", h)
		}
	}
	return nil
}

// Middleware enforces the Idempotency-Key contract in front of a handler.
type Middleware struct {
	store         Store
	cfg           *Config
	replayHeaders []string
}

// New returns the middleware for a store. cfg.ClientID is required.
func New(store Store, cfg *Config) (*Middleware, error) {
	if store == nil {
		return nil, errors.New("idem: a Store is required")
	}
	c := cfg.withDefaults()
	if err := c.validate(); err != nil {
		return nil, err
	}
	c.Metrics = resultNoter{c.Metrics} // the outcome of NewRequestLog's line
	replay := []string{"Content-Type", "Content-Language", "Location"}
	for _, h := range c.ReplayHeaders {
		if h = http.CanonicalHeaderKey(h); !slices.Contains(replay, h) {
			replay = append(replay, h)
		}
	}
	return &Middleware{store: store, cfg: c, replayHeaders: replay}, nil
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

	scope Scope
	body  []byte
	fp    fingerprint

	base *slog.Logger
	log  *slog.Logger // base with the client and the key's digest; see logger
}

// logger returns the logger for every line about this request: it carries
// the client and the key's digest. It is built at the first line, since
// most requests log none.
func (c *call) logger() *slog.Logger {
	if c.log == nil {
		c.log = c.base.With("client_id", c.scope.ClientID, "key_digest", keyDigest(c.scope.Key))
	}
	return c.log
}

// rejection is a 4xx answer found while parsing, before any store work.
type rejection struct {
	code   ProblemCode
	detail string
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
	if !required && len(r.Header.Values(HeaderKey)) == 0 {
		next.ServeHTTP(w, r) // no key, and none needed
		return
	}
	c, rej := m.parse(w, r, required)
	if rej != nil {
		m.problem(w, r, rej.code, rej.detail, 0)
		return
	}
	c.next = next
	m.claimAndRun(c)
}

// parse reads the key, the client, the body and the fingerprint of a
// request that needs a key or carries one.
func (m *Middleware) parse(w http.ResponseWriter, r *http.Request, required bool) (*call, *rejection) {
	key, present, err := keyFromHeader(r.Header)
	if err != nil {
		return nil, &rejection{ProblemKeyMalformed, reasonOf(err, "The Idempotency-Key field is malformed") + "."}
	}
	if !present {
		return nil, &rejection{ProblemKeyMissing, fmt.Sprintf("%s %s requires an Idempotency-Key header.", r.Method, r.URL.Path)}
	}
	clientID, ok := m.cfg.ClientID(r)
	if !ok || clientID == "" {
		return nil, &rejection{ProblemUnauthenticated, "The request carries no client identity."}
	}
	noteScope(r.Context(), Scope{ClientID: clientID, Key: key})
	contentType := r.Header.Values("Content-Type")
	if len(contentType) > 1 {
		// A singleton field (RFC 9110): which one describes the body is
		// anyone's guess, and a proxy may have picked the other.
		return nil, &rejection{ProblemBodyMalformed, fmt.Sprintf("The request has %d Content-Type header fields; send exactly one.", len(contentType))}
	}
	body, rej := m.readBody(w, r)
	if rej != nil {
		return nil, rej
	}
	fp, err := fingerprintOf(FingerprintParams{
		Method: r.Method, Path: r.URL.EscapedPath(), RawQuery: r.URL.RawQuery,
		ContentType: r.Header.Get("Content-Type"), Body: body,
		Exclude: m.cfg.ExcludeFields, Raw: !required,
	})
	switch {
	case errors.Is(err, errUnsupportedMediaType):
		return nil, &rejection{ProblemMediaType, reasonOf(err, "The media type is not supported") + "."}
	case err != nil:
		return nil, &rejection{ProblemBodyMalformed, reasonOf(err, "The request body is malformed") + "."}
	}
	return &call{
		w: w, r: r,
		scope: Scope{ClientID: clientID, Key: key},
		body:  body, fp: fp,
		base: m.cfg.Logger,
	}, nil
}

// reasonOf returns the reason, safe to show to the client, that a key or
// body error carries, or fallback for an error that carries none.
func reasonOf(err error, fallback string) string {
	var ke *invalidKeyError
	if errors.As(err, &ke) && ke.Reason != "" {
		return ke.Reason
	}
	var be *bodyError
	if errors.As(err, &be) && be.reason != "" {
		return be.reason
	}
	return fallback
}

func (m *Middleware) readBody(w http.ResponseWriter, r *http.Request) ([]byte, *rejection) {
	max := m.cfg.MaxBodyBytes
	tooLarge := func() *rejection {
		return &rejection{ProblemBodyTooLarge, fmt.Sprintf("The body is larger than the limit of %d bytes.", max)}
	}
	if r.ContentLength > max {
		return nil, tooLarge()
	}
	if r.Body == nil || r.Body == http.NoBody {
		return nil, nil
	}
	body, err := readAll(http.MaxBytesReader(w, r.Body, max), r.ContentLength)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, tooLarge()
		}
		if detail, ok := timeoutDetail(r, err); ok {
			return nil, &rejection{ProblemBodyTimeout, detail}
		}
		return nil, &rejection{ProblemBodyMalformed, "The request body could not be read."}
	}
	return body, nil
}

// readAll reads rd to its end, as io.ReadAll does, into a buffer sized for
// a body of the given length when it is known (not negative), so that a
// body of the length it declares is read in one allocation.
func readAll(rd io.Reader, length int64) ([]byte, error) {
	if length < 0 {
		return io.ReadAll(rd)
	}
	// One byte more than the body, so that reading its end needs no room;
	// a body larger than a mebibyte grows as it arrives, as a client may
	// declare a length it never sends.
	b := make([]byte, 0, min(length, 1<<20)+1)
	for {
		n, err := rd.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			return b, err
		}
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)] // the body is longer than it said; let append grow it
		}
	}
}

// timeoutDetail reports whether reading the body failed because a read
// deadline or timeout passed, and says which, for the client. The
// connection's read deadline, which net/http sets from Server.ReadTimeout,
// fails reads with an error wrapping os.ErrDeadlineExceeded; a body read
// under a context's deadline fails with context.DeadlineExceeded.
func timeoutDetail(r *http.Request, err error) (string, bool) {
	const retry = " The request was not processed; send the whole body promptly and retry with the same key."
	var timeout interface{ Timeout() bool }
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return "The request body did not arrive before the request's deadline." + retry, true
	case errors.Is(err, os.ErrDeadlineExceeded) || errors.As(err, &timeout) && timeout.Timeout():
		if srv, ok := r.Context().Value(http.ServerContextKey).(*http.Server); ok && srv.ReadTimeout > 0 {
			return fmt.Sprintf("The request body did not arrive within the server's read timeout of %s, which counts from the start of the request.", srv.ReadTimeout) + retry, true
		}
		return "The request body did not arrive before the server's read deadline." + retry, true
	}
	return "", false
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
func (m *Middleware) claim(c *call) Lease {
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
func (m *Middleware) answerExisting(c *call, rec *Record) {
	r := c.r
	if len(rec.RequestHash) > 0 && !bytes.Equal(rec.RequestHash, c.fp.sum[:]) {
		p := ProblemKeyReused.Kind().New(m.cfg.ProblemTypeBase, "")
		if rec.Method != r.Method || rec.Path != r.URL.EscapedPath() {
			p.OriginalRequest = rec.Method + " " + rec.Path
			p.Detail = fmt.Sprintf("This key was first used for %s %s.", rec.Method, rec.Path)
		} else if first := kindChange(rec.RequestFields, c.fp); first != "" {
			// Fields of another media type compare as all different; name
			// the media type instead.
			p.Detail = fmt.Sprintf("This key was first used with %s, and this request has %s: the media type differs. A retry must send the first request's media type and body.", describeKind(first), describeKind(c.fp.kind))
		} else if p.Fields = diffFields(rec.RequestFields, c.fp); len(p.Fields) > 0 {
			p.Detail = fmt.Sprintf("This key was first used with a different request: %s %s.", strings.Join(p.Fields, ", "), plural(len(p.Fields), "differs", "differ"))
		} else {
			p.Detail = "This key was first used with a different request: the query string or body differs."
		}
		m.cfg.Metrics.Request(r.Context(), ResultMismatch)
		WriteProblem(c.w, p, 0)
		return
	}
	if rec.Status == StatusCompleted && rec.Response != nil {
		m.cfg.Metrics.Request(r.Context(), ResultReplayed)
		m.replay(c.w, rec.Response)
		return
	}
	m.problem(c.w, r, ProblemKeyInFlight, "The first request with this key is still being processed; retry with the same key after Retry-After.", m.inFlightRetryAfter(rec))
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
func (m *Middleware) inFlightRetryAfter(rec *Record) int {
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

func (m *Middleware) replay(w http.ResponseWriter, resp *Response) {
	h := w.Header()
	values := copyFields(h, resp.Header, nil, 1)
	h[HeaderReplayed] = append(values, "true")
	writeBody(w, resp.StatusCode, resp.Body)
}

// copyFields copies the fields of src to dst, all of them or those named,
// with their values in one new slice, and returns the rest of that slice:
// room for extra more values. Each field's values are capped, so that
// appending to one never writes into another's.
func copyFields(dst, src http.Header, names []string, extra int) []string {
	n := extra
	for name, v := range src {
		if names == nil || slices.Contains(names, name) {
			n += len(v)
		}
	}
	values := make([]string, 0, n)
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
	return values[len(values):]
}

func writeBody(w http.ResponseWriter, status int, body []byte) {
	if bodyAllowed(status) {
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	}
	w.WriteHeader(status)
	if bodyAllowed(status) {
		w.Write(body)
	}
}

func bodyAllowed(status int) bool {
	return status >= 200 && status != http.StatusNoContent && status != http.StatusNotModified
}

// mayRerun reports whether a conflict in the given attempt (0 for the
// first run) is answered by running the request again.
func (m *Middleware) mayRerun(attempt int) bool {
	return m.cfg.Mode == ModeAtomic && attempt < m.cfg.MaxConflictRetries
}

// finishContext bounds a call that finishes a lease. It does not depend on
// the client staying connected: a handler that finished its work commits
// it, and the client's retry gets the replay.
func (m *Middleware) finishContext(c *call) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(c.r.Context()), m.cfg.StoreTimeout)
}

// run runs the handler under the lease, then stores its response or
// releases the key, and answers. It answers nothing and reports conflicted
// when the lease's transaction hit a conflict and attempt may be rerun.
func (m *Middleware) run(c *call, lease Lease, attempt int) runOutcome {
	rec := m.execute(c, lease)
	if rec.streamed() {
		c.w = &discardWriter{} // the client has the response; see StreamResponse
		defer rec.abortIfBroken()
	}
	ctx, cancel := m.finishContext(c)
	defer cancel()
	rerun := func() bool { return m.mayRerun(attempt) && reportsConflict(lease) }
	switch {
	case rerun():
		if err := lease.Release(ctx); err != nil {
			c.logger().ErrorContext(ctx, "idem: release after a transaction conflict failed", "err", err)
			m.unavailable(c, "The request hit a transaction conflict and its result was not recorded, and the idempotency store did not confirm that its key was freed; retry with the same key after Retry-After.")
			return answered
		}
		return conflicted
	case rec.unfinished() || m.cfg.Outcome(rec.statusCode()) == OutcomeRelease:
		// An unfinished phased operation is released whatever the policy:
		// its key keeps its recovery point, and the retry resumes.
		m.release(ctx, c, lease, rec)
		return answered
	}
	err := lease.Complete(ctx, m.responseOf(rec))
	if err != nil && rerun() {
		return conflicted // Complete rolled back; the commit itself hit the conflict
	}
	m.answerComplete(ctx, c, lease, rec, err)
	return answered
}

// reportsConflict reports whether the lease's transaction hit a
// serialization failure or deadlock.
func reportsConflict(lease Lease) bool {
	cr, ok := lease.(ConflictReporter)
	return ok && cr.Conflicted()
}

// release frees the key of a response that is not to be stored, and
// answers with that response.
func (m *Middleware) release(ctx context.Context, c *call, lease Lease, rec *recorder) {
	if err := lease.Release(ctx); err != nil {
		c.logger().ErrorContext(ctx, "idem: release failed", "err", err)
		m.unavailable(c, "The result of this request was not recorded, and the idempotency store did not confirm that its key was freed; retry with the same key after Retry-After.")
		return
	}
	m.cfg.Metrics.Request(c.r.Context(), ResultReleased)
	rec.writeTo(c.w)
}

// answerComplete answers after Complete returned err: with the handler's
// response once it is stored, or with the problem that says why it is not.
func (m *Middleware) answerComplete(ctx context.Context, c *call, lease Lease, rec *recorder, err error) {
	var completed *CompletedError
	switch {
	case err == nil:
		m.cfg.Metrics.Request(c.r.Context(), ResultExecuted)
		rec.writeTo(c.w)
	case errors.As(err, &completed) && completed.Record != nil:
		// Another request stored the key first: answer as a claim that had
		// found its row would, with the replay or 422.
		c.logger().WarnContext(ctx, "idem: another request completed the key first; the handler's writes were rolled back")
		m.answerExisting(c, completed.Record)
	case errors.Is(err, ErrLeaseLost):
		c.logger().WarnContext(ctx, "idem: lease lost; the handler's writes were rolled back")
		m.cfg.Metrics.Request(c.r.Context(), ResultLeaseLost)
		WriteProblem(c.w, ProblemKeyInFlight.Kind().New(m.cfg.ProblemTypeBase, "Another request took this key over; retry with the same key to get its result."), 1)
	case errors.Is(err, ErrOutcomeUnknown):
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
func (m *Middleware) execute(c *call, lease Lease) *recorder {
	finished := false
	defer func() {
		if finished {
			return
		}
		ctx, cancel := m.finishContext(c)
		defer cancel()
		m.cfg.Metrics.Request(ctx, ResultReleased)
		if err := lease.Release(ctx); err != nil {
			c.logger().ErrorContext(ctx, "idem: release after panic failed", "err", err)
		}
	}()
	ctx := contextWithScope(lease.Context(c.r.Context()), &c.scope)
	rec := &recorder{header: make(http.Header)}
	if m.cfg.Mode == ModeTwoPhase {
		// Phases.Run finds the lease here and reports an unfinished
		// operation back.
		rec.phases = &phaseHost{lease: lease, base: m.cfg.ProblemTypeBase}
		ctx = contextWithPhaseHost(ctx, rec.phases)
	}
	req := c.r.WithContext(ctx)
	body := new(bodyReader)
	body.Reset(c.body)
	req.Body = body
	req.ContentLength = int64(len(c.body))
	if m.cfg.Mode == ModeTwoPhase {
		rec.client = c.w // the response may stream; see StreamResponse
	}
	c.next.ServeHTTP(rec, req)
	finished = true
	return rec
}

// bodyReader is the body a handler reads: the buffered request body.
type bodyReader struct{ bytes.Reader }

// Close does nothing: the body is in memory.
func (*bodyReader) Close() error { return nil }

// responseOf is what the store keeps of a handler's response: the status,
// the headers on the replay list and the body.
func (m *Middleware) responseOf(rec *recorder) *Response {
	if rec.stream != nil && rec.stream.overflow {
		return m.notRetained(rec)
	}
	resp := &Response{StatusCode: rec.statusCode(), Header: make(http.Header, len(m.replayHeaders)), Body: rec.body.Bytes()}
	copyFields(resp.Header, rec.header, m.replayHeaders, 0)
	return resp
}

// keyDigest is a short digest of a key for logs, which never carry keys.
func keyDigest(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:6])
}

// recorder buffers a handler's response until the lease is finished, or
// streams it to client (see StreamResponse).
type recorder struct {
	header      http.Header
	status      int
	wroteHeader bool
	body        bytes.Buffer
	client      http.ResponseWriter
	stream      *streamState // set by StreamResponse
	// phases is set by the middleware in two-phase mode: what
	// [Phases.Run] reports.
	phases *phaseHost
}

// unfinished reports whether Phases.Run left the operation unfinished.
func (rec *recorder) unfinished() bool { return rec.phases != nil && rec.phases.unfinished }

func (rec *recorder) Header() http.Header { return rec.header }

func (rec *recorder) WriteHeader(status int) {
	if rec.wroteHeader || status < 200 { // informational responses are not buffered
		return
	}
	rec.status, rec.wroteHeader = status, true
	if rec.stream != nil {
		rec.streamHeader()
	}
}

func (rec *recorder) Write(p []byte) (int, error) {
	if !rec.wroteHeader {
		rec.WriteHeader(http.StatusOK)
	}
	if rec.stream != nil {
		return rec.streamWrite(p)
	}
	return rec.body.Write(p)
}

func (rec *recorder) statusCode() int {
	if !rec.wroteHeader {
		return http.StatusOK
	}
	return rec.status
}

func (rec *recorder) writeTo(w http.ResponseWriter) {
	h := w.Header()
	for name, values := range rec.header {
		h[name] = values
	}
	writeBody(w, rec.statusCode(), rec.body.Bytes())
}
