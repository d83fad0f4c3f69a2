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
	"github.com/idemkit/idem/internal/keyspec"
)

// resumerLockName is the name of the lock that a [Resumer] takes
// through [idemstore.Leader] for each pass, so that one instance at a time runs it.
const resumerLockName = "idem-resumer"

// ResumerMetrics is implemented by a [Metrics] that also reports what a
// [Resumer] does. The idemprom package
// implements it.
type ResumerMetrics interface {
	// ResumerPass reports one pass of the resumer.
	ResumerPass(ctx context.Context, r ResumerResult)
}

// ResumerResult is what one pass of a [Resumer] did.
type ResumerResult struct {
	// Led is false when another instance held the resumer's lock, and the
	// pass did nothing.
	Led bool
	// Completed keys reached their final recovery point and stored their
	// response; Released keys had passed no recovery point and were freed,
	// for the client's retry to run fresh; Failed keys stay at their
	// recovery point for the next pass or their client; Skipped keys had a
	// holder by the time they were claimed, or belong to no operation in
	// ResumerConfig.Operations.
	Completed, Released, Failed, Skipped int
	// GaveUp is the number of listed keys that the resumer gave up on,
	// after ResumerConfig.MaxAttempts runs that did not finish them, and
	// leaves to an operator: alert on it above 0.
	GaveUp int
	// Oldest is the age, at the pass's Now, of the oldest unfinished key
	// that the pass left unfinished; 0 for none.
	Oldest time.Duration
}

// Resumer finishes phased operations ([Phases]) whose client went away:
// it finds started keys that passed a recovery point and whose lease
// expired (or whose holder released them, unfinished), claims each like
// any request, taking it over with the next fencing token, and runs its
// phases from the recovery point to the end, storing the response. A
// client that comes back with the key gets that response; a client retry
// and the resumer never both run a phase, because each holds the key
// through a fenced lease.
//
// A key of one of its operations whose lease expired before any phase
// committed holds no durable effect: each phase's writes commit with the
// recovery point after it, and a call to another system carries a key
// derived from the client's. The resumer cannot run it (the request is
// not stored), so it takes it over and releases it, which deletes it: the
// client's retry runs the operation fresh, as a takeover would, and until
// then the key reads as unknown instead of in progress forever. The dead
// holder stays fenced out should it ever wake, also after the retry made
// the key anew at token 1: leases are fenced by their row's created_at
// as well as their token.
//
// A key whose phases fail every time (a downstream that keeps failing) is
// run at most ResumerConfig.MaxAttempts times by a resumer, which then
// gives up on it, says so at Error, and counts it in ResumerResult.GaveUp
// for an alert: it stays started at its recovery point for an operator.
//
// On a store that implements [idemstore.Leader] (idempg), each pass holds the
// database-wide lock "idem-resumer": with several instances, at most
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
type Resumer struct {
	store   idemstore.RecoveryStore
	cfg     *Config
	replay  replayList
	started []string      // the operations' names, for UnfinishedParams.Started
	span    time.Duration // the creation times one pass of the sweep reads
	tracing tracing

	mu       sync.Mutex
	sweep    time.Time          // the sweep's next span starts after it; zero: at Retention's start
	attempts map[attemptKey]int // runs of each key's phases that did not finish it
}

// NewResumer returns a resumer for store, which must be the
// middleware's.
func NewResumer(store idemstore.RecoveryStore, cfg *Config) (*Resumer, error) {
	if store == nil {
		return nil, errors.New("idem: a RecoveryStore is required")
	}
	c, err := build(cfg)
	if err != nil {
		return nil, err
	}
	if len(c.Resume.Operations) == 0 {
		return nil, errors.New("idem: Config.Resume.Operations is required")
	}
	replay := newReplayList(c.ReplayHeaders)
	started := slices.Sorted(maps.Keys(c.Resume.Operations))
	span := max(startedWindow(c.Resume.Interval), c.Retention/sweepPasses)
	return &Resumer{store: store, cfg: c, replay: replay, started: started, span: span, attempts: map[attemptKey]int{}, tracing: tracing{c.Tracer}}, nil
}

