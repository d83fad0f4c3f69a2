package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/cmd/internal/database"
	"github.com/idemkit/idem/internal/cmdrun"
)

// purgeFlags declares the flags of the purge service: whether it runs, and
// the purger's settings in the one idem.Config.
func purgeFlags(fs *flag.FlagSet, env *cmdrun.Env, o *options) {
	fs.BoolVar(&o.purge, "purge", env.Bool("PAYMENTSD_PURGE", true), "run the purge service, which deletes keys past -retention; with several instances on one PostgreSQL database one at a time purges, and another takes over when it dies. false turns it off, as for a purge run by idem purge on a schedule (env PAYMENTSD_PURGE)")
	fs.DurationVar(&o.idem.Purge.Interval, "purge-interval", env.Duration("PAYMENTSD_PURGE_INTERVAL", idem.PurgeIntervalDefault), "time between purge runs, and between an instance's tries to take the purge over; 0 turns the purge off (env PAYMENTSD_PURGE_INTERVAL)")
	fs.IntVar(&o.idem.Purge.BatchSize, "purge-batch", env.Int("PAYMENTSD_PURGE_BATCH", 0), "keys deleted per purge batch; 0 means the store's: 100 on SQLite, else 5000 (env PAYMENTSD_PURGE_BATCH)")
	fs.Float64Var(&o.idem.Purge.Share, "purge-share", env.Float("PAYMENTSD_PURGE_SHARE", 0), "the most of its time the purge spends in its batches, from 0 to 1: after a batch that took d it pauses d × (1 − share) / share, so that requests get the database for the rest; 0 means the store's: 0.1 on SQLite, else 0.2; 1 paces by -purge-pause alone (env PAYMENTSD_PURGE_SHARE)")
	fs.DurationVar(&o.idem.Purge.Pause, "purge-pause", env.Duration("PAYMENTSD_PURGE_PAUSE", idem.PurgePauseDefault), "least mean pause between two purge batches, jittered by half either way; the purge pauses the longer of it and -purge-share's pause (env PAYMENTSD_PURGE_PAUSE)")
}

// startPurge starts the purge service unless it is off, from the service's
// one idem.Config, and returns the function that stops it and waits until
// it gave the purge lock up.
func startPurge(ctx context.Context, on bool, db *database.DB, cfg *idem.Config, logger *slog.Logger) (stop func(), err error) {
	if !on || cfg.Purge.Interval == 0 {
		logger.Info("paymentsd: purge service off")
		return func() {}, nil
	}
	if cfg.Purge.Interval < 0 || cfg.Purge.BatchSize < 0 || cfg.Purge.Pause <= 0 || !(cfg.Purge.Share >= 0 && cfg.Purge.Share <= 1) {
		return nil, fmt.Errorf("-purge-interval and -purge-pause must be positive, -purge-batch must not be negative, and -purge-share must be from 0 to 1")
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
