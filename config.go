package idem

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/internal/replay"
)

// Defaults of [Config].
const (
	LockTimeoutDefault        = 30 * time.Second
	RetentionDefault          = 24 * time.Hour
	MaxBodyBytesDefault       = 1 << 20
	StoreTimeoutDefault       = 10 * time.Second
	MaxConflictRetriesDefault = 3
	ReadyTimeoutDefault       = 2 * time.Second

	// PurgeIntervalDefault is the default of [PurgeOpts.Interval].
	PurgeIntervalDefault = time.Minute
	// PurgePauseDefault is the default of [PurgeOpts.Pause].
	PurgePauseDefault = 10 * time.Millisecond
	// PurgeShareDefault is the default of [PurgeOpts.Share] on a store
	// that names none of its own: the purge's batches take at most a
	// fifth of its time.
	PurgeShareDefault = idemstore.PurgeShareDefault
	// PurgeBatchTimeoutDefault is the default of [PurgeOpts.BatchTimeout].
	PurgeBatchTimeoutDefault = 30 * time.Second

	// ResumeIntervalDefault is the default of [ResumeOpts.Interval].
	ResumeIntervalDefault = 10 * time.Second
	// ResumeBatchSizeDefault is the default of [ResumeOpts.BatchSize].
	ResumeBatchSizeDefault = 100
	// ResumeMaxAttemptsDefault is the default of [ResumeOpts.MaxAttempts].
	ResumeMaxAttemptsDefault = 10
)

// NoConflictRetries, as [Config.MaxConflictRetries], turns reruns off: a
// request whose transaction hits a serialization failure or deadlock runs
// once, and when its response then cannot be stored, the client gets 503
// and may retry with the same key.
const NoConflictRetries = -1

// Config is the one configuration of a service's idempotency. The
// middleware ([New]), the [Purger], the [Resumer], the key-status handler
// ([NewStatusHandler]) and the readiness handler ([NewReadyHandler]) are
// all built from it, so that what they must agree on (retention, the lock
// timeout, the store timeout, the clock, the replay headers, the outcome
// policy, the problem type base) is declared once: build one Config and
// pass it to each. A purger whose retention is shorter than the
// middleware's would delete keys that clients may still retry with.
//
// A nil *Config is the zero Config, which uses every default; New alone
// requires ClientID.
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

	// Tracer receives the claim, the handler's run, the completion, each
	// replay, 409 and 422, the Resumer's runs and the Purger's passes as
	// spans, and the trace context stored with each key (see [Tracer]).
	// The idemotel package implements it with OpenTelemetry. Defaults to
	// none: nothing is traced, and keys are stored without a trace context.
	Tracer Tracer

	// ExposeOriginalTrace adds, to a replay and to a 409, the
	// HeaderOriginalTrace field: the trace id of the request that ran the
	// key (or holds it), for an operator to paste into a tracing backend.
	// It reveals nothing but that id, yet a public API may not want to
	// show its trace ids. It needs a Tracer, which stores the trace
	// context with each key. Defaults to false.
	ExposeOriginalTrace bool

	// Now is the clock. Defaults to time.Now.
	Now func() time.Time

	// Purge configures the [Purger]. Its retention and lock timeout are
	// the ones above.
	Purge PurgeOpts

	// Resume configures the [Resumer].
	Resume ResumeOpts

	// ReadyTimeout is how long the store has to answer the readiness
	// handler. Defaults to ReadyTimeoutDefault (2 s).
	ReadyTimeout time.Duration
}

// PurgeOpts are the settings of the [Purger] alone.
type PurgeOpts struct {
	// Interval is the time from the end of one run to the start of the
	// next, and how often an instance that does not hold the purge lock
	// tries to take it. Defaults to PurgeIntervalDefault (1 min).
	Interval time.Duration

	// BatchSize is the number of keys each batch deletes. Defaults to
	// the store's: its PurgeBatchSize when it is an
	// idemstore.PurgePacer (idemsqlite: 100), else
	// idemstore.PurgeBatchSizeDefault (5000).
	BatchSize int

	// Share is the most of the run's time that its batches take: after a
	// batch that took d, the run pauses d × (1 − Share) / Share
	// (idemstore.PurgePause) before the next, so that requests get the
	// database for the rest, however long a batch takes on a large table
	// or a busy machine. From 0 to 1; 1 paces by Pause alone. Defaults to
	// the store's: its PurgeShare when it is an idemstore.PurgePacer
	// (idemsqlite: 0.1, since requests that write wait for its one
	// writer), else PurgeShareDefault (0.2).
	Share float64

	// Pause is the least mean pause between two batches of one run,
	// jittered by half either way; the run pauses the longer of it and
	// Share's pause. Defaults to PurgePauseDefault (10 ms).
	Pause time.Duration

	// BatchTimeout bounds each batch. Defaults to PurgeBatchTimeoutDefault
	// (30 s).
	BatchTimeout time.Duration
}

