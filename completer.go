package idem

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/idemkit/idem/idemstore"
)

// Defaults of [CompleterConfig].
const (
	CompleterIntervalDefault    = 10 * time.Second
	CompleterBatchSizeDefault   = 100
	CompleterMaxAttemptsDefault = 10
)

// CompleterLockName is the name of the lock that a [Completer] takes
// through [Leader] for each pass, so that one instance at a time runs it.
const CompleterLockName = "idem-completer"

// CompleterConfig configures a [Completer].
type CompleterConfig struct {
	// Operations are the phased operations that the completer drives,
	// keyed by method and path as the middleware stores them, such as
	// "POST /v1/payments". Each needs its phases after RecoveryStarted
	// only: the completer never runs a key that no phase has passed, since
	// it has no request to run it from; it releases such a key once its
	// lease expired, however old the key (within Retention), so that the
	// client's retry runs it fresh. Keys of other operations are left
	// alone. Required.
	Operations map[string]Phases

	// Interval is the pause between passes of Run. Defaults to
	// CompleterIntervalDefault (10 s).
	Interval time.Duration

	// BatchSize is the most keys each of a pass's two listings returns
	// (recent keys, and a span of older ones). Defaults to
	// CompleterBatchSizeDefault (100).
	BatchSize int

	// MaxAttempts is the most times the completer runs a key's phases
	// without finishing it. Then it gives up on the key: it logs "idem:
	// completer gave up on a key" at Error once, leaves the key started
	// at its recovery point for an operator (docs/operations.md, "Keys the
	// completer gave up on"), and counts it in CompleterResult.GaveUp on
	// every pass. The count is the completer's, kept in memory: a new
	// process tries each key MaxAttempts times again. -1 never gives up.
	// Defaults to CompleterMaxAttemptsDefault (10).
	MaxAttempts int

	// LockTimeout and Retention must be the middleware's ([Config]): a key
	// whose lease is younger than LockTimeout has a holder, and a key
	// older than Retention is left to the purge. They default to
	// LockTimeoutDefault (30 s) and RetentionDefault (24 h).
	LockTimeout time.Duration
	Retention   time.Duration

	// Outcome decides whether a final response is stored, as the
	// middleware's [Config.Outcome]; a response it releases leaves the key
	// at its recovery point, counted as failed. Defaults to
	// DefaultOutcomePolicy.
	Outcome OutcomePolicy

	// ReplayHeaders are the response headers stored besides Content-Type,
	// Content-Language and Location, as the middleware's
	// [Config.ReplayHeaders]. Defaults to none.
	ReplayHeaders []string

	// StoreTimeout bounds each store call and each key's run. Defaults to
	// StoreTimeoutDefault (10 s).
	StoreTimeout time.Duration

	// Logger receives a line per pass that did something and per key that
	// failed. Defaults to slog.Default().
	Logger *slog.Logger

	// Metrics receives the result of every pass. Defaults to none.
	Metrics CompleterMetrics

	// Now is the clock, the middleware's. Defaults to time.Now.
	Now func() time.Time
}

// CompleterMetrics receives what a [Completer] does. The idemprom package
// implements it.
type CompleterMetrics interface {
	// CompleterPass reports one pass of the completer.
	CompleterPass(ctx context.Context, r CompleterResult)
}

// Leader is implemented by stores that several instances share (idempg):
// TryLead takes the database-wide lock name without waiting. held is
// false when another instance holds it; otherwise unlock frees it.
type Leader interface {
	TryLead(ctx context.Context, name string) (unlock func(), held bool, err error)
}

// CompleterResult is what one pass of a [Completer] did.
type CompleterResult struct {
	// Led is false when another instance held the completer's lock, and the
	// pass did nothing.
	Led bool
	// Completed keys reached their final recovery point and stored their
	// response; Released keys had passed no recovery point and were freed,
	// for the client's retry to run fresh; Failed keys stay at their
	// recovery point for the next pass or their client; Skipped keys had a
	// holder by the time they were claimed, or belong to no operation in
	// CompleterConfig.Operations.
	Completed, Released, Failed, Skipped int
	// GaveUp is the number of listed keys that the completer gave up on,
	// after CompleterConfig.MaxAttempts runs that did not finish them, and
	// leaves to an operator: alert on it above 0.
	GaveUp int
	// Oldest is the age, at the pass's Now, of the oldest unfinished key
	// that the pass left unfinished; 0 for none.
	Oldest time.Duration
}

