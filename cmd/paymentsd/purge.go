package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/cmd/internal/database"
	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/internal/cmdrun"
)

// purgeOptions are the flags of the purge service.
type purgeOptions struct {
	enabled  bool
	interval time.Duration
	batch    int
	pause    time.Duration
}

func (p *purgeOptions) flags(fs *flag.FlagSet, env *cmdrun.Env) {
	fs.BoolVar(&p.enabled, "purge", env.Bool("PAYMENTSD_PURGE", true), "run the purge service, which deletes keys past -retention; with several instances on one PostgreSQL database one at a time purges, and another takes over when it dies. false turns it off, as for a purge run by idem purge on a schedule (env PAYMENTSD_PURGE)")
	fs.DurationVar(&p.interval, "purge-interval", env.Duration("PAYMENTSD_PURGE_INTERVAL", idem.PurgeIntervalDefault), "time between purge runs, and between an instance's tries to take the purge over; 0 turns the purge off (env PAYMENTSD_PURGE_INTERVAL)")
	fs.IntVar(&p.batch, "purge-batch", env.Int("PAYMENTSD_PURGE_BATCH", idemstore.PurgeBatchSizeDefault), "keys deleted per purge batch (env PAYMENTSD_PURGE_BATCH)")
	fs.DurationVar(&p.pause, "purge-pause", env.Duration("PAYMENTSD_PURGE_PAUSE", idem.PurgePauseDefault), "mean pause between two purge batches, jittered by half either way (env PAYMENTSD_PURGE_PAUSE)")
}

// opts returns the purger's settings of the one idem.Config.
func (p *purgeOptions) opts() idem.PurgeOpts {
	return idem.PurgeOpts{Interval: p.interval, BatchSize: p.batch, Pause: p.pause}
}

// start starts the purge service unless it is off, with the service's
// one idem.Config (its retention, lock timeout, clock and purge settings),
// and returns the function that stops it and waits until it gave the
// purge lock up.
func (p *purgeOptions) start(ctx context.Context, db *database.DB, cfg *idem.Config, logger *slog.Logger) (stop func(), err error) {
	if !p.enabled || p.interval == 0 {
		logger.Info("paymentsd: purge service off")
		return func() {}, nil
	}
	if p.interval < 0 || p.batch <= 0 || p.pause <= 0 {
		return nil, fmt.Errorf("-purge-interval, -purge-batch and -purge-pause must be positive")
	}
	purger, err := idem.NewPurger(db.PurgeStore(), cfg)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		purger.Run(ctx)
	}()
	return func() {
		cancel()
		<-done
	}, nil
}
