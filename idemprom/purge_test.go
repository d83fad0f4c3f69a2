package idemprom_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemprom"
	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/idemtest"
)

func TestReportsPurger(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		m := idemprom.New(nil)
		reg := prometheus.NewPedanticRegistry()
		reg.MustRegister(m)
		store := idemtest.NewMemoryStore()
		created := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
		for i := range 5 {
			res, err := store.Claim(context.Background(), idemstore.ClaimParams{
				Scope:  idemstore.Scope{ClientID: "alice", Key: fmt.Sprint("k", i)},
				Method: "POST", Path: "/", RequestHash: []byte("h"), TwoPhase: true, Now: created,
				LockTimeout: time.Second, Retention: time.Hour,
			})
			if err != nil {
				t.Fatal(err)
			}
			if err := res.Lease.Complete(context.Background(), &idemstore.Response{StatusCode: 201}); err != nil {
				t.Fatal(err)
			}
		}
		// One key left started by a holder that died an hour before the
		// purge, and counted as stuck.
		res, err := store.Claim(context.Background(), idemstore.ClaimParams{
			Scope:  idemstore.Scope{ClientID: "alice", Key: "stuck"},
			Method: "POST", Path: "/", RequestHash: []byte("h"), TwoPhase: true, Now: created.Add(24 * time.Hour),
			LockTimeout: time.Second, Retention: time.Hour,
		})
		if err != nil || res.Lease == nil {
			t.Fatal(err)
		}
		p, err := idem.NewPurger(store, &idem.Config{Metrics: m, Logger: slog.New(slog.DiscardHandler),
			Now: func() time.Time { return created.Add(25 * time.Hour) }, Purge: idem.PurgeOpts{BatchSize: 2},
		})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error)
		go func() { done <- p.Run(ctx) }()
		time.Sleep(time.Second)
		synctest.Wait()

		want := `
# HELP idem_purge_batches_total Purge batches, by outcome (ok or error).
# TYPE idem_purge_batches_total counter
idem_purge_batches_total{outcome="error"} 0
idem_purge_batches_total{outcome="ok"} 3
# HELP idem_purge_deleted_total Keys past retention deleted by the purge.
# TYPE idem_purge_deleted_total counter
idem_purge_deleted_total 5
# HELP idem_purge_leader 1 while this instance holds the purge lock and purges, else 0.
# TYPE idem_purge_leader gauge
idem_purge_leader 1
# HELP idem_purge_runs_total Purge runs (batches until one is not full), by outcome (ok or error).
# TYPE idem_purge_runs_total counter
idem_purge_runs_total{outcome="error"} 0
idem_purge_runs_total{outcome="ok"} 1
# HELP idem_keys_started Keys started and not completed (in flight, or left by a holder that died), counted after each purge run by the instance that purges; 0 on the others.
# TYPE idem_keys_started gauge
idem_keys_started 1
# HELP idem_keys_stuck Started keys whose lease expired, counted after each purge run by the instance that purges; 0 on the others.
# TYPE idem_keys_stuck gauge
idem_keys_stuck 1
# HELP idem_keys_oldest_started_age_seconds Age of the lease of the oldest started key, read after each purge run by the instance that purges; 0 when there is none, and on the others.
# TYPE idem_keys_oldest_started_age_seconds gauge
idem_keys_oldest_started_age_seconds 3600
`
		names := []string{
			"idem_purge_batches_total", "idem_purge_deleted_total", "idem_purge_leader", "idem_purge_runs_total",
			"idem_keys_started", "idem_keys_stuck", "idem_keys_oldest_started_age_seconds",
		}
		if err := testutil.GatherAndCompare(reg, strings.NewReader(want), names...); err != nil {
			t.Error(err)
		}
		if n := testutil.CollectAndCount(m, "idem_purge_run_duration_seconds"); n != 1 {
			t.Errorf("%d run duration series, want 1", n)
		}
		families, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range families {
			if f.GetName() == "idem_purge_last_success_timestamp_seconds" {
				if got, now := f.GetMetric()[0].GetGauge().GetValue(), float64(time.Now().Unix()); got < now-60 || got > now+1 {
					t.Errorf("idem_purge_last_success_timestamp_seconds = %v, want the time of the run, %v", got, now)
				}
			}
		}
		cancel()
		<-done
		stopped := `
# HELP idem_purge_leader 1 while this instance holds the purge lock and purges, else 0.
# TYPE idem_purge_leader gauge
idem_purge_leader 0
`
		if err := testutil.GatherAndCompare(reg, strings.NewReader(stopped), "idem_purge_leader"); err != nil {
			t.Errorf("after Run ended: %v", err)
		}
		if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) > 0 {
			t.Errorf("lint: %v %v", problems, err)
		}
	})
}