// Completer finishes phased operations ([Phases]) whose client went away:
// it finds started keys that passed a recovery point and whose lease
// expired (or whose holder released them, unfinished), claims each like
// any request, taking it over with the next fencing token, and runs its
// phases from the recovery point to the end, storing the response. A
// client that comes back with the key gets that response; a client retry
// and the completer never both run a phase, because each holds the key
// through a fenced lease.
//
// A key of one of its operations whose lease expired before any phase
// committed holds no durable effect: each phase's writes commit with the
// recovery point after it, and a call to another system carries a key
// derived from the client's. The completer cannot run it (the request is
// not stored), so it takes it over and releases it, which deletes it: the
// client's retry runs the operation fresh, as a takeover would, and until
// then the key reads as unknown instead of in progress forever. The dead
// holder stays fenced out should it ever wake, also after the retry made
// the key anew at token 1: leases are fenced by their row's created_at
// as well as their token.
//
// A key whose phases fail every time (a downstream that keeps failing) is
// run at most CompleterConfig.MaxAttempts times by a completer, which then
// gives up on it, says so at Error, and counts it in CompleterResult.GaveUp
// for an alert: it stays started at its recovery point for an operator.
//
// On a store that implements [Leader] (idempg), each pass holds the
// database-wide lock [CompleterLockName]: with several instances, at most
// one runs a pass at a time, and the others skip theirs.
//
// Keys that passed no recovery point are found in two listings a pass, each
// a bounded range of the key table's index on creation time, never every
// key within retention: the recent keys, created within three intervals (a
// minute at least) before the lock timeout, which a live service's
// abandoned keys are; and a sweep, which walks from the oldest key within
// Retention to the recent ones, a span of creation times per pass (a 360th
// of Retention, or the recent range if longer), so that a key left behind
// by an outage, or taken over long after it was created, is released too,
// within about 360 passes (an hour at the default interval and retention).
type Completer struct {
	store   idemstore.RecoveryStore
	cfg     *CompleterConfig
	replay  replayList
	started []string      // the operations' names, for UnfinishedParams.Started
	span    time.Duration // the creation times one pass of the sweep reads

	mu       sync.Mutex
	sweep    time.Time          // the sweep's next span starts after it; zero: at Retention's start
	attempts map[attemptKey]int // runs of each key's phases that did not finish it
}

// NewCompleter returns a completer for store, which must be the
// middleware's.
func NewCompleter(store idemstore.RecoveryStore, cfg *CompleterConfig) (*Completer, error) {
	if store == nil {
		return nil, errors.New("idem: a RecoveryStore is required")
	}
	c := cfg.withDefaults()
	if err := c.validate(); err != nil {
		return nil, err
	}
	replay := newReplayList(c.ReplayHeaders)
	started := slices.Sorted(maps.Keys(c.Operations))
	span := max(startedWindow(c.Interval), c.Retention/sweepPasses)
	return &Completer{store: store, cfg: c, replay: replay, started: started, span: span, attempts: map[attemptKey]int{}}, nil
}

func (c *CompleterConfig) withDefaults() *CompleterConfig {
	out := CompleterConfig{}
	if c != nil {
		out = *c
	}
	if out.Interval == 0 {
		out.Interval = CompleterIntervalDefault
	}
	if out.BatchSize == 0 {
		out.BatchSize = CompleterBatchSizeDefault
	}
	if out.MaxAttempts == 0 {
		out.MaxAttempts = CompleterMaxAttemptsDefault
	}
	if out.LockTimeout == 0 {
		out.LockTimeout = LockTimeoutDefault
	}
	if out.Retention == 0 {
		out.Retention = RetentionDefault
	}
	if out.Outcome == nil {
		out.Outcome = DefaultOutcomePolicy
	}
	if out.StoreTimeout == 0 {
		out.StoreTimeout = StoreTimeoutDefault
	}
	if out.Logger == nil {
		out.Logger = slog.Default()
	}
	if out.Now == nil {
		out.Now = time.Now
	}
	return &out
}

