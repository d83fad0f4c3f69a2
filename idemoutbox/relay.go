package idemoutbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults of [RelayConfig].
const (
	BatchSizeDefault     = 100
	ParallelismDefault   = 8
	MaxAttemptsDefault   = 12
	PollIntervalDefault  = time.Second
	RetentionDefault     = 72 * time.Hour
	PurgeIntervalDefault = time.Minute
)

// BackoffPolicy returns how long to wait after the attempt-th failed
// delivery of an event (1 for the first) before the next attempt.
type BackoffPolicy func(attempt int) time.Duration

// Bounds of [DefaultBackoff].
const (
	BackoffBase = 5 * time.Second
	BackoffMax  = time.Hour
)

// DefaultBackoff is ExponentialBackoff(BackoffBase, BackoffMax): 5 s
// doubling per attempt up to an hour, jittered. With MaxAttemptsDefault
// attempts an event is retried for about three hours at most.
func DefaultBackoff(attempt int) time.Duration {
	return backoff(BackoffBase, BackoffMax, attempt)
}

// ExponentialBackoff returns a policy that waits base·2^(attempt-1),
// capped at maxWait, jittered uniformly into its upper half ([d/2, d]) so
// that events that failed together do not come back together.
func ExponentialBackoff(base, maxWait time.Duration) BackoffPolicy {
	return func(attempt int) time.Duration { return backoff(base, maxWait, attempt) }
}

func backoff(base, maxWait time.Duration, attempt int) time.Duration {
	d := maxWait
	if attempt >= 1 && attempt <= 40 && base > 0 && base < maxWait>>(attempt-1) {
		d = base << (attempt - 1)
	}
	if d <= 0 {
		return 0
	}
	return d/2 + rand.N(d/2+1)
}

// RelayConfig configures a [Relay].
type RelayConfig struct {
	// BatchSize is the most events taken per batch. Defaults to
	// BatchSizeDefault (100).
	BatchSize int
	// Parallelism is the most deliveries in flight within a batch.
	// Defaults to ParallelismDefault (8).
	Parallelism int
	// MaxAttempts is the number of failed attempts after which an event is
	// parked as dead. Defaults to MaxAttemptsDefault (12).
	MaxAttempts int
	// Backoff is the wait after a failed attempt. Defaults to
	// DefaultBackoff.
	Backoff BackoffPolicy
	// PollInterval is the wait between polls when no event was due.
	// Defaults to PollIntervalDefault (1 s).
	PollInterval time.Duration
	// Retention is how long delivered events are kept before [Relay.Run]
	// purges them. Defaults to RetentionDefault (72 h).
	Retention time.Duration
	// PurgeInterval is how often [Relay.Run] purges. Defaults to
	// PurgeIntervalDefault (1 min).
	PurgeInterval time.Duration
	// Now is the relay's clock: what is due, and when to retry. Defaults
	// to time.Now.
	Now func() time.Time
	// Logger receives failed and dead deliveries. Defaults to
	// slog.Default().
	Logger *slog.Logger
	// Metrics receives delivery results and the backlog. Defaults to none.
	Metrics Metrics
}

func (c *RelayConfig) withDefaults() *RelayConfig {
	out := RelayConfig{}
	if c != nil {
		out = *c
	}
	if out.BatchSize == 0 {
		out.BatchSize = BatchSizeDefault
	}
	if out.Parallelism == 0 {
		out.Parallelism = ParallelismDefault
	}
	if out.MaxAttempts == 0 {
		out.MaxAttempts = MaxAttemptsDefault
	}
	if out.Backoff == nil {
		out.Backoff = DefaultBackoff
	}
	if out.PollInterval == 0 {
		out.PollInterval = PollIntervalDefault
	}
	if out.Retention == 0 {
		out.Retention = RetentionDefault
	}
	if out.PurgeInterval == 0 {
		out.PurgeInterval = PurgeIntervalDefault
	}
	if out.Now == nil {
		out.Now = time.Now
	}
	if out.Logger == nil {
		out.Logger = slog.Default()
	}
	if out.Metrics == nil {
		out.Metrics = noMetrics{}
	}
	return &out
}

func (c *RelayConfig) validate() error {
	if c.BatchSize < 0 || c.Parallelism < 0 || c.MaxAttempts < 0 || c.PollInterval < 0 || c.Retention < 0 || c.PurgeInterval < 0 {
		return errors.New("idemoutbox: RelayConfig fields must not be negative")
	}
	return nil
}

// Relay delivers an outbox's due events. Run any number of relays on one
// PostgreSQL database; on SQLite run one per database file.
type Relay struct {
	store     Store
	deliverer Deliverer
	cfg       *RelayConfig
	running   atomic.Bool
}

// NewRelay returns a relay that takes events from store and hands them to
// d.
func NewRelay(store Store, d Deliverer, cfg *RelayConfig) (*Relay, error) {
	c := cfg.withDefaults()
	if err := c.validate(); err != nil {
		return nil, err
	}
	if store == nil || d == nil {
		return nil, errors.New("idemoutbox: a relay needs a store and a deliverer")
	}
	return &Relay{store: store, deliverer: d, cfg: c}, nil
}

