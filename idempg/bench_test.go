package idempg_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idempg"
	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/internal/pgtest"
)

// BenchmarkClaimComplete claims a new key, writes one business row in the
// lease's transaction and completes it: the cost of a first request. In
// "atomic-speculative" the claim is the middleware's for a key it has not
// seen: it goes out with the write.
func BenchmarkClaimComplete(b *testing.B) {
	store := setup(b, nil)
	for _, mode := range []string{"two-phase", "atomic", "atomic-speculative"} {
		b.Run(mode, func(b *testing.B) {
			ctx := context.Background()
			resp := response(`{"id":"pay_1","amount":4200}`)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				i++
				scope := idemstore.Scope{ClientID: "bench", Key: fmt.Sprintf("%s-%d-%d", mode, time.Now().UnixNano(), i)}
				p := benchParams(mode, scope, epoch)
				res, err := store.Claim(ctx, p)
				if err != nil || res.Lease == nil {
					b.Fatalf("Claim: lease %v, err %v", res.Lease != nil, err)
				}
				if err := write(res.Lease.Context(ctx), scope.Key); err != nil {
					b.Fatalf("write: %v", err)
				}
				if err := res.Lease.Complete(ctx, resp); err != nil {
					b.Fatalf("Complete: %v", err)
				}
			}
		})
	}
}

// benchParams returns the claim of mode: "two-phase", "atomic", or
// "atomic-speculative", the middleware's claim of a key it has not seen.
func benchParams(mode string, scope idemstore.Scope, now time.Time) idemstore.ClaimParams {
	if mode == "two-phase" {
		return params(idem.ModeTwoPhase, scope, "a", now)
	}
	p := params(idem.ModeAtomic, scope, "a", now)
	p.Speculative = mode == "atomic-speculative"
	return p
}

// BenchmarkReplay claims a completed key: the cost of a retry. In "atomic"
// the claim reads the key at once, one round trip, as the middleware
// claims a key it claimed lately; in "atomic-speculative", the claim of a
// retry that reached another process, it goes out with the handler's
// write, which it refuses, and the key is read after: two round trips.
func BenchmarkReplay(b *testing.B) {
	store := setup(b, nil)
	ctx := context.Background()
	scope := newScope("bench")
	complete(b, mustLease(b, store, params(idem.ModeAtomic, scope, "a", epoch)), `{"id":"pay_1","amount":4200}`)
	for _, mode := range []string{"atomic", "atomic-speculative"} {
		b.Run(mode, func(b *testing.B) {
			p := benchParams(mode, scope, epoch.Add(time.Minute))
			b.ReportAllocs()
			for b.Loop() {
				res, err := store.Claim(ctx, p)
				rec := res.Record
				if err == nil && res.Lease != nil {
					var exists *idemstore.ExistsError
					if err = write(res.Lease.Context(ctx), scope.Key); errors.As(err, &exists) {
						rec, err = exists.Record, nil
					}
					_ = res.Lease.Release(ctx)
				}
				if err != nil || rec == nil || rec.Status != idemstore.StatusCompleted {
					b.Fatalf("Claim: record %v, err %v", rec, err)
				}
			}
		})
	}
}

// BenchmarkInFlightAnswer measures how long a duplicate claim takes to
// answer "started" while the holder keeps its key, with the p50 and p99
// reported as metrics: the holder's open transaction must not slow it.
func BenchmarkInFlightAnswer(b *testing.B) {
	store := setup(b, nil)
	warmUp(b, store.Pool(), 2)
	for _, mode := range modes {
		b.Run(mode.String(), func(b *testing.B) {
			scope := newScope("bench")
			finish := holdKey(b, store, mode, scope)
			defer finish()
			var d []time.Duration
			for b.Loop() {
				start := time.Now()
				if bad := duplicateClaim(store, mode, scope); bad != "" {
					b.Fatalf("duplicate claim: %s", bad)
				}
				d = append(d, time.Since(start))
			}
			slices.Sort(d)
			b.ReportMetric(float64(d[len(d)/2].Microseconds()), "p50-us")
			b.ReportMetric(float64(d[len(d)*99/100].Microseconds()), "p99-us")
		})
	}
}

// BenchmarkRowClaims measures the claims of Config.NoAdvisoryLocks (row)
// beside the default advisory locks (lock), on one database, one after the
// other for each kind: a new key in each mode (claim, one business row,
// Complete) and an atomic replay. Compare within a run.
func BenchmarkRowClaims(b *testing.B) {
	pool := newPool(b, pgtest.NewDatabase(b), 8)
	stores := map[string]*idempg.Store{
		"lock": setupOn(b, pool, nil),
		"row":  setupOn(b, schemaPool(b, pool, pool.Config().ConnString()), &idempg.Config{NoAdvisoryLocks: true}),
	}
	ctx := context.Background()
	resp := response(`{"id":"pay_1","amount":4200}`)
	for _, kind := range []string{"atomic", "two-phase", "replay"} {
		for _, claims := range []string{"lock", "row"} {
			store := stores[claims]
			b.Run(kind+"/"+claims, func(b *testing.B) {
				scope := newScope("bench")
				if kind == "replay" {
					complete(b, mustLease(b, store, params(idem.ModeAtomic, scope, "a", epoch)), `{"id":"pay_1","amount":4200}`)
				}
				i := 0
				for b.Loop() {
					i++
					if kind == "replay" {
						res, err := store.Claim(ctx, params(idem.ModeAtomic, scope, "a", epoch.Add(time.Minute)))
						if err != nil || res.Record == nil || res.Record.Status != idemstore.StatusCompleted {
							b.Fatalf("Claim: record %v, err %v", res.Record, err)
						}
						continue
					}
					scope := idemstore.Scope{ClientID: "bench", Key: fmt.Sprintf("%s-%s-%d-%d", kind, claims, time.Now().UnixNano(), i)}
					res, err := store.Claim(ctx, benchParams(kind, scope, epoch))
					if err != nil || res.Lease == nil {
						b.Fatalf("Claim: lease %v, err %v", res.Lease != nil, err)
					}
					if err := write(res.Lease.Context(ctx), scope.Key); err != nil {
						b.Fatalf("write: %v", err)
					}
					if err := res.Lease.Complete(ctx, resp); err != nil {
						b.Fatalf("Complete: %v", err)
					}
				}
			})
		}
	}
}