// Run runs a pass at once and then every Interval until ctx is done, and
// returns nil then. A pass that fails is logged, and the next one tries
// again.
func (c *Resumer) Run(ctx context.Context) error {
	tick := time.NewTicker(c.cfg.Resume.Interval)
	defer tick.Stop()
	for {
		if _, err := c.RunOnce(ctx); err != nil && ctx.Err() == nil {
			c.cfg.Logger.ErrorContext(ctx, "idem: resumer pass failed", "err", err)
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
func (c *Resumer) RunOnce(ctx context.Context) (ResumerResult, error) {
	var res ResumerResult
	if leader, ok := c.store.(idemstore.Leader); ok {
		unlock, held, err := leader.TryLead(ctx, resumerLockName)
		if err != nil {
			return res, fmt.Errorf("idem: resumer: take the lock: %w", err)
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
	recent := now.Add(-c.cfg.LockTimeout - startedWindow(c.cfg.Resume.Interval))
	// Keys given up on stay listed: a listing holds BatchSize others.
	limit := c.cfg.Resume.BatchSize + c.gaveUp(now)
	keys, err := c.store.Unfinished(lctx, idemstore.UnfinishedParams{
		Now: now, LockTimeout: c.cfg.LockTimeout, Retention: c.cfg.Retention, Limit: limit,
		Started: c.started, StartedAfter: recent,
	})
	cancel()
	if err != nil {
		return res, fmt.Errorf("idem: resumer: list unfinished keys: %w", err)
	}
	older, err := c.listSweep(ctx, now, recent, limit)
	if err != nil {
		return res, fmt.Errorf("idem: resumer: list unfinished keys: %w", err)
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
		c.cfg.Logger.InfoContext(ctx, "idem: resumer pass", "completed", res.Completed, "released", res.Released,
			"failed", res.Failed, "skipped", res.Skipped, "gave_up", res.GaveUp, "oldest_unfinished", res.Oldest)
	}
	return res, nil
}

// report hands the result of a pass to the metrics.
func (c *Resumer) report(ctx context.Context, res ResumerResult) {
	if m, ok := c.cfg.Metrics.(ResumerMetrics); ok {
		m.ResumerPass(ctx, res)
	}
}

// keyResult is how the resumer's work on one key ended.
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
func (c *Resumer) complete(ctx context.Context, rec *idemstore.Record, now time.Time) keyResult {
	ops := c.cfg.Resume.Operations[rec.Method+" "+rec.Path]
	if ops == nil {
		return keySkipped
	}
	if c.givenUp(rec) {
		return keyGaveUp
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.StoreTimeout)
	defer cancel()
	digest := keyspec.Digest(rec.Scope.Key)
	log := c.cfg.Logger.With("client_id", rec.Scope.ClientID, "key_digest", digest)
	var end SpanEnd
	ctx, span := c.tracing.start(ctx, SpanStart{
		Step: StepResume, Method: rec.Method, Path: rec.Path, Mode: ModeTwoPhase,
		KeyDigest: digest, Attempt: c.tries(rec), Link: rec.TraceContext,
	})
	defer func() { span.End(end) }()
	traceContext := c.tracing.traceContext(ctx)
	claimed, err := c.store.Claim(ctx, idemstore.ClaimParams{
		Scope: rec.Scope, Method: rec.Method, Path: rec.Path,
		RequestHash: rec.RequestHash, RequestFields: rec.RequestFields,
		TwoPhase: true, Now: now, LockTimeout: c.cfg.LockTimeout, Retention: c.cfg.Retention,
		TraceContext: traceContext,
	})
	switch {
	case err != nil:
		log.WarnContext(ctx, "idem: resumer: claim failed", "err", err)
		end.Err = err
		return keyFailed
	case claimed.Lease == nil:
		return keySkipped // a client retry holds it, or it finished
	}
	lease := claimed.Lease
	end.Token = lease.Info().Token
	// The calls that end the lease run even when the operation used up
	// ctx's deadline, each under a StoreTimeout of its own.
	finish := context.WithoutCancel(ctx)
	host := &phaseHost{lease: lease, base: ProblemTypeBaseDefault, storeTimeout: c.cfg.StoreTimeout}
	kctx := contextWithPhaseHost(ContextWithScope(lease.Context(ctx), rec.Scope), host)
	if rl, ok := lease.(idemstore.RecoveryLease); ok {
		if at, err := rl.Recovery(kctx); err == nil && at.Point == idemstore.RecoveryStarted {
			// Nothing committed: release the key, which deletes it. A key
			// that went between the listing and the claim, for which the
			// claim made a new one, is no takeover.
			if err := c.release(finish, lease); err != nil {
				log.WarnContext(ctx, "idem: resumer: release failed; the key is free when its lease expires", "err", err)
				return keyFailed
			}
			if !lease.Info().TakenOver {
				return keySkipped
			}
			log.InfoContext(ctx, "idem: resumer released a key that passed no recovery point", "token", lease.Info().Token)
			return keyReleased
		}
	}
	out := &recorder{header: make(http.Header)}
	if err := runPhases(kctx, ops, out); err != nil {
		log.WarnContext(ctx, "idem: resumer: the operation is still unfinished", "err", err)
		end.Err = err
		c.releaseLogged(finish, log, lease)
		return c.failed(ctx, log, rec)
	}
	if c.cfg.Outcome(out.statusCode()) == OutcomeRelease {
		log.WarnContext(ctx, "idem: resumer: the final response is not to be stored; the key stays unfinished", "status", out.statusCode())
		end.Status = out.statusCode()
		c.releaseLogged(finish, log, lease)
		return c.failed(ctx, log, rec)
	}
	cctx, cancelComplete := context.WithTimeout(finish, c.cfg.StoreTimeout)
	err = lease.Complete(cctx, c.replay.response(out))
	cancelComplete()
	if err != nil {
		log.WarnContext(ctx, "idem: resumer: storing the response failed", "err", err)
		end.Err = err
		if !errors.Is(err, idemstore.ErrLeaseLost) {
			c.releaseLogged(finish, log, lease)
		}
		return keyFailed
	}
	end.Status = out.statusCode()
	c.finished(rec)
	log.InfoContext(ctx, "idem: resumer finished a key", "token", lease.Info().Token, "status", out.statusCode())
	return keyCompleted
}

// failed counts a run of rec's phases that left it unfinished, and says so
// at Error when the resumer gives up on it.
func (c *Resumer) failed(ctx context.Context, log *slog.Logger, rec *idemstore.Record) keyResult {
	if tries, last := c.attempt(rec); last {
		log.ErrorContext(ctx, "idem: resumer gave up on a key; it stays unfinished at its recovery point until an operator resolves it",
			"attempts", tries, "method", rec.Method, "path", rec.Path, "created_at", rec.CreatedAt)
	}
	return keyFailed
}

// runPhases runs ops, and turns a panic in a phase into an error: the
// resumer runs in the background, where a panic would end the process.
func runPhases(ctx context.Context, ops Phases, w http.ResponseWriter) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("idem: resumer: a phase panicked: %v", v)
		}
	}()
	return ops.Run(ctx, w)
}

// release frees the key, which keeps its recovery point, under a
// StoreTimeout of its own: ctx carries no deadline (see complete).
func (c *Resumer) release(ctx context.Context, lease idemstore.Lease) error {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.StoreTimeout)
	defer cancel()
	return lease.Release(ctx)
}

// releaseLogged releases the key and logs a failure.
func (c *Resumer) releaseLogged(ctx context.Context, log *slog.Logger, lease idemstore.Lease) {
	if err := c.release(ctx, lease); err != nil {
		log.WarnContext(ctx, "idem: resumer: release failed; the key is free when its lease expires", "err", err)
	}
}