// Run delivers due events until ctx ends, then returns nil. It takes
// batches back to back while they come full and polls every PollInterval
// otherwise; it reports the backlog to Metrics after each poll (at most
// once per PollInterval while busy) and purges delivered events past
// retention every PurgeInterval. Store errors are logged and retried after
// PollInterval. An event whose delivery was under way when ctx ended is
// delivered again by the next relay: delivery is at least once.
func (r *Relay) Run(ctx context.Context) error {
	if !r.running.CompareAndSwap(false, true) {
		return errors.New("idemoutbox: the relay is already running")
	}
	defer r.running.Store(false)
	var lastPurge, lastReport time.Time
	for {
		n, err := r.DeliverOnce(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			r.cfg.Logger.WarnContext(ctx, "idemoutbox: relay batch failed", "error", err)
		}
		busy := err == nil && n == r.cfg.BatchSize
		// Housekeeping runs on its own schedule, also while batches come
		// full, so that a backlog is reported while it builds up.
		if time.Since(lastPurge) >= r.cfg.PurgeInterval {
			lastPurge = time.Now()
			if _, err := r.Purge(ctx); err != nil && ctx.Err() == nil {
				r.cfg.Logger.WarnContext(ctx, "idemoutbox: purge failed", "error", err)
			}
		}
		if !busy || time.Since(lastReport) >= r.cfg.PollInterval {
			lastReport = time.Now()
			if err := r.ReportBacklog(ctx); err != nil && ctx.Err() == nil {
				r.cfg.Logger.WarnContext(ctx, "idemoutbox: backlog stats failed", "error", err)
			}
		}
		if busy {
			continue
		}
		t := time.NewTimer(r.cfg.PollInterval)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
}

// DeliverOnce delivers one batch of events due now, and returns how many
// it took.
func (r *Relay) DeliverOnce(ctx context.Context) (int, error) {
	n, err := r.store.DeliverBatch(ctx, BatchParams{Now: r.cfg.Now(), Limit: r.cfg.BatchSize}, r.deliverAll)
	if err != nil {
		return n, fmt.Errorf("idemoutbox: deliver: %w", err)
	}
	return n, nil
}

// deliverAll delivers events, at most Parallelism at a time, and returns
// their outcomes.
func (r *Relay) deliverAll(ctx context.Context, events []Event) []Outcome {
	out := make([]Outcome, len(events))
	sem := make(chan struct{}, r.cfg.Parallelism)
	var wg sync.WaitGroup
	for i := range events {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			out[i] = r.deliverOne(ctx, events[i])
		})
	}
	wg.Wait()
	return out
}

func (r *Relay) deliverOne(ctx context.Context, e Event) Outcome {
	err := r.deliverer.Deliver(ctx, e)
	now := r.cfg.Now()
	if err == nil {
		r.cfg.Metrics.Delivery(ctx, ResultDelivered)
		return Outcome{Status: StatusDelivered, At: now, NextAttemptAt: now}
	}
	if ctx.Err() != nil {
		// The relay is stopping: the batch's outcomes are not recorded and
		// the event is delivered again, so this is no attempt to count.
		return Outcome{Status: StatusPending, At: now, NextAttemptAt: e.NextAttemptAt, Error: err.Error()}
	}
	attempt := e.Attempts + 1
	log := r.cfg.Logger.With("event_id", e.ID, "event_type", e.Type, "attempt", attempt, "error", err.Error())
	if attempt >= r.cfg.MaxAttempts {
		r.cfg.Metrics.Delivery(ctx, ResultDead)
		log.WarnContext(ctx, "idemoutbox: event is dead after its last attempt")
		return Outcome{Status: StatusDead, At: now, NextAttemptAt: now, Error: err.Error()}
	}
	next := now.Add(r.cfg.Backoff(attempt))
	r.cfg.Metrics.Delivery(ctx, ResultRetried)
	log.InfoContext(ctx, "idemoutbox: delivery failed; retrying later", "next_attempt_at", next)
	return Outcome{Status: StatusPending, At: now, NextAttemptAt: next, Error: err.Error()}
}

// Purge deletes delivered events older than the retention.
func (r *Relay) Purge(ctx context.Context) (int64, error) {
	n, err := r.store.PurgeEvents(ctx, PurgeParams{Before: r.cfg.Now().Add(-r.cfg.Retention)})
	if err != nil {
		return n, fmt.Errorf("idemoutbox: purge: %w", err)
	}
	if n > 0 {
		r.cfg.Logger.InfoContext(ctx, "idemoutbox: purged delivered events", "deleted", n)
	}
	return n, nil
}

// ReportBacklog reads the outbox's counts and reports them to Metrics.
func (r *Relay) ReportBacklog(ctx context.Context) error {
	s, err := r.store.OutboxStats(ctx)
	if err != nil {
		return fmt.Errorf("idemoutbox: stats: %w", err)
	}
	var oldest time.Duration
	if !s.OldestPending.IsZero() {
		oldest = max(r.cfg.Now().Sub(s.OldestPending), 0)
	}
	r.cfg.Metrics.Backlog(ctx, s.Pending, oldest, s.Dead)
	return nil
}