// ResumeOpts are the settings of the [Resumer] alone.
type ResumeOpts struct {
	// Operations are the phased operations that the resumer drives,
	// keyed by method and path as the middleware stores them, such as
	// "POST /v1/payments". Each needs its phases after
	// idemstore.RecoveryStarted only: the resumer never runs a key that no
	// phase has passed, since it has no request to run it from; it
	// releases such a key once its lease expired, however old the key
	// (within Retention), so that the client's retry runs it fresh. Keys
	// of other operations are left alone. Required by [NewResumer].
	Operations map[string]Phases

	// Interval is the pause between passes of Run. Defaults to
	// ResumeIntervalDefault (10 s).
	Interval time.Duration

	// BatchSize is the most keys each of a pass's two listings returns
	// (recent keys, and a span of older ones). Defaults to
	// ResumeBatchSizeDefault (100).
	BatchSize int

	// MaxAttempts is the most times the resumer runs a key's phases
	// without finishing it. Then it gives up on the key: it logs "idem:
	// resumer gave up on a key" at Error once, leaves the key started at
	// its recovery point for an operator (docs/operations.md, "Keys the
	// resumer gave up on"), and counts it in ResumeResult.GaveUp on every
	// pass. The count is the resumer's, kept in memory: a new process
	// tries each key MaxAttempts times again. -1 never gives up. Defaults
	// to ResumeMaxAttemptsDefault (10).
	MaxAttempts int
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
	if out.ReadyTimeout == 0 {
		out.ReadyTimeout = ReadyTimeoutDefault
	}
	if out.Purge.Interval == 0 {
		out.Purge.Interval = PurgeIntervalDefault
	}
	if out.Purge.Pause == 0 {
		out.Purge.Pause = PurgePauseDefault
	}
	if out.Purge.BatchTimeout == 0 {
		out.Purge.BatchTimeout = PurgeBatchTimeoutDefault
	}
	if out.Resume.Interval == 0 {
		out.Resume.Interval = ResumeIntervalDefault
	}
	if out.Resume.BatchSize == 0 {
		out.Resume.BatchSize = ResumeBatchSizeDefault
	}
	if out.Resume.MaxAttempts == 0 {
		out.Resume.MaxAttempts = ResumeMaxAttemptsDefault
	}
	return &out
}

// validate checks what every component built from c relies on.
func (c *Config) validate() error {
	if c.Mode != ModeAtomic && c.Mode != ModeTwoPhase {
		return fmt.Errorf("idem: unknown Config.Mode %d", c.Mode)
	}
	if c.LockTimeout < 0 || c.Retention < 0 || c.MaxBodyBytes < 0 || c.StoreTimeout < 0 || c.MaxPreferWait < 0 || c.ReadyTimeout < 0 ||
		c.Purge.Interval < 0 || c.Purge.BatchSize < 0 || c.Purge.Pause < 0 || c.Purge.BatchTimeout < 0 ||
		c.Resume.Interval < 0 || c.Resume.BatchSize < 0 {
		return errors.New("idem: durations and sizes in Config must not be negative")
	}
	if !idemstore.ValidPurgeShare(c.Purge.Share) {
		return fmt.Errorf("idem: Config.Purge.Share %v must be from 0 to 1", c.Purge.Share)
	}
	if c.MaxConflictRetries < NoConflictRetries {
		return fmt.Errorf("idem: Config.MaxConflictRetries %d is invalid; use NoConflictRetries to turn reruns off", c.MaxConflictRetries)
	}
	if c.Resume.MaxAttempts < -1 {
		return errors.New("idem: Config.Resume.MaxAttempts must be -1 (never give up) or more")
	}
	if c.Retention <= c.LockTimeout {
		return fmt.Errorf("idem: Config.Retention (%s) must be longer than Config.LockTimeout (%s), or the purge could delete keys in flight", c.Retention, c.LockTimeout)
	}
	for _, ptr := range c.ExcludeFields {
		if !strings.HasPrefix(ptr, "/") || strings.Count(ptr, "/") != 1 || len(ptr) < 2 {
			return fmt.Errorf("idem: Config.ExcludeFields entry %q must be a top-level JSON pointer such as \"/timestamp\"", ptr)
		}
	}
	return replay.Check("Config.ReplayHeaders", c.ReplayHeaders)
}

// build returns cfg with its defaults, or the reason it is invalid.
func build(cfg *Config) (*Config, error) {
	c := cfg.withDefaults()
	if err := c.validate(); err != nil {
		return nil, err
	}
	return c, nil
}
