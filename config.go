package idem

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
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
	return checkReplayHeaders("Config.ReplayHeaders", c.ReplayHeaders)
}
