package idemsqlite_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemsqlite"
	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/idemtest"
)

// derivedCharge is a phased payment whose later phase calls a processor
// with idem.DeriveKey(ctx, "charge"), which it records; its first phase
// records the key it would derive there.
type derivedCharge struct {
	mu    sync.Mutex
	first []string // the keys derived in the first phase, per run
	later []string // the keys derived in the "created" phase, per run
	state []idem.State
	// failLater fails the next runs of the "created" phase, as a lost
	// answer from the processor does.
	failLater int
	// hold, when set, holds the next run of the "created" phase after it
	// derived its key, until it is closed; reached is told then.
	hold    chan struct{}
	reached chan struct{}
}

// errLost stands for an answer from another system that never came.
var errLost = errors.New("the processor's answer was lost")

func (d *derivedCharge) phases() idem.Phases {
	return idem.Phases{
		idemstore.RecoveryStarted: func(ctx context.Context, w http.ResponseWriter, st idem.State) (string, error) {
			d.mu.Lock()
			defer d.mu.Unlock()
			d.first = append(d.first, idem.DeriveKey(ctx, "charge"))
			st["payment_id"] = "pay_1"
			return "created", nil
		},
		"created": func(ctx context.Context, w http.ResponseWriter, st idem.State) (string, error) {
			d.mu.Lock()
			d.later = append(d.later, idem.DeriveKey(ctx, "charge"))
			d.state = append(d.state, st.Clone())
			fail := d.failLater > 0
			if fail {
				d.failLater--
			}
			hold, reached := d.hold, d.reached
			d.hold = nil
			d.mu.Unlock()
			if hold != nil {
				close(reached)
				<-hold
			}
			if fail {
				return "", errLost
			}
			w.WriteHeader(http.StatusCreated)
			return idemstore.RecoveryFinished, nil
		},
	}
}

func (d *derivedCharge) keys() (first, later []string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.first...), append([]string(nil), d.later...)
}

type derivedEnv struct {
	store idemstore.Store
	clock *idemtest.Clock
	op    *derivedCharge
	h     http.Handler
}

// setupDerived runs derivedCharge behind the middleware in two-phase
// mode, over a memory store or a SQLite one, on an injected clock.
func setupDerived(t *testing.T, storeName string) *derivedEnv {
	t.Helper()
	e := &derivedEnv{clock: idemtest.NewClock(time.Date(2026, 3, 4, 5, 6, 7, 890123456, time.UTC)), op: &derivedCharge{}}
	switch storeName {
	case "Memory":
		e.store = idemtest.NewMemoryStore()
	case "SQLite":
		s, err := idemsqlite.Open(filepath.Join(t.TempDir(), "idem.db"), &idemsqlite.Config{Logger: quiet})
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		t.Cleanup(func() { s.Close() })
		if err := s.Migrate(context.Background()); err != nil {
			t.Fatalf("Migrate: %v", err)
		}
		e.store = s
	}
	mw, err := idem.New(e.store, &idem.Config{
		ClientID: func(*http.Request) (string, bool) { return "alice", true },
		Mode:     idem.ModeTwoPhase, Logger: quiet, Now: e.clock.Now,
	})
	if err != nil {
		t.Fatal(err)
	}
	ops := e.op.phases()
	e.h = mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ops.Run(r.Context(), w) // an error is answered 503 by Run
	}))
	return e
}

// post sends a payment with key. The request ends at waitDeadline, so
// that a phase stuck waiting for the store fails the test instead of
// hanging it.
func (e *derivedEnv) post(t *testing.T, key string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitDeadline)
	defer cancel()
	r := httptest.NewRequestWithContext(ctx, http.MethodPost, "/v1/payments", strings.NewReader(`{"amount":100}`))
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set(idem.HeaderKey, key)
	w := httptest.NewRecorder()
	e.h.ServeHTTP(w, r)
	return w.Code
}

func (e *derivedEnv) mustPost(t *testing.T, key string, want int) {
	t.Helper()
	if got := e.post(t, key); got != want {
		t.Fatalf("POST with key %q = %d, want %d", key, got, want)
	}
}

