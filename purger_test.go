package idem_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/idemtest"
)

// purgeRecorder is an idem.Metrics that records what a Purger reports.
type purgeRecorder struct {
	mu      sync.Mutex
	batches []int64
	runs    []int64
	errs    int
	leading []bool
}

func (r *purgeRecorder) Request(context.Context, idem.Result)        {}
func (r *purgeRecorder) Claim(context.Context, time.Duration, error) {}
func (r *purgeRecorder) PurgeLeader(_ context.Context, leading bool) {
	r.do(func() { r.leading = append(r.leading, leading) })
}
func (r *purgeRecorder) PurgeBatch(_ context.Context, n int64, _ time.Duration, err error) {
	r.do(func() {
		r.batches = append(r.batches, n)
		if err != nil {
			r.errs++
		}
	})
}
func (r *purgeRecorder) PurgeRun(_ context.Context, n int64, _ time.Duration, _ error) {
	r.do(func() { r.runs = append(r.runs, n) })
}

func (r *purgeRecorder) do(f func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f()
}

func (r *purgeRecorder) snapshot() (batches, runs []int64, leading []bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]int64(nil), r.batches...), append([]int64(nil), r.runs...), append([]bool(nil), r.leading...)
}

var purgeEpoch = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// storeKeys stores n completed keys created at created.
func storeKeys(t *testing.T, store *idemtest.MemoryStore, n int, created time.Time) {
	t.Helper()
	for i := range n {
		res, err := store.Claim(context.Background(), idemstore.ClaimParams{
			Scope:  idemstore.Scope{ClientID: "alice", Key: fmt.Sprintf("k-%s-%d", created.Format(time.RFC3339), i)},
			Method: "POST", Path: "/v1/payments", RequestHash: []byte("h"),
			TwoPhase: true, Now: created,
			LockTimeout: idem.LockTimeoutDefault, Retention: idem.RetentionDefault,
		})
		if err != nil || res.Lease == nil {
			t.Fatalf("Claim: %v (lease %v)", err, res.Lease != nil)
		}
		if err := res.Lease.Complete(context.Background(), &idemstore.Response{StatusCode: 201}); err != nil {
			t.Fatalf("Complete: %v", err)
		}
	}
}

func TestNewPurgerRefusesRetentionNotLongerThanLease(t *testing.T) {
	t.Parallel()
	store := idemtest.NewMemoryStore()
	for _, cfg := range []*idem.Config{
		{Retention: time.Minute, LockTimeout: time.Minute},
		{Retention: 10 * time.Second}, // the default lease is 30 s
		{Purge: idem.PurgeOpts{BatchSize: -1}},
		{Purge: idem.PurgeOpts{Pause: -time.Second}},
	} {
		if _, err := idem.NewPurger(store, cfg); err == nil {
			t.Errorf("NewPurger(%+v) succeeded; want an error", *cfg)
		}
	}
	if _, err := idem.NewPurger(nil, nil); err == nil {
		t.Errorf("NewPurger without a store succeeded; want an error")
	}
	if _, err := idem.NewPurger(store, &idem.Config{Retention: time.Hour, LockTimeout: time.Minute}); err != nil {
		t.Errorf("NewPurger with retention longer than the lease: %v", err)
	}
}

