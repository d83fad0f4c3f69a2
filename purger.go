package idem

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/idemkit/idem/idemstore"
)

// PurgeMetrics is implemented by a [Metrics] that also reports what a
// [Purger] does; the idemprom package's Metrics does. It is a separate
// interface so that a Metrics of one's own need not implement it.
type PurgeMetrics interface {
	// PurgeBatch observes one batch: the keys it deleted, how long it
	// took, and whether it failed.
	PurgeBatch(ctx context.Context, deleted int64, d time.Duration, err error)
	// PurgeRun observes one run, the batches until none was full: the keys
	// deleted, how long it took, and whether it failed.
	PurgeRun(ctx context.Context, deleted int64, d time.Duration, err error)
	// PurgeLeader reports whether this instance holds the purge lock.
	PurgeLeader(ctx context.Context, leading bool)
}

// KeyStatsMetrics is implemented by a [Metrics] that reports [idemstore.KeyStats];
// the idemprom package's Metrics does.
type KeyStatsMetrics interface {
	// KeyStats reports the counts read at now.
	KeyStats(ctx context.Context, s idemstore.KeyStats, now time.Time)
}

// Purger deletes keys past retention, in the background, for as long as
// its Run lasts. Every instance of a service may run one: the store's purge
// lock lets one at a time purge, and when that instance dies another takes
// the lock within an Interval.
//
// A run deletes keys in batches of BatchSize, each under BatchTimeout,
// until a batch is not full; the next run starts an Interval later. After
// each batch it pauses long enough that its batches take at most Share of
// its time, and at least about Pause ([PurgeOpts]). Keys past retention
// are already treated as unused by every claim: the purge only keeps the
// table from growing without bound.
type Purger struct {
	store   idemstore.PurgeStore
	cfg     *Config
	metrics PurgeMetrics
	// batchSize and share are Config.Purge's, or the store's defaults.
	batchSize int
	share     float64

	// stats and statsMetrics are set when the store counts its keys and
	// the metrics report the counts.
	stats        idemstore.KeyStatsStore
	statsMetrics KeyStatsMetrics
	tracing      tracing
}

// purgeResult is the outcome of one run of a [Purger].
type purgeResult struct {
	Deleted  int64         // keys deleted
	Batches  int           // batches run, the last one not full
	Duration time.Duration // from the first batch to the end of the last
}

// NewPurger returns a Purger on store. A nil cfg uses the defaults.
func NewPurger(store idemstore.PurgeStore, cfg *Config) (*Purger, error) {
	if store == nil {
		return nil, errors.New("idem: a PurgeStore is required")
	}
	c, err := build(cfg)
	if err != nil {
		return nil, err
	}
	p := &Purger{store: store, cfg: c, metrics: noPurgeMetrics{}, tracing: tracing{c.Tracer},
		batchSize: c.Purge.BatchSize, share: c.Purge.Share}
	pacer, _ := store.(idemstore.PurgePacer)
	if p.batchSize == 0 {
		p.batchSize = idemstore.PurgeBatchSizeDefault
		if pacer != nil && pacer.PurgeBatchSize() > 0 {
			p.batchSize = pacer.PurgeBatchSize()
		}
	}
	if p.share == 0 {
		p.share = idemstore.PurgeShareDefault
		if pacer != nil && pacer.PurgeShare() > 0 && pacer.PurgeShare() <= 1 {
			p.share = pacer.PurgeShare()
		}
	}
	if m, ok := c.Metrics.(PurgeMetrics); ok {
		p.metrics = m
	}
	ks, okStore := store.(idemstore.KeyStatsStore)
	km, okMetrics := c.Metrics.(KeyStatsMetrics)
	if okStore && okMetrics {
		p.stats, p.statsMetrics = ks, km
	}
	return p, nil
}

// Run purges every Interval until ctx is done, then gives the purge lock up
// and returns nil. The first attempt is at once. Failures are logged and
// counted, never returned: the next run tries again, after the lock is
// taken again, since a failed batch may mean that its connection broke.
func (p *Purger) Run(ctx context.Context) error {
	var lock idemstore.PurgeLock
	defer func() {
		if lock != nil {
			p.unlock(context.WithoutCancel(ctx), lock)
		}
	}()
	wait := time.NewTimer(0)
	defer wait.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-wait.C:
		}
		if lock == nil {
			lock = p.lock(ctx)
		}
		if lock != nil {
			if _, err := p.run(ctx, lock); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				p.unlock(ctx, lock)
				lock = nil
			}
		}
		if lock != nil {
			p.readStats(ctx)
		}
		wait.Reset(p.cfg.Purge.Interval)
	}
}