// TestDeriveKeyIsUniquePerClaimOfTheKey: a later phase derives its
// downstream key from the claim of the client's key, so that a key reused
// after its retention, a new payment, is charged with a new key, which the
// processor has not seen, while every holder of one claim (the retry
// after a release, the takeover of a dead holder's lease) derives the
// first holder's key. Before, the key was derived from the client's key
// alone, and the reuse was answered with the first payment's charge.
func TestDeriveKeyIsUniquePerClaimOfTheKey(t *testing.T) {
	t.Parallel()
	for _, storeName := range []string{"Memory", "SQLite"} {
		t.Run(storeName, func(t *testing.T) {
			t.Parallel()

			t.Run("KeyReusedAfterRetentionDerivesANewKey", func(t *testing.T) {
				t.Parallel()
				e := setupDerived(t, storeName)
				e.mustPost(t, "k1", http.StatusCreated)
				e.clock.Advance(idem.RetentionDefault + time.Hour)
				e.mustPost(t, "k1", http.StatusCreated) // a new payment, not a replay
				_, later := e.op.keys()
				if len(later) != 2 || later[0] == later[1] {
					t.Fatalf("keys derived by the charge phase = %q; want two different keys, one per claim of k1", later)
				}
			})

			t.Run("RetryAfterAReleaseDerivesTheSameKey", func(t *testing.T) {
				t.Parallel()
				e := setupDerived(t, storeName)
				e.op.failLater = 1
				e.mustPost(t, "k1", http.StatusServiceUnavailable) // the processor's answer was lost
				e.clock.Advance(time.Second)
				e.mustPost(t, "k1", http.StatusCreated) // takes the released key over
				_, later := e.op.keys()
				if len(later) != 2 || later[0] != later[1] {
					t.Fatalf("keys derived by the charge phase = %q; want the first holder's key twice", later)
				}
			})

			t.Run("TakeoverOfAnExpiredLeaseDerivesTheSameKey", func(t *testing.T) {
				t.Parallel()
				e := setupDerived(t, storeName)
				hold := make(chan struct{})
				e.op.hold, e.op.reached = hold, make(chan struct{})
				done := make(chan int, 1)
				go func() { done <- e.post(t, "k1") }()
				// The first holder derives its key and stalls.
				select {
				case <-e.op.reached:
				case code := <-done:
					t.Fatalf("the first request answered %d before its charge phase ran", code)
				case <-time.After(waitDeadline):
					t.Fatalf("waited %v for the first request to reach its charge phase", waitDeadline)
				}
				e.clock.Advance(idem.LockTimeoutDefault + time.Second)
				e.mustPost(t, "k1", http.StatusCreated) // takes the expired lease over
				close(hold)
				if code := recvWithin(t, done, "the stalled holder's answer"); code == http.StatusCreated {
					t.Errorf("the stalled holder answered 201 after the takeover")
				}
				_, later := e.op.keys()
				if len(later) != 2 || later[0] != later[1] {
					t.Fatalf("keys derived by the charge phase = %q; want the first holder's key twice", later)
				}
			})

			t.Run("FirstPhaseDerivesFromTheClientsKey", func(t *testing.T) {
				t.Parallel()
				// The first phase's claim does not outlive a release (its key
				// passed no recovery point), so its key is the client's key's,
				// the same for the retry that makes the claim anew.
				e := setupDerived(t, storeName)
				e.mustPost(t, "k1", http.StatusCreated)
				e.clock.Advance(idem.RetentionDefault + time.Hour)
				e.mustPost(t, "k1", http.StatusCreated)
				want := idem.DeriveKey(idem.ContextWithScope(context.Background(), idemstore.Scope{ClientID: "alice", Key: "k1"}), "charge")
				first, later := e.op.keys()
				if len(first) != 2 || first[0] != want || first[1] != want {
					t.Errorf("keys derived by the first phase = %q; want %q twice", first, want)
				}
				if later[0] == want {
					t.Errorf("the charge phase derived the client's key's key %q; want the claim's", want)
				}
				for _, st := range e.op.state {
					if _, ok := st["idem.claim_created"]; ok {
						t.Errorf("a phase saw the library's state entry: %v", st)
					}
				}
			})
		})
	}
}

// TestRecoveryPointOfAnEarlierVersionDerivesItsKey: an operation whose
// first recovery point a version that derived keys from the client's key
// alone saved (its state has no "idem.claim_created") is resumed, after
// the upgrade, with the keys it used: its charge may have reached the
// processor with one of them.
func TestRecoveryPointOfAnEarlierVersionDerivesItsKey(t *testing.T) {
	t.Parallel()
	for _, storeName := range []string{"Memory", "SQLite"} {
		t.Run(storeName, func(t *testing.T) {
			t.Parallel()
			e := setupDerived(t, storeName)
			// The earlier version's holder claimed the key and passed its first
			// recovery point, then died.
			ctx := context.Background()
			scope := idemstore.Scope{ClientID: "alice", Key: "k-old"}
			res, err := e.store.Claim(ctx, idemstore.ClaimParams{
				Scope: scope, Method: http.MethodPost, Path: "/v1/payments", RequestHash: []byte("fp"),
				TwoPhase: true, Now: e.clock.Now(), LockTimeout: idem.LockTimeoutDefault, Retention: idem.RetentionDefault,
			})
			if err != nil || res.Lease == nil {
				t.Fatalf("Claim = %+v, %v", res, err)
			}
			lease := res.Lease.(idemstore.RecoveryLease)
			if err := lease.Checkpoint(ctx, idemstore.Recovery{Point: "created", State: idem.State{"payment_id": "pay_1"}}); err != nil {
				t.Fatal(err)
			}
			e.clock.Advance(idem.LockTimeoutDefault + time.Second)
			c, err := idem.NewResumer(e.store.(idemstore.RecoveryStore), &idem.Config{
				Logger: quiet, Now: e.clock.Now, Resume: idem.ResumeOpts{Operations: map[string]idem.Phases{"POST /v1/payments": e.op.phases()}},
			})
			if err != nil {
				t.Fatal(err)
			}
			if res, err := c.RunOnce(ctx); err != nil || res.Completed != 1 {
				t.Fatalf("RunOnce = %+v, %v; want the key completed", res, err)
			}
			want := idem.DeriveKey(idem.ContextWithScope(ctx, scope), "charge")
			if _, later := e.op.keys(); len(later) != 1 || later[0] != want {
				t.Errorf("the resumed charge phase derived %q; want the earlier version's key %q", later, want)
			}
		})
	}
}
