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
	UnavailableRetryAfter     = 1 // seconds, on 503 answers
)

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
	// (see ConflictReporter). Defaults to MaxConflictRetriesDefault (3).
	MaxConflictRetries int

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
	if c.LockTimeout < 0 || c.Retention < 0 || c.MaxBodyBytes < 0 || c.StoreTimeout < 0 || c.MaxConflictRetries < 0 {
		return errors.New("idem: durations and sizes in Config must not be negative")
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

// problem answers with a problem of kind k and counts its result.
func (m *Middleware) problem(w http.ResponseWriter, r *http.Request, k ProblemKind, detail string, retryAfter int) {
	m.cfg.Metrics.Request(r.Context(), resultOf(k))
	WriteProblem(w, k.New(m.cfg.ProblemTypeBase, detail), retryAfter)
}

// resultOf is the Result counted for a problem the middleware answers.
func resultOf(k ProblemKind) Result {
	switch k.Code {
	case ProblemKeyInUse.Code:
		return ResultInFlight
	case ProblemKeyReused.Code:
		return ResultMismatch
	case ProblemUnavailable.Code:
		return ResultUnavailable
	}
	return ResultRejected
}

func (m *Middleware) serve(w http.ResponseWriter, r *http.Request, next http.Handler) {
	if !applies(r.Method) {
		next.ServeHTTP(w, r)
		return
	}
	key, present, err := KeyFromHeader(r.Header)
	if err != nil {
		var ke *KeyError
		errors.As(err, &ke)
		m.problem(w, r, ProblemKeyMalformed, ke.Reason+".", 0)
		return
	}
	required := m.cfg.Require(r)
	if !present {
		if required {
			m.problem(w, r, ProblemKeyMissing, fmt.Sprintf("%s %s requires an Idempotency-Key header.", r.Method, r.URL.Path), 0)
			return
		}
		next.ServeHTTP(w, r)
		return
	}
	clientID, ok := m.cfg.ClientID(r)
	if !ok || clientID == "" {
		m.problem(w, r, ProblemUnauthenticated, "The request carries no client identity.", 0)
		return
	}
	body, ok := m.readBody(w, r)
	if !ok {
		return
	}
	fp, err := NewFingerprint(FingerprintParams{
		Method: r.Method, Path: r.URL.EscapedPath(), RawQuery: r.URL.RawQuery,
		ContentType: r.Header.Get("Content-Type"), Body: body,
		Exclude: m.cfg.ExcludeFields, Raw: !required,
	})
	if err != nil {
		var be *BodyError
		errors.As(err, &be)
		if errors.Is(err, ErrUnsupportedMediaType) {
			m.problem(w, r, ProblemMediaType, be.Reason+".", 0)
		} else {
			m.problem(w, r, ProblemBodyMalformed, be.Reason+".", 0)
		}
		return
	}

	scope := Scope{ClientID: clientID, Key: key}
	fields := fp.EncodeFields()
	for attempt := 0; ; attempt++ {
		now := m.cfg.Now()
		claimCtx, cancel := context.WithTimeout(r.Context(), m.cfg.StoreTimeout)
		started := time.Now()
		res, err := m.store.Claim(claimCtx, ClaimParams{
			Scope: scope, Method: r.Method, Path: r.URL.EscapedPath(),
			RequestHash: fp.Sum[:], RequestFields: fields,
			Mode: m.cfg.Mode, Now: now, LockTimeout: m.cfg.LockTimeout, Retention: m.cfg.Retention,
		})
		cancel()
		m.cfg.Metrics.Claim(r.Context(), time.Since(started), err)
		if err != nil {
			if r.Context().Err() != nil {
				return // the client went away; nothing was claimed
			}
			m.cfg.Logger.ErrorContext(r.Context(), "idem: claim failed", "client_id", clientID, "key_digest", keyDigest(key), "err", err)
			m.problem(w, r, ProblemUnavailable, "The idempotency store did not answer; the request was not processed.", UnavailableRetryAfter)
			return
		}
		if res.Record != nil {
			m.answerExisting(w, r, res.Record, fp, now)
			return
		}
		if info := res.Lease.Info(); info.TakenOver {
			m.cfg.Metrics.Request(r.Context(), ResultTakenOver)
			m.cfg.Logger.InfoContext(r.Context(), "idem: took over an expired lease", "client_id", clientID, "key_digest", keyDigest(key), "token", info.Token)
		}
		rerun := m.cfg.Mode == ModeAtomic && attempt < m.cfg.MaxConflictRetries
		if !m.run(w, r, next, res.Lease, scope, body, rerun) {
			return
		}
		m.cfg.Metrics.Request(r.Context(), ResultRerun)
		m.cfg.Logger.InfoContext(r.Context(), "idem: transaction conflict; running the request again", "client_id", clientID, "key_digest", keyDigest(key), "attempt", attempt+1)
		// Give the transaction that won a moment to commit, with jitter so
		// that reruns of one conflict do not collide again.
		pause := time.NewTimer(time.Duration(attempt+1)*10*time.Millisecond + rand.N(10*time.Millisecond))
		select {
		case <-pause.C:
		case <-r.Context().Done():
			pause.Stop()
			return
		}
	}
}

func (m *Middleware) readBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	max := m.cfg.MaxBodyBytes
	tooLarge := fmt.Sprintf("The body is larger than the limit of %d bytes.", max)
	if r.ContentLength > max {
		m.problem(w, r, ProblemBodyTooLarge, tooLarge, 0)
		return nil, false
	}
	if r.Body == nil || r.Body == http.NoBody {
		return nil, true
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, max))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			m.problem(w, r, ProblemBodyTooLarge, tooLarge, 0)
		} else {
			m.problem(w, r, ProblemBodyMalformed, "The request body could not be read.", 0)
		}
		return nil, false
	}
	return body, true
}