func (c *CompleterConfig) validate() error {
	if len(c.Operations) == 0 {
		return errors.New("idem: CompleterConfig.Operations is required")
	}
	if c.Interval < 0 || c.BatchSize < 0 || c.LockTimeout < 0 || c.Retention < 0 || c.StoreTimeout < 0 {
		return errors.New("idem: durations and sizes in CompleterConfig must not be negative")
	}
	if c.MaxAttempts < -1 {
		return errors.New("idem: CompleterConfig.MaxAttempts must be -1 (never give up) or more")
	}
	if err := checkReplayHeaders("CompleterConfig.ReplayHeaders", c.ReplayHeaders); err != nil {
		return err
	}
	return nil
}

// Run runs a pass at once and then every Interval until ctx is done, and
// returns nil then. A pass that fails is logged, and the next one tries
// again.
func (c *Completer) Run(ctx context.Context) error {
	tick := time.NewTicker(c.cfg.Interval)
	defer tick.Stop()
	for {
		if _, err := c.RunOnce(ctx); err != nil && ctx.Err() == nil {
			c.cfg.Logger.ErrorContext(ctx, "idem: completer pass failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// RunOnce runs one pass: it lists up to BatchSize unfinished keys, oldest
// first, and drives each to its end. A key that fails is counted, not
// returned: the error is the listing's or the lock's.
func (c *Completer) RunOnce(ctx context.Context) (CompleterResult, error) {
	var res CompleterResult
	if leader, ok := c.store.(Leader); ok {
		unlock, held, err := leader.TryLead(ctx, CompleterLockName)
		if err != nil {
			return res, fmt.Errorf("idem: completer: take the lock: %w", err)
		}
		if !held {
			c.report(ctx, res)
			return res, nil
		}
		defer unlock()
	}
	res.Led = true
	now := c.cfg.Now()
	lctx, cancel := context.WithTimeout(ctx, c.cfg.StoreTimeout)
	recent := now.Add(-c.cfg.LockTimeout - startedWindow(c.cfg.Interval))
	// Keys given up on stay listed: a listing holds BatchSize others.
	limit := c.cfg.BatchSize + c.gaveUp(now)
	keys, err := c.store.Unfinished(lctx, idemstore.UnfinishedParams{
		Now: now, LockTimeout: c.cfg.LockTimeout, Retention: c.cfg.Retention, Limit: limit,
		Started: c.started, StartedAfter: recent,
	})
	cancel()
	if err != nil {
		return res, fmt.Errorf("idem: completer: list unfinished keys: %w", err)
	}
	older, err := c.listSweep(ctx, now, recent, limit)
	if err != nil {
		return res, fmt.Errorf("idem: completer: list unfinished keys: %w", err)
	}
	keys = appendNew(keys, older)
	for _, rec := range keys {
		if ctx.Err() != nil {
			break
		}
		switch c.complete(ctx, rec, now) {
		case keyCompleted:
			res.Completed++
			continue
		case keyReleased:
			res.Released++
			continue
		case keyFailed:
			res.Failed++
		case keySkipped:
			res.Skipped++
		case keyGaveUp:
			res.GaveUp++
		}
		res.Oldest = max(res.Oldest, now.Sub(rec.CreatedAt))
	}
	c.report(ctx, res)
	if res.Completed > 0 || res.Released > 0 || res.Failed > 0 {
		c.cfg.Logger.InfoContext(ctx, "idem: completer pass", "completed", res.Completed, "released", res.Released,
			"failed", res.Failed, "skipped", res.Skipped, "gave_up", res.GaveUp, "oldest_unfinished", res.Oldest)
	}
	return res, nil
}

// report hands the result of a pass to the metrics.
func (c *Completer) report(ctx context.Context, res CompleterResult) {
	if c.cfg.Metrics != nil {
		c.cfg.Metrics.CompleterPass(ctx, res)
	}
}

// keyResult is how the completer's work on one key ended.
type keyResult int

const (
	keyCompleted keyResult = iota
	keyReleased
	keyFailed
	keySkipped
	keyGaveUp
)

// complete claims one unfinished key and runs its operation from its
// recovery point.
func (c *Completer) complete(ctx context.Context, rec *idemstore.Record, now time.Time) keyResult {
	ops := c.cfg.Operations[rec.Method+" "+rec.Path]
	if ops == nil {
		return keySkipped
	}
	if c.givenUp(rec) {
		return keyGaveUp
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.StoreTimeout)
	defer cancel()
	log := c.cfg.Logger.With("client_id", rec.Scope.ClientID, "key_digest", keyDigest(rec.Scope.Key))
	claimed, err := c.store.Claim(ctx, idemstore.ClaimParams{
		Scope: rec.Scope, Method: rec.Method, Path: rec.Path,
		RequestHash: rec.RequestHash, RequestFields: rec.RequestFields,
		TwoPhase: true, Now: now, LockTimeout: c.cfg.LockTimeout, Retention: c.cfg.Retention,
	})
	switch {
	case err != nil:
		log.WarnContext(ctx, "idem: completer: claim failed", "err", err)
		return keyFailed
	case claimed.Lease == nil:
		return keySkipped // a client retry holds it, or it finished
	}
	lease := claimed.Lease
	finish := context.WithoutCancel(ctx)
	host := &phaseHost{lease: lease, base: ProblemTypeBaseDefault}
	kctx := contextWithPhaseHost(ContextWithScope(lease.Context(ctx), rec.Scope), host)
	if rl, ok := lease.(idemstore.RecoveryLease); ok {
		if at, err := rl.Recovery(kctx); err == nil && at.Point == idemstore.RecoveryStarted {
			// Nothing committed: release the key, which deletes it. A key
			// that went between the listing and the claim, for which the
			// claim made a new one, is no takeover.
			if err := lease.Release(finish); err != nil {
				log.WarnContext(ctx, "idem: completer: release failed; the key is free when its lease expires", "err", err)
				return keyFailed
			}
			if !lease.Info().TakenOver {
				return keySkipped
			}
			log.InfoContext(ctx, "idem: completer released a key that passed no recovery point", "token", lease.Info().Token)
			return keyReleased
		}
	}
	out := &recorder{header: make(http.Header)}
	if err := runPhases(kctx, ops, out); err != nil {
		log.WarnContext(ctx, "idem: completer: the operation is still unfinished", "err", err)
		c.release(finish, log, lease)
		return c.failed(ctx, log, rec)
	}
	if c.cfg.Outcome(out.statusCode()) == OutcomeRelease {
		log.WarnContext(ctx, "idem: completer: the final response is not to be stored; the key stays unfinished", "status", out.statusCode())
		c.release(finish, log, lease)
		return c.failed(ctx, log, rec)
	}
	if err := lease.Complete(finish, c.replay.response(out)); err != nil {
		log.WarnContext(ctx, "idem: completer: storing the response failed", "err", err)
		if !errors.Is(err, idemstore.ErrLeaseLost) {
			c.release(finish, log, lease)
		}
		return keyFailed
	}
	c.finished(rec)
	log.InfoContext(ctx, "idem: completer finished a key", "token", lease.Info().Token, "status", out.statusCode())
	return keyCompleted
}

// failed counts a run of rec's phases that left it unfinished, and says so
// at Error when the completer gives up on it.
func (c *Completer) failed(ctx context.Context, log *slog.Logger, rec *idemstore.Record) keyResult {
	if tries, last := c.attempt(rec); last {
		log.ErrorContext(ctx, "idem: completer gave up on a key; it stays unfinished at its recovery point until an operator resolves it",
			"attempts", tries, "method", rec.Method, "path", rec.Path, "created_at", rec.CreatedAt)
	}
	return keyFailed
}

// runPhases runs ops, and turns a panic in a phase into an error: the
// completer runs in the background, where a panic would end the process.
func runPhases(ctx context.Context, ops Phases, w http.ResponseWriter) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("idem: completer: a phase panicked: %v", v)
		}
	}()
	return ops.Run(ctx, w)
}

// release frees the key, which keeps its recovery point.
func (c *Completer) release(ctx context.Context, log *slog.Logger, lease idemstore.Lease) {
	if err := lease.Release(ctx); err != nil {
		log.WarnContext(ctx, "idem: completer: release failed; the key is free when its lease expires", "err", err)
	}
}
