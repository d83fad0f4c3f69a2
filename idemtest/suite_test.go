package idemtest

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemstore"
)

// waitingStore breaks the rule that the in-flight test checks: a claim of a
// key in flight waits until the holder completes or releases it, as a store
// that locks the key's row with a blocking SELECT ... FOR UPDATE would.
type waitingStore struct {
	*MemoryStore
	mu      sync.Mutex
	changed chan struct{} // closed, and replaced, whenever a lease ends
}

func newWaitingStore() *waitingStore {
	return &waitingStore{MemoryStore: NewMemoryStore(), changed: make(chan struct{})}
}

func (s *waitingStore) Claim(ctx context.Context, p idemstore.ClaimParams) (idemstore.ClaimResult, error) {
	for {
		s.mu.Lock()
		changed := s.changed
		s.mu.Unlock()
		res, err := s.MemoryStore.Claim(ctx, p)
		if err != nil || res.Record == nil || res.Record.Status != idemstore.StatusInFlight {
			if res.Lease != nil {
				res.Lease = &waitingLease{Lease: res.Lease, store: s}
			}
			return res, err
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return idemstore.ClaimResult{}, ctx.Err()
		}
	}
}

func (s *waitingStore) leaseEnded() {
	s.mu.Lock()
	defer s.mu.Unlock()
	close(s.changed)
	s.changed = make(chan struct{})
}

type waitingLease struct {
	idemstore.Lease
	store *waitingStore
}

func (l *waitingLease) Complete(ctx context.Context, resp *idemstore.Response) error {
	defer l.store.leaseEnded()
	return l.Lease.Complete(ctx, resp)
}

func (l *waitingLease) Release(ctx context.Context) error {
	defer l.store.leaseEnded()
	return l.Lease.Release(ctx)
}

// recordingTB is a testing.TB whose failures are recorded instead of
// failing the test, so that a test can check that a suite case fails.
type recordingTB struct {
	testing.TB
	mu     sync.Mutex
	failed bool
	msgs   []string
}

func (r *recordingTB) Helper() {}

func (r *recordingTB) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failed = true
	r.msgs = append(r.msgs, fmt.Sprintf(format, args...))
}

func (r *recordingTB) Error(args ...any) { r.Errorf("%s", fmt.Sprint(args...)) }

func (r *recordingTB) Fatalf(format string, args ...any) {
	r.Errorf(format, args...)
	runtime.Goexit()
}

func (r *recordingTB) Fatal(args ...any) { r.Fatalf("%s", fmt.Sprint(args...)) }

func (r *recordingTB) FailNow() {
	r.Errorf("FailNow")
	runtime.Goexit()
}

func (r *recordingTB) Fail() { r.Errorf("Fail") }

func (r *recordingTB) Failed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.failed
}

// runCase runs check against store with a recordingTB, in a goroutine of
// its own so that Fatalf can end it, and returns the recorder.
func runCase(t *testing.T, check func(testing.TB, idemstore.Store), store idemstore.Store) *recordingTB {
	t.Helper()
	r := &recordingTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		check(r, store)
	}()
	<-done
	return r
}

func TestReportsInFlightCheck(t *testing.T) {
	t.Parallel()
	for _, mode := range []idem.Mode{idem.ModeAtomic, idem.ModeTwoPhase} {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			t.Run("FailsForStoreThatWaits", func(t *testing.T) {
				t.Parallel()
				// The store never answers while the key is held, so any
				// deadline shows it; a short one keeps the test short.
				s := suite{mode: mode, inFlightDeadline: 50 * time.Millisecond}
				r := runCase(t, s.checkReportsInFlight, newWaitingStore())
				if !r.Failed() {
					t.Fatal("the in-flight check passed for a store that waits for the holder")
				}
				t.Logf("the check reported: %q", r.msgs)
			})
			t.Run("PassesForStoreThatAnswersAtOnce", func(t *testing.T) {
				t.Parallel()
				s := suite{mode: mode}
				if r := runCase(t, s.checkReportsInFlight, NewMemoryStore()); r.Failed() {
					t.Fatalf("the in-flight check failed for the memory store: %q", r.msgs)
				}
			})
			t.Run("WaitingStoreIsOtherwiseCorrect", func(t *testing.T) {
				t.Parallel()
				// The wrapper's claim does answer once the holder lets go:
				// it fails the check only by waiting.
				store := newWaitingStore()
				s := suite{mode: mode}
				scope := newScope("alice")
				l := s.mustLease(t, store, s.params(scope, "a", epoch))
				answered := make(chan idemstore.ClaimResult, 1)
				go func() {
					res, _ := store.Claim(context.Background(), s.params(scope, "a", epoch.Add(time.Second)))
					answered <- res
				}()
				complete(t, l, sampleResponse("{}"))
				res := <-answered
				if res.Record == nil || res.Record.Status != idemstore.StatusCompleted {
					t.Fatalf("the waiting claim returned %+v; want the completed record", res)
				}
			})
		})
	}
}