// answerExisting answers a request whose key is already held or completed.
func (m *Middleware) answerExisting(w http.ResponseWriter, r *http.Request, rec *Record, fp Fingerprint, now time.Time) {
	if len(rec.RequestHash) > 0 && !bytes.Equal(rec.RequestHash, fp.Sum[:]) {
		p := ProblemKeyReused.New(m.cfg.ProblemTypeBase, "")
		if rec.Method != r.Method || rec.Path != r.URL.EscapedPath() {
			p.OriginalRequest = rec.Method + " " + rec.Path
			p.Detail = fmt.Sprintf("This key was first used for %s %s.", rec.Method, rec.Path)
		} else if p.Fields = DiffFields(rec.RequestFields, fp); len(p.Fields) > 0 {
			p.Detail = fmt.Sprintf("This key was first used with a different request: %s %s.", strings.Join(p.Fields, ", "), plural(len(p.Fields), "differs", "differ"))
		} else {
			p.Detail = "This key was first used with a different request: the query string or body differs."
		}
		m.cfg.Metrics.Request(r.Context(), ResultMismatch)
		WriteProblem(w, p, 0)
		return
	}
	if rec.Status == StatusCompleted && rec.Response != nil {
		m.cfg.Metrics.Request(r.Context(), ResultReplayed)
		m.replay(w, rec.Response)
		return
	}
	retry := 1
	if m.cfg.Mode == ModeTwoPhase && !rec.LockedAt.IsZero() {
		left := rec.LockedAt.Add(m.cfg.LockTimeout).Sub(now)
		retry = max(1, int((left+time.Second-1)/time.Second))
	}
	m.problem(w, r, ProblemKeyInUse, "The first request with this key is still being processed; retry with the same key after Retry-After.", retry)
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

func (m *Middleware) replay(w http.ResponseWriter, resp *Response) {
	h := w.Header()
	for name, values := range resp.Header {
		h[name] = slices.Clone(values)
	}
	h.Set(HeaderReplayed, "true")
	writeBody(w, resp.StatusCode, resp.Body)
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

// run runs the handler under the lease and stores or releases its response.
// It returns true, having written nothing, when rerun is allowed and the
// lease's transaction hit a conflict that a rerun may fix.
func (m *Middleware) run(w http.ResponseWriter, r *http.Request, next http.Handler, lease Lease, scope Scope, body []byte, rerun bool) bool {
	// Finishing the lease must not depend on the client staying connected:
	// a handler that finished its work commits it, and the client's retry
	// gets the replay.
	finishCtx := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(context.WithoutCancel(r.Context()), m.cfg.StoreTimeout)
	}
	finished := false
	defer func() {
		if finished {
			return
		}
		// The handler panicked: roll back its writes and free the key, then
		// let the panic go on to the server.
		ctx, cancel := finishCtx()
		defer cancel()
		m.cfg.Metrics.Request(ctx, ResultReleased)
		if err := lease.Release(ctx); err != nil {
			m.cfg.Logger.ErrorContext(ctx, "idem: release after panic failed", "client_id", scope.ClientID, "key_digest", keyDigest(scope.Key), "err", err)
		}
	}()

	req := r.WithContext(ContextWithScope(lease.Context(r.Context()), scope))
	req.Body = io.NopCloser(bytes.NewReader(body))
	req.ContentLength = int64(len(body))
	rec := &recorder{header: make(http.Header)}
	next.ServeHTTP(rec, req)
	finished = true

	status := rec.statusCode()
	ctx, cancel := finishCtx()
	defer cancel()
	conflicted := func() bool {
		cr, ok := lease.(ConflictReporter)
		return rerun && ok && cr.Conflicted()
	}
	if conflicted() || m.cfg.Outcome(status) == OutcomeRelease {
		if err := lease.Release(ctx); err != nil {
			m.cfg.Logger.ErrorContext(ctx, "idem: release failed", "client_id", scope.ClientID, "key_digest", keyDigest(scope.Key), "err", err)
		}
		if conflicted() {
			return true
		}
		m.cfg.Metrics.Request(r.Context(), ResultReleased)
		rec.writeTo(w)
		return false
	}
	resp := &Response{StatusCode: status, Header: make(http.Header), Body: rec.body.Bytes()}
	for _, name := range m.replayHeaders {
		if v := rec.header.Values(name); len(v) > 0 {
			resp.Header[name] = slices.Clone(v)
		}
	}
	switch err := lease.Complete(ctx, resp); {
	case err == nil:
		m.cfg.Metrics.Request(r.Context(), ResultExecuted)
		rec.writeTo(w)
	case conflicted():
		return true // Complete rolled back; the commit itself hit the conflict
	case errors.Is(err, ErrLeaseLost):
		m.cfg.Logger.WarnContext(ctx, "idem: lease lost; the handler's writes were rolled back", "client_id", scope.ClientID, "key_digest", keyDigest(scope.Key))
		m.cfg.Metrics.Request(r.Context(), ResultLeaseLost)
		WriteProblem(w, ProblemKeyInUse.New(m.cfg.ProblemTypeBase, "Another request took this key over; retry with the same key to get its result."), 1)
	default:
		m.cfg.Logger.ErrorContext(ctx, "idem: storing the response failed; the handler's writes were rolled back", "client_id", scope.ClientID, "key_digest", keyDigest(scope.Key), "err", err)
		if m.cfg.Mode == ModeTwoPhase {
			// Free the committed claim now, so the client's retry need not
			// wait for the lease to run out.
			if err := lease.Release(ctx); err != nil {
				m.cfg.Logger.ErrorContext(ctx, "idem: release after a failed complete failed; the key is freed when its lease expires", "client_id", scope.ClientID, "key_digest", keyDigest(scope.Key), "err", err)
			}
		}
		m.problem(w, r, ProblemUnavailable, "The result could not be recorded, so it was rolled back; retry with the same key.", UnavailableRetryAfter)
	}
	return false
}

// keyDigest is a short digest of a key for logs, which never carry keys.
func keyDigest(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:6])
}

// recorder buffers a handler's response until the lease is finished.
type recorder struct {
	header      http.Header
	status      int
	wroteHeader bool
	body        bytes.Buffer
}

func (rec *recorder) Header() http.Header { return rec.header }

func (rec *recorder) WriteHeader(status int) {
	if rec.wroteHeader || status < 200 { // informational responses are not buffered
		return
	}
	rec.status, rec.wroteHeader = status, true
}

func (rec *recorder) Write(p []byte) (int, error) {
	if !rec.wroteHeader {
		rec.WriteHeader(http.StatusOK)
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