func TestPurgerRun(t *testing.T) {
	t.Parallel()
	t.Run("DeletesInBatchesEveryInterval", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			store := idemtest.NewMemoryStore()
			storeKeys(t, store, 7, purgeEpoch)
			storeKeys(t, store, 2, purgeEpoch.Add(2*time.Hour))
			now := purgeEpoch.Add(25 * time.Hour) // the first 7 are past retention
			var clock sync.Mutex
			rec := &purgeRecorder{}
			var logs bytes.Buffer
			p, err := idem.NewPurger(store, &idem.Config{Metrics: rec,
				Logger: slog.New(slog.NewTextHandler(&logs, nil)),
				Now: func() time.Time {
					clock.Lock()
					defer clock.Unlock()
					return now
				}, Purge: idem.PurgeOpts{Interval: time.Hour, BatchSize: 3},
			})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error)
			go func() { done <- p.Run(ctx) }()
			// The pauses between batches are at most 15 ms.
			time.Sleep(time.Second)
			synctest.Wait()
			if n := store.Len(); n != 2 {
				t.Errorf("after the first run %d keys are left, want the 2 within retention", n)
			}
			batches, runs, leading := rec.snapshot()
			if want := []int64{3, 3, 1}; !slices.Equal(batches, want) {
				t.Errorf("batches deleted %v, want %v", batches, want)
			}
			if want := []int64{7}; !slices.Equal(runs, want) {
				t.Errorf("runs deleted %v, want %v", runs, want)
			}
			if len(leading) != 1 || !leading[0] {
				t.Errorf("leader reports %v, want [true]", leading)
			}
			if !strings.Contains(logs.String(), "deleted=7 batches=3") {
				t.Errorf("log lacks the run's figures:\n%s", logs.String())
			}

			// An hour later the next run deletes the keys that aged past
			// retention in the meantime.
			clock.Lock()
			now = purgeEpoch.Add(27 * time.Hour)
			clock.Unlock()
			time.Sleep(time.Hour - 2*time.Second)
			synctest.Wait()
			if n := store.Len(); n != 2 {
				t.Errorf("before the interval passed %d keys are left, want 2", n)
			}
			time.Sleep(2 * time.Second)
			synctest.Wait()
			if n := store.Len(); n != 0 {
				t.Errorf("after the second run %d keys are left, want 0", n)
			}
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run = %v, want nil", err)
			}
			if _, _, leading := rec.snapshot(); len(leading) != 2 || leading[1] {
				t.Errorf("leader reports %v, want [true false]", leading)
			}
			// Run gave the lock up.
			lock, err := store.LockPurge(context.Background())
			if err != nil {
				t.Fatalf("LockPurge after Run ended: %v", err)
			}
			lock.Unlock(context.Background())
		})
	})

	t.Run("OneInstanceAtATimeAndTakeover", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			store := idemtest.NewMemoryStore()
			now := purgeEpoch.Add(25 * time.Hour)
			newPurger := func(rec *purgeRecorder) *idem.Purger {
				p, err := idem.NewPurger(store, &idem.Config{Metrics: rec, Logger: slog.New(slog.DiscardHandler),
					Now: func() time.Time { return now }, Purge: idem.PurgeOpts{Interval: time.Minute},
				})
				if err != nil {
					t.Fatal(err)
				}
				return p
			}
			recA, recB := &purgeRecorder{}, &purgeRecorder{}
			ctxA, stopA := context.WithCancel(context.Background())
			doneA := make(chan error)
			go func() { doneA <- newPurger(recA).Run(ctxA) }()
			synctest.Wait()
			ctxB, stopB := context.WithCancel(context.Background())
			defer stopB()
			go newPurger(recB).Run(ctxB)
			synctest.Wait()

			for i := range 3 {
				storeKeys(t, store, 2, purgeEpoch.Add(time.Duration(i)*time.Second))
				time.Sleep(time.Minute)
				synctest.Wait()
			}
			if _, runs, _ := recB.snapshot(); len(runs) != 0 {
				t.Errorf("the second instance ran %d purges while the first held the lock, want 0", len(runs))
			}
			if _, runs, _ := recA.snapshot(); len(runs) != 4 {
				t.Errorf("the first instance ran %d purges, want 4", len(runs))
			}
			if n := store.Len(); n != 0 {
				t.Errorf("%d keys left, want 0", n)
			}

			// The first instance stops; the second takes over at its next try.
			stopA()
			<-doneA
			storeKeys(t, store, 5, purgeEpoch)
			time.Sleep(time.Minute)
			synctest.Wait()
			_, runs, leading := recB.snapshot()
			if len(leading) != 1 || !leading[0] || !slices.Equal(runs, []int64{5}) {
				t.Errorf("second instance: leader %v, runs %v; want [true], [5]", leading, runs)
			}
			if n := store.Len(); n != 0 {
				t.Errorf("%d keys left, want 0", n)
			}
		})
	})

	t.Run("FailedBatchGivesTheLockUp", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			store := &failingStore{MemoryStore: idemtest.NewMemoryStore(), fail: 1}
			storeKeys(t, store.MemoryStore, 3, purgeEpoch)
			rec := &purgeRecorder{}
			p, err := idem.NewPurger(store, &idem.Config{Metrics: rec, Logger: slog.New(slog.DiscardHandler),
				Now: func() time.Time { return purgeEpoch.Add(25 * time.Hour) }, Purge: idem.PurgeOpts{Interval: time.Minute},
			})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			go p.Run(ctx)
			synctest.Wait()
			if n := store.Len(); n != 3 {
				t.Errorf("after the failed batch %d keys are left, want 3", n)
			}
			_, _, leading := rec.snapshot()
			if !slices.Equal(leading, []bool{true, false}) {
				t.Errorf("leader reports %v, want [true false]: a failed batch gives the lock up", leading)
			}
			time.Sleep(time.Minute)
			synctest.Wait()
			if n := store.Len(); n != 0 {
				t.Errorf("after the next run %d keys are left, want 0", n)
			}
			if rec.errs != 1 {
				t.Errorf("%d failed batches counted, want 1", rec.errs)
			}
		})
	})
}

// failingStore's first fail batches fail, as when the lock's connection
// breaks.
type failingStore struct {
	*idemtest.MemoryStore
	mu   sync.Mutex
	fail int
}

func (s *failingStore) LockPurge(ctx context.Context) (idemstore.PurgeLock, error) {
	lock, err := s.MemoryStore.LockPurge(ctx)
	if err != nil {
		return nil, err
	}
	return &failingLock{PurgeLock: lock, store: s}, nil
}

type failingLock struct {
	idemstore.PurgeLock
	store *failingStore
}

func (l *failingLock) PurgeBatch(ctx context.Context, p idemstore.PurgeParams) (int64, error) {
	l.store.mu.Lock()
	fail := l.store.fail > 0
	l.store.fail--
	l.store.mu.Unlock()
	if fail {
		return 0, errors.New("connection reset")
	}
	return l.PurgeLock.PurgeBatch(ctx, p)
}
