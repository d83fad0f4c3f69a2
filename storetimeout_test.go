package idem_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/idemtest"
)

// stallingStore is the memory store that never answers the call named
// by stall ("Claim", or its leases' "Complete", "Release" or
// "Checkpoint"): the call waits until its context ends, notes how long
// that took, and returns the context's error, as a store whose database
// stopped answering does.
type stallingStore struct {
	*idemtest.MemoryStore
	stall  string
	waited time.Duration
}

func (s *stallingStore) Claim(ctx context.Context, p idemstore.ClaimParams) (idemstore.ClaimResult, error) {
	if s.stall == "Claim" {
		return idemstore.ClaimResult{}, s.wait(ctx)
	}
	res, err := s.MemoryStore.Claim(ctx, p)
	if res.Lease != nil {
		res.Lease = &stallingLease{RecoveryLease: res.Lease.(idemstore.RecoveryLease), store: s}
	}
	return res, err
}

func (s *stallingStore) wait(ctx context.Context) error {
	start := time.Now()
	<-ctx.Done()
	s.waited = time.Since(start)
	return ctx.Err()
}

type stallingLease struct {
	idemstore.RecoveryLease
	store *stallingStore
}

func (l *stallingLease) Complete(ctx context.Context, resp *idemstore.Response) error {
	if l.store.stall == "Complete" {
		return l.store.wait(ctx)
	}
	return l.RecoveryLease.Complete(ctx, resp)
}

func (l *stallingLease) Checkpoint(ctx context.Context, r idemstore.Recovery) error {
	if l.store.stall == "Checkpoint" {
		return l.store.wait(ctx)
	}
	return l.RecoveryLease.Checkpoint(ctx, r)
}

func (l *stallingLease) Release(ctx context.Context) error {
	if l.store.stall == "Release" {
		return l.store.wait(ctx)
	}
	return l.RecoveryLease.Release(ctx)
}

// TestResumerStoreTimeoutBoundsFinish: the calls that end a resumed key's
// lease, storing the response or releasing the key, are store calls like
// any other: a store that never answers them holds the resumer's pass for
// Config.StoreTimeout, not for ever, and the key counts as failed. (The
// finishing calls once ran on a context without a deadline: the pass then
// hung, which synctest reports as every goroutine blocked.)
func TestResumerStoreTimeoutBoundsFinish(t *testing.T) {
	t.Parallel()
	const timeout = 3 * time.Second
	for _, tt := range []struct {
		stall  string
		failAt string // the phase that fails, so that the resumer releases
	}{
		{stall: "Complete"},
		{stall: "Release", failAt: "charged"},
	} {
		t.Run("Stalled"+tt.stall, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				e := setupPhased(t, nil)
				// The handler panics in the middle of "created": the key
				// stays at "created", released, for the resumer to finish.
				e.op.crash = "created"
				e.post(t, "k1")
				e.op.crash = ""
				if tt.failAt != "" {
					e.op.fail[tt.failAt] = 1
				}
				store := &stallingStore{MemoryStore: e.store, stall: tt.stall}
				c, err := idem.NewResumer(store, &idem.Config{
					Logger: quiet, Now: e.clock.Now, StoreTimeout: timeout,
					Resume: idem.ResumeOpts{Operations: map[string]idem.Phases{"POST /v1/payments": e.op.resume()}},
				})
				if err != nil {
					t.Fatal(err)
				}
				res, err := c.RunOnce(context.Background())
				if err != nil && !errors.Is(err, context.DeadlineExceeded) {
					t.Fatalf("RunOnce: %v", err)
				}
				if res.Completed != 0 || res.Failed != 1 {
					t.Errorf("pass = %+v; want the key failed, not completed", res)
				}
				if store.waited != timeout {
					t.Errorf("the stalled %s waited %s, want StoreTimeout (%s)", tt.stall, store.waited, timeout)
				}
			})
		})
	}
}

// TestPhasesStoreTimeoutBoundsCheckpoint: a checkpoint that the store
// never answers ends at Config.StoreTimeout, and the client gets the 503
// that says the operation is unfinished, to retry with the same key.
func TestPhasesStoreTimeoutBoundsCheckpoint(t *testing.T) {
	t.Parallel()
	const timeout = 3 * time.Second
	synctest.Test(t, func(t *testing.T) {
		e := setupPhased(t, nil)
		store := &stallingStore{MemoryStore: e.store, stall: "Checkpoint"}
		mw, err := idem.New(store, &idem.Config{
			ClientID: func(*http.Request) (string, bool) { return "alice", true },
			Mode:     idem.ModeTwoPhase, Logger: quiet, Now: e.clock.Now, StoreTimeout: timeout,
		})
		if err != nil {
			t.Fatal(err)
		}
		h := mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_ = e.op.all("pay_1").Run(r.Context(), w)
		}))
		r := httptest.NewRequest(http.MethodPost, "/v1/payments", strings.NewReader(`{"amount":100}`))
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set(idem.HeaderKey, "k1")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != http.StatusServiceUnavailable || !strings.Contains(w.Body.String(), "operation-unfinished") {
			t.Errorf("answer = %d %s; want 503 operation-unfinished", w.Code, w.Body)
		}
		if store.waited != timeout {
			t.Errorf("the stalled Checkpoint waited %s, want StoreTimeout (%s)", store.waited, timeout)
		}
	})
}

// TestStoreTimeoutBoundsStoreCalls: a claim, and the call that stores the
// response, that the store never answers end at Config.StoreTimeout, and
// the client gets a 503.
func TestStoreTimeoutBoundsStoreCalls(t *testing.T) {
	t.Parallel()
	const timeout = 3 * time.Second
	for _, stall := range []string{"Claim", "Complete"} {
		t.Run("Stalled"+stall, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				store := &stallingStore{MemoryStore: idemtest.NewMemoryStore(), stall: stall}
				mw, err := idem.New(store, &idem.Config{
					StoreTimeout: timeout,
					ClientID:     func(*http.Request) (string, bool) { return "alice", true },
					Logger:       slog.New(slog.NewTextHandler(io.Discard, nil)),
				})
				if err != nil {
					t.Fatalf("idem.New: %v", err)
				}
				h := mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					w.WriteHeader(http.StatusCreated)
				}))
				req := httptest.NewRequest(http.MethodPost, "/v1/payments", strings.NewReader(payment))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set(idem.HeaderKey, "k-stall")
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, req)
				if rec.Code != http.StatusServiceUnavailable {
					t.Errorf("status = %d, want 503", rec.Code)
				}
				if store.waited != timeout {
					t.Errorf("the stalled %s waited %s, want StoreTimeout (%s)", stall, store.waited, timeout)
				}
			})
		})
	}
}
