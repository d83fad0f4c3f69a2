package idem_test

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/idemtest"
)

// runReporter is a Metrics that prints each purge run and stops the
// example after the first one; package idemprom has the Prometheus one.
type runReporter struct {
	stop context.CancelFunc
}

func (runReporter) Request(context.Context, idem.Result)                    {}
func (runReporter) Claim(context.Context, time.Duration, error)             {}
func (runReporter) PurgeBatch(context.Context, int64, time.Duration, error) {}
func (runReporter) PurgeLeader(_ context.Context, leading bool)             { fmt.Println("leading:", leading) }
func (r runReporter) PurgeRun(_ context.Context, deleted int64, _ time.Duration, err error) {
	fmt.Println("run deleted", deleted, "keys, err", err)
	r.stop()
}

// Every instance of a service runs a Purger next to its middleware, with
// the same retention, lease and clock; the store's purge lock lets one at a
// time delete, in batches.
func ExamplePurger() {
	store := idemtest.NewMemoryStore()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for i, age := range []time.Duration{48 * time.Hour, 30 * time.Hour, time.Hour} {
		res, _ := store.Claim(context.Background(), idemstore.ClaimParams{
			Scope:  idemstore.Scope{ClientID: "alice", Key: fmt.Sprint("order-", i)},
			Method: "POST", Path: "/v1/payments", RequestHash: []byte("fingerprint"),
			TwoPhase: true, Now: now.Add(-age),
			LockTimeout: idem.LockTimeoutDefault, Retention: idem.RetentionDefault,
		})
		res.Lease.Complete(context.Background(), &idemstore.Response{StatusCode: 201})
	}

	ctx, stop := context.WithCancel(context.Background())
	purger, err := idem.NewPurger(store, &idem.Config{
		Retention: idem.RetentionDefault, LockTimeout: idem.LockTimeoutDefault,
		Metrics: runReporter{stop: stop}, Logger: slog.New(slog.DiscardHandler),
		Now: func() time.Time { return now },
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	purger.Run(ctx) // until ctx is done
	fmt.Println("keys left:", store.Len())

	_, err = idem.NewPurger(store, &idem.Config{Retention: 10 * time.Second})
	fmt.Println(err)
	// Output:
	// leading: true
	// run deleted 2 keys, err <nil>
	// leading: false
	// keys left: 1
	// idem: Config.Retention (10s) must be longer than Config.LockTimeout (30s), or the purge could delete keys in flight
}
