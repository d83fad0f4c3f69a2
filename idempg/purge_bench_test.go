package idempg_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/internal/pgtest"
)

// runSignal is an idem.Metrics whose PurgeRun closes done.
type runSignal struct {
	done    chan struct{}
	deleted int64
	took    time.Duration
	err     error
	batches atomic.Int64
}

func (s *runSignal) Request(context.Context, idem.Result)        {}
func (s *runSignal) Claim(context.Context, time.Duration, error) {}
func (s *runSignal) PurgeLeader(context.Context, bool)           {}
func (s *runSignal) PurgeBatch(context.Context, int64, time.Duration, error) {
	s.batches.Add(1)
}
func (s *runSignal) PurgeRun(_ context.Context, n int64, d time.Duration, err error) {
	s.deleted, s.took, s.err = n, d, err
	close(s.done)
}

// BenchmarkPurgeUnderLoad deletes IDEM_PURGE_KEYS (default 1,000,000)
// expired keys with an idem.Purger while live requests (claim, business
// row, complete; 4 clients) run, and reports the purge's rows/s and the
// live requests' p99 without the purge (10 s before it and 10 s after)
// and during it. IDEM_PURGE_BATCH sets the batch size (default
// idemstore.PurgeBatchSizeDefault, 5000), IDEM_PURGE_SHARE the purge's
// share of time (default idemstore.PurgeShareDefault, 0.2; 1 for the
// batches back to back, as before the share).
// It runs only with IDEM_PURGE_BENCH set, once:
//
//	IDEM_PURGE_BENCH=1 go test -run '^$' -bench PurgeUnderLoad -benchtime 1x ./idempg
func BenchmarkPurgeUnderLoad(b *testing.B) {
	if os.Getenv("IDEM_PURGE_BENCH") == "" {
		b.Skip("set IDEM_PURGE_BENCH=1 to run it: it takes minutes and a million rows")
	}
	keys, batch := envInt(b, "IDEM_PURGE_KEYS", 1_000_000), envInt(b, "IDEM_PURGE_BATCH", idemstore.PurgeBatchSizeDefault)
	share := idemstore.PurgeShareDefault
	if v, ok := os.LookupEnv("IDEM_PURGE_SHARE"); ok {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || !(f > 0 && f <= 1) {
			b.Fatalf("IDEM_PURGE_SHARE=%q: want a number above 0, at most 1", v)
		}
		share = f
	}
	for b.Loop() {
		store := setupOn(b, newPool(b, pgtest.NewDatabase(b), 16), nil)
		ctx := context.Background()
		pool := store.Pool()
		now := epoch.Add(100 * time.Hour)
		start := time.Now()
		if _, err := pool.Exec(ctx, `INSERT INTO idempotency_keys
  (client_id, idempotency_key, request_method, request_path, request_hash, status, response_status, response_body, created_at, locked_at, completed_at)
SELECT 'old', 'key-' || i, 'POST', '/v1/payments', sha256(i::text::bytea), 'completed', 201, '{"id":"pay_1","amount":4200}',
       $2::timestamptz - ($1 - i) * interval '1 millisecond', $2, $2
FROM generate_series(1, $1) AS i`, keys, epoch); err != nil {
			b.Fatal(err)
		}
		if _, err := pool.Exec(ctx, `VACUUM ANALYZE idempotency_keys`); err != nil {
			b.Fatal(err)
		}
		b.Logf("inserted %d expired keys in %s", keys, time.Since(start).Round(time.Millisecond))

		var seq atomic.Int64
		live := func(stop <-chan struct{}) []time.Duration {
			var mu sync.Mutex
			var all []time.Duration
			var wg sync.WaitGroup
			for range 4 {
				wg.Go(func() {
					var mine []time.Duration
					resp := response(`{"id":"pay_1","amount":4200}`)
					for {
						select {
						case <-stop:
							mu.Lock()
							all = append(all, mine...)
							mu.Unlock()
							return
						default:
						}
						t0 := time.Now()
						scope := idemstore.Scope{ClientID: "live", Key: fmt.Sprint("live-", seq.Add(1))}
						res, err := store.Claim(ctx, params(idem.ModeAtomic, scope, "a", now))
						if err != nil || res.Lease == nil {
							b.Errorf("Claim: lease %v, err %v", res.Lease != nil, err)
							return
						}
						if err := write(res.Lease.Context(ctx), scope.Key); err != nil {
							b.Errorf("write: %v", err)
							return
						}
						if err := res.Lease.Complete(ctx, resp); err != nil {
							b.Errorf("Complete: %v", err)
							return
						}
						mine = append(mine, time.Since(t0))
					}
				})
			}
			wg.Wait()
			return all
		}
		timed := func(d time.Duration) []time.Duration {
			stop := make(chan struct{})
			time.AfterFunc(d, func() { close(stop) })
			return live(stop)
		}

		base := timed(10 * time.Second)
		signal := &runSignal{done: make(chan struct{})}
		purger, err := idem.NewPurger(store, &idem.Config{Metrics: signal, Logger: quiet,
			Now: func() time.Time { return now }, Purge: idem.PurgeOpts{Interval: time.Hour, BatchSize: batch, Share: share},
		})
		if err != nil {
			b.Fatal(err)
		}
		pctx, cancel := context.WithCancel(ctx)
		go purger.Run(pctx)
		during := live(signal.done)
		cancel()
		if signal.err != nil || signal.deleted != int64(keys) {
			b.Fatalf("purge deleted %d keys, err %v; want %d", signal.deleted, signal.err, keys)
		}
		base = append(base, timed(10*time.Second)...)

		rate := float64(signal.deleted) / signal.took.Seconds()
		p99base, p99during := p99(base), p99(during)
		b.Logf("purge: %d keys in %d batches of %d in %s: %.0f rows/s", signal.deleted, signal.batches.Load(), batch, signal.took.Round(time.Millisecond), rate)
		b.Logf("live requests: %d without the purge, p50 %s p99 %s; %d during it, p50 %s p99 %s; p99 ratio %.2f",
			len(base), p50(base), p99base, len(during), p50(during), p99during, float64(p99during)/float64(p99base))
		b.ReportMetric(rate, "rows/s")
		b.ReportMetric(float64(p99base.Microseconds()), "p99-base-us")
		b.ReportMetric(float64(p99during.Microseconds()), "p99-purge-us")
		b.ReportMetric(float64(p99during)/float64(p99base), "p99-ratio")
	}
}

func p99(d []time.Duration) time.Duration { return quantile(d, 0.99) }
func p50(d []time.Duration) time.Duration { return quantile(d, 0.5) }

func quantile(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[int(float64(len(s)-1)*q)].Round(time.Microsecond)
}

func envInt(b *testing.B, name string, def int) int {
	b.Helper()
	v, ok := os.LookupEnv(name)
	if !ok {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		b.Fatalf("%s=%q: want a positive number", name, v)
	}
	return n
}