// lock tries to take the purge lock and returns it, or nil when another
// instance holds it or the store failed.
func (p *Purger) lock(ctx context.Context) idemstore.PurgeLock {
	lock, err := p.store.LockPurge(ctx)
	switch {
	case errors.Is(err, idemstore.ErrPurgeLocked):
		p.cfg.Logger.Debug("idem: purge: another instance holds the purge lock")
		return nil
	case err != nil:
		if ctx.Err() == nil {
			p.cfg.Logger.Warn("idem: purge: cannot take the purge lock", "err", err)
		}
		return nil
	}
	p.cfg.Logger.Info("idem: purge: this instance holds the purge lock and purges")
	p.metrics.PurgeLeader(ctx, true)
	return lock
}

func (p *Purger) unlock(ctx context.Context, lock idemstore.PurgeLock) {
	p.metrics.PurgeLeader(ctx, false)
	if err := lock.Unlock(ctx); err != nil && ctx.Err() == nil {
		p.cfg.Logger.Warn("idem: purge: unlock", "err", err)
	}
}

// run deletes batches until one is not full.
func (p *Purger) run(ctx context.Context, lock idemstore.PurgeLock) (purgeResult, error) {
	params := idemstore.PurgeParams{Before: p.cfg.Now().Add(-p.cfg.Retention), BatchSize: p.batchSize}
	var res purgeResult
	ctx, span := p.tracing.start(ctx, SpanStart{Step: StepPurge})
	start := time.Now()
	err := func() error {
		for {
			n, took, err := p.batch(ctx, lock, params)
			res.Deleted += n
			res.Batches++
			if err != nil || n < int64(params.BatchSize) {
				return err
			}
			pause := time.NewTimer(p.pause(took))
			select {
			case <-ctx.Done():
				pause.Stop()
				return ctx.Err()
			case <-pause.C:
			}
		}
	}()
	res.Duration = time.Since(start)
	span.End(SpanEnd{Keys: res.Deleted, Err: err})
	p.metrics.PurgeRun(ctx, res.Deleted, res.Duration, err)
	attrs := []any{
		"deleted", res.Deleted, "batches", res.Batches, "duration", res.Duration,
		"before", params.Before.UTC().Format(time.RFC3339),
	}
	switch {
	case errors.Is(err, idemstore.ErrPurgeLockLost) && ctx.Err() == nil:
		p.cfg.Logger.Info("idem: purge: lost the purge lock; another instance may purge", append(attrs, "err", err)...)
	case err != nil && ctx.Err() == nil:
		p.cfg.Logger.Error("idem: purge failed", append(attrs, "err", err)...)
	case err == nil && res.Deleted > 0:
		p.cfg.Logger.Info("idem: purged keys past retention", attrs...)
	}
	return res, err
}

// batch runs one batch and returns what it deleted and how long it took.
func (p *Purger) batch(ctx context.Context, lock idemstore.PurgeLock, params idemstore.PurgeParams) (int64, time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.Purge.BatchTimeout)
	defer cancel()
	start := time.Now()
	n, err := lock.PurgeBatch(ctx, params)
	took := time.Since(start)
	p.metrics.PurgeBatch(ctx, n, took, err)
	return n, took, err
}

// pause is the pause after a batch that took took: the longer of the
// share's (idemstore.PurgePause) and the jittered Pause.
func (p *Purger) pause(took time.Duration) time.Duration {
	return max(idemstore.PurgePause(took, p.share), jitter(p.cfg.Purge.Pause))
}

// jitter returns a random duration from d/2 to 3d/2, of mean d.
func jitter(d time.Duration) time.Duration {
	return d/2 + rand.N(d+1)
}

// readStats reports the store's KeyStats, when both sides support them.
func (p *Purger) readStats(ctx context.Context) {
	if p.stats == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, p.cfg.Purge.BatchTimeout)
	defer cancel()
	now := p.cfg.Now()
	s, err := p.stats.KeyStats(ctx, now, p.cfg.LockTimeout)
	if err != nil {
		if ctx.Err() == nil {
			p.cfg.Logger.Warn("idem: purge: cannot count started keys", "err", err)
		}
		return
	}
	p.statsMetrics.KeyStats(ctx, s, now)
}

type noPurgeMetrics struct{}

func (noPurgeMetrics) PurgeBatch(context.Context, int64, time.Duration, error) {}
func (noPurgeMetrics) PurgeRun(context.Context, int64, time.Duration, error)   {}
func (noPurgeMetrics) PurgeLeader(context.Context, bool)                       {}
