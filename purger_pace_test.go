package idem_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"math"
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

// slowStore is a memory store whose purge batches each take took (on the
// synctest bubble's clock) and record when they start; with size set, it
// names its own batch size, as idemsqlite does.
type slowStore struct {
	*idemtest.MemoryStore
	took time.Duration
	size int

	mu     sync.Mutex
	starts []time.Time
	sizes  []int
}

func (s *slowStore) LockPurge(ctx context.Context) (idemstore.PurgeLock, error) {
	lock, err := s.MemoryStore.LockPurge(ctx)
	if err != nil {
		return nil, err
	}
	return &slowLock{PurgeLock: lock, store: s}, nil
}

func (s *slowStore) snapshot() (starts []time.Time, sizes []int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.starts), slices.Clone(s.sizes)
}

// pacedStore is a slowStore that is an idemstore.PurgePacer, of its size
// and share.
type pacedStore struct {
	*slowStore
	share float64
}

func (s pacedStore) PurgeBatchSize() int { return s.size }
func (s pacedStore) PurgeShare() float64 { return s.share }

type slowLock struct {
	idemstore.PurgeLock
	store *slowStore
}

func (l *slowLock) PurgeBatch(ctx context.Context, p idemstore.PurgeParams) (int64, error) {
	l.store.mu.Lock()
	l.store.starts = append(l.store.starts, time.Now())
	l.store.sizes = append(l.store.sizes, p.BatchSize)
	l.store.mu.Unlock()
	time.Sleep(l.store.took)
	return l.PurgeLock.PurgeBatch(ctx, p)
}

// gaps returns the time from each batch's start to the next's.
func gaps(starts []time.Time) []time.Duration {
	var out []time.Duration
	for i := 1; i < len(starts); i++ {
		out = append(out, starts[i].Sub(starts[i-1]))
	}
	return out
}

// runPurgerOnce runs a Purger on store with opts for one run of its
// batches (the interval is an hour) and returns its log.
func runPurgerOnce(t *testing.T, store idemstore.PurgeStore, opts idem.PurgeOpts) string {
	t.Helper()
	var logs bytes.Buffer
	opts.Interval = time.Hour
	p, err := idem.NewPurger(store, &idem.Config{
		Logger: slog.New(slog.NewTextHandler(&logs, nil)),
		Now:    func() time.Time { return purgeEpoch.Add(25 * time.Hour) },
		Purge:  opts,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- p.Run(ctx) }()
	time.Sleep(time.Minute) // a run of a few batches of 100 ms, paused by at most 15 ms or 9 × 100 ms
	synctest.Wait()
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run = %v, want nil", err)
	}
	return logs.String()
}

func TestPurgerPacing(t *testing.T) {
	t.Parallel()
	const took = 100 * time.Millisecond
	for _, tc := range []struct {
		name  string
		share float64
		// want is the time from a batch's start to the next's: took and
		// the pause; 0 means took and the jittered Pause of 10 ms.
		want time.Duration
	}{
		{"DefaultShareAFifth", 0, took + 4*took},
		{"ShareAFifth", 0.2, took + 4*took},
		{"ShareATenth", 0.1, took + 9*took},
		{"ShareAHalf", 0.5, took + took},
		{"ShareWholePausesByPauseAlone", 1, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				store := &slowStore{MemoryStore: idemtest.NewMemoryStore(), took: took}
				storeKeys(t, store.MemoryStore, 7, purgeEpoch)
				runPurgerOnce(t, store, idem.PurgeOpts{BatchSize: 2, Share: tc.share})
				if n := store.Len(); n != 0 {
					t.Fatalf("%d keys left, want 0", n)
				}
				starts, _ := store.snapshot()
				g := gaps(starts)
				if len(g) != 3 {
					t.Fatalf("%d batches, want 4 (2, 2, 2, 1)", len(starts))
				}
				for i, d := range g {
					switch {
					case tc.want != 0 && d != tc.want:
						t.Errorf("batch %d started %s after the one before, want %s (took %s, share %v)", i+1, d, tc.want, took, tc.share)
					case tc.want == 0 && (d < took+5*time.Millisecond || d > took+15*time.Millisecond): // the documented 10 ms, jittered by half
						t.Errorf("batch %d started %s after the one before, want %s and a pause of 5 to 15 ms", i+1, d, took)
					}
				}
			})
		})
	}

	t.Run("PauseIsTheLeastPause", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			store := &slowStore{MemoryStore: idemtest.NewMemoryStore(), took: took}
			storeKeys(t, store.MemoryStore, 5, purgeEpoch)
			// The share's pause is 100 ms; Pause, jittered, 1 to 3 s.
			runPurgerOnce(t, store, idem.PurgeOpts{BatchSize: 2, Share: 0.5, Pause: 2 * time.Second})
			starts, _ := store.snapshot()
			for i, d := range gaps(starts) {
				if d < took+time.Second || d > took+3*time.Second {
					t.Errorf("batch %d started %s after the one before, want %s and 1 to 3 s", i+1, d, took)
				}
			}
		})
	})

	t.Run("PaceIsTheStores", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			store := &slowStore{MemoryStore: idemtest.NewMemoryStore(), took: took, size: 3}
			storeKeys(t, store.MemoryStore, 7, purgeEpoch)
			runPurgerOnce(t, pacedStore{store, 0.5}, idem.PurgeOpts{})
			starts, sizes := store.snapshot()
			if !slices.Equal(sizes, []int{3, 3, 3}) {
				t.Errorf("batch sizes %v, want the store's 3 three times (3, 3, 1 deleted)", sizes)
			}
			if n := store.Len(); n != 0 {
				t.Errorf("%d keys left, want 0", n)
			}
			for i, d := range gaps(starts) {
				if d != 2*took {
					t.Errorf("batch %d started %s after the one before, want %s: the store's share, 0.5", i+1, d, 2*took)
				}
			}
		})
	})

	t.Run("PaceConfiguredOverTheStores", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			store := &slowStore{MemoryStore: idemtest.NewMemoryStore(), took: took, size: 3}
			storeKeys(t, store.MemoryStore, 7, purgeEpoch)
			runPurgerOnce(t, pacedStore{store, 0.5}, idem.PurgeOpts{BatchSize: 5, Share: 0.2})
			starts, sizes := store.snapshot()
			if !slices.Equal(sizes, []int{5, 5}) {
				t.Errorf("batch sizes %v, want the configured 5 twice", sizes)
			}
			if g := gaps(starts); len(g) != 1 || g[0] != 5*took {
				t.Errorf("batches started %v apart, want [%s]: the configured share, 0.2", g, 5*took)
			}
		})
	})

	t.Run("BatchSizeDefault", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			store := &slowStore{MemoryStore: idemtest.NewMemoryStore(), took: took}
			storeKeys(t, store.MemoryStore, 1, purgeEpoch)
			runPurgerOnce(t, store, idem.PurgeOpts{})
			if _, sizes := store.snapshot(); !slices.Equal(sizes, []int{idemstore.PurgeBatchSizeDefault}) {
				t.Errorf("batch sizes %v, want [%d]", sizes, idemstore.PurgeBatchSizeDefault)
			}
		})
	})
}

func TestPurgerJitter(t *testing.T) {
	t.Parallel()
	const d = 10 * time.Millisecond
	lo, hi := time.Duration(1<<62), time.Duration(0)
	for range 2000 {
		j := idem.Jitter(d)
		lo, hi = min(lo, j), max(hi, j)
	}
	// 2,000 draws from [5 ms, 15 ms]: the chance that none falls below
	// 6 ms (or above 14) is 0.9^2000.
	if lo < d/2 || hi > d*3/2 || lo > 6*time.Millisecond || hi < 14*time.Millisecond {
		t.Errorf("jitter of %s drew from [%s, %s], want [5 ms, 15 ms] spread over it", d, lo, hi)
	}
}

func TestPurgerRefusesShareOutOfRange(t *testing.T) {
	t.Parallel()
	store := idemtest.NewMemoryStore()
	for _, share := range []float64{-0.1, 1.01, math.NaN()} {
		if _, err := idem.NewPurger(store, &idem.Config{Purge: idem.PurgeOpts{Share: share}}); err == nil {
			t.Errorf("NewPurger with Share %v succeeded; want an error", share)
		}
	}
	for _, share := range []float64{0, 0.01, 1} {
		if _, err := idem.NewPurger(store, &idem.Config{Purge: idem.PurgeOpts{Share: share}}); err != nil {
			t.Errorf("NewPurger with Share %v: %v", share, err)
		}
	}
}

// statsRecorder is an idem.Metrics that counts the KeyStats it gets.
type statsRecorder struct {
	purgeRecorder
	mu    sync.Mutex
	stats int
}

func (r *statsRecorder) KeyStats(context.Context, idemstore.KeyStats, time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stats++
}

func (r *statsRecorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stats
}

func TestPurgerReadsKeyStatsOnlyWhileLeading(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		store := idemtest.NewMemoryStore()
		newPurger := func(rec *statsRecorder) *idem.Purger {
			p, err := idem.NewPurger(store, &idem.Config{Metrics: rec, Logger: slog.New(slog.DiscardHandler),
				Purge: idem.PurgeOpts{Interval: time.Minute}})
			if err != nil {
				t.Fatal(err)
			}
			return p
		}
		leader, other := &statsRecorder{}, &statsRecorder{}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go newPurger(leader).Run(ctx)
		synctest.Wait()
		go newPurger(other).Run(ctx)
		synctest.Wait()
		time.Sleep(2*time.Minute + time.Second)
		synctest.Wait()
		if n := leader.count(); n != 3 {
			t.Errorf("the instance holding the purge lock reported KeyStats %d times in 3 runs, want 3", n)
		}
		if n := other.count(); n != 0 {
			t.Errorf("the instance without the purge lock reported KeyStats %d times, want 0", n)
		}
	})
}

// unlockFailing is a memory store whose purge lock fails to unlock.
type unlockFailing struct{ *idemtest.MemoryStore }

func (s unlockFailing) LockPurge(ctx context.Context) (idemstore.PurgeLock, error) {
	lock, err := s.MemoryStore.LockPurge(ctx)
	if err != nil {
		return nil, err
	}
	return failingUnlock{lock}, nil
}

type failingUnlock struct{ idemstore.PurgeLock }

func (l failingUnlock) Unlock(ctx context.Context) error {
	l.PurgeLock.Unlock(ctx)
	return errors.New("connection reset")
}

func TestPurgerLogsAFailedUnlock(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		store idemstore.PurgeStore
		warns bool
	}{
		{"Fails", unlockFailing{idemtest.NewMemoryStore()}, true},
		{"Succeeds", idemtest.NewMemoryStore(), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				logs := runPurgerOnce(t, tc.store, idem.PurgeOpts{})
				if got := strings.Contains(logs, "idem: purge: unlock"); got != tc.warns {
					t.Errorf("log has the unlock warning: %v, want %v; log:\n%s", got, tc.warns, logs)
				}
				if tc.warns && !strings.Contains(logs, "connection reset") {
					t.Errorf("the warning lacks the error:\n%s", logs)
				}
			})
		})
	}
}
