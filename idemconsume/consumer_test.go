package idemconsume_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemconsume"
	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/idemtest"
)

var quiet = slog.New(slog.DiscardHandler)

const transfer = `{"from":"alice","to":"bob","amount":100}`

func setup(t *testing.T, name string, h idemconsume.Handler, mode idem.Mode) *idemconsume.Consumer {
	t.Helper()
	c, err := idemconsume.New(idemtest.NewMemoryStore(), h, &idemconsume.Config{
		Name: name, Idem: &idem.Config{Logger: quiet, Mode: mode, LockTimeout: 5 * time.Second},
	})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func msg(id, body string) *idemconsume.Message {
	return &idemconsume.Message{ID: id, Body: []byte(body)}
}

func want(t *testing.T, r idemconsume.Result, o idemconsume.Outcome, a idemconsume.Action) {
	t.Helper()
	if r.Outcome != o || r.Action != a {
		t.Fatalf("result %+v, want %s/%s", r, o, a)
	}
}

func TestHandle(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("RunsOnceAndAcksDuplicates", func(t *testing.T) {
		t.Parallel()
		var runs atomic.Int32
		c := setup(t, "ledger", func(ctx context.Context, m *idemconsume.Message) error {
			runs.Add(1)
			if string(m.Body) != transfer {
				t.Errorf("body %q", m.Body)
			}
			if s, ok := idem.ScopeFromContext(ctx); !ok || s.ClientID != "ledger" || s.Key != "m-1" {
				t.Errorf("scope %+v %v", s, ok)
			}
			return nil
		}, idem.ModeAtomic)
		want(t, c.Handle(ctx, msg("m-1", transfer)), idemconsume.OutcomeExecuted, idemconsume.Ack)
		want(t, c.Handle(ctx, msg("m-1", transfer)), idemconsume.OutcomeDuplicate, idemconsume.Ack)
		if n := runs.Load(); n != 1 {
			t.Fatalf("handler ran %d times, want 1", n)
		}
	})

	t.Run("FailedHandlerRunsAgainOnRedelivery", func(t *testing.T) {
		t.Parallel()
		var runs atomic.Int32
		boom := errors.New("boom")
		c := setup(t, "ledger", func(context.Context, *idemconsume.Message) error {
			if runs.Add(1) == 1 {
				return boom
			}
			return nil
		}, idem.ModeAtomic)
		r := c.Handle(ctx, msg("m-1", transfer))
		want(t, r, idemconsume.OutcomeFailed, idemconsume.Nak)
		if !errors.Is(r.Err, boom) || r.Delay != idemconsume.RetryDelayDefault {
			t.Fatalf("result %+v", r)
		}
		want(t, c.Handle(ctx, msg("m-1", transfer)), idemconsume.OutcomeExecuted, idemconsume.Ack)
		if n := runs.Load(); n != 2 {
			t.Fatalf("handler ran %d times, want 2", n)
		}
	})

	t.Run("PanicReleasesTheKey", func(t *testing.T) {
		t.Parallel()
		var runs atomic.Int32
		c := setup(t, "ledger", func(context.Context, *idemconsume.Message) error {
			if runs.Add(1) == 1 {
				panic("boom")
			}
			return nil
		}, idem.ModeAtomic)
		want(t, c.Handle(ctx, msg("m-1", transfer)), idemconsume.OutcomeFailed, idemconsume.Nak)
		want(t, c.Handle(ctx, msg("m-1", transfer)), idemconsume.OutcomeExecuted, idemconsume.Ack)
	})

	t.Run("ChangedPayloadIsDeadLetteredWithFields", func(t *testing.T) {
		t.Parallel()
		var runs atomic.Int32
		c := setup(t, "ledger", func(context.Context, *idemconsume.Message) error { runs.Add(1); return nil }, idem.ModeAtomic)
		want(t, c.Handle(ctx, msg("m-1", transfer)), idemconsume.OutcomeExecuted, idemconsume.Ack)
		r := c.Handle(ctx, msg("m-1", `{"from":"alice","to":"bob","amount":900}`))
		want(t, r, idemconsume.OutcomeMismatch, idemconsume.DeadLetter)
		if !slices.Equal(r.Fields, []string{"/amount"}) || r.Reason == "" {
			t.Fatalf("result %+v", r)
		}
		if n := runs.Load(); n != 1 {
			t.Fatalf("handler ran %d times, want 1", n)
		}
	})

	t.Run("TwoConsumersEachRunOnce", func(t *testing.T) {
		t.Parallel()
		store := idemtest.NewMemoryStore()
		var runs [2]atomic.Int32
		var cs [2]*idemconsume.Consumer
		for i, name := range []string{"ledger", "notifier"} {
			c, err := idemconsume.New(store, func(context.Context, *idemconsume.Message) error { runs[i].Add(1); return nil },
				&idemconsume.Config{Name: name, Idem: &idem.Config{Logger: quiet}})
			if err != nil {
				t.Fatal(err)
			}
			cs[i] = c
		}
		for range 2 {
			for _, c := range cs {
				c.Handle(ctx, msg("m-1", transfer))
			}
		}
		if runs[0].Load() != 1 || runs[1].Load() != 1 {
			t.Fatalf("runs %d and %d, want 1 each", runs[0].Load(), runs[1].Load())
		}
	})

	t.Run("RejectionIsRecordedAndDeadLettered", func(t *testing.T) {
		t.Parallel()
		var runs atomic.Int32
		c := setup(t, "ledger", func(context.Context, *idemconsume.Message) error {
			runs.Add(1)
			return idemconsume.Reject("unknown account")
		}, idem.ModeAtomic)
		for range 2 {
			r := c.Handle(ctx, msg("m-1", transfer))
			want(t, r, idemconsume.OutcomeRejected, idemconsume.DeadLetter)
			if r.Reason != "rejected: unknown account" {
				t.Fatalf("reason %q", r.Reason)
			}
		}
		if n := runs.Load(); n != 1 {
			t.Fatalf("handler ran %d times, want 1", n)
		}
	})

	t.Run("MalformedIsDeadLettered", func(t *testing.T) {
		t.Parallel()
		c := setup(t, "ledger", func(context.Context, *idemconsume.Message) error {
			t.Error("handler ran")
			return nil
		}, idem.ModeAtomic)
		want(t, c.Handle(ctx, msg("m-\x01", transfer)), idemconsume.OutcomeMalformed, idemconsume.DeadLetter)
		want(t, c.Handle(ctx, msg("", transfer)), idemconsume.OutcomeMalformed, idemconsume.DeadLetter)
		want(t, c.Handle(ctx, msg("m-2", `{"amount":`)), idemconsume.OutcomeMalformed, idemconsume.DeadLetter)
	})

	t.Run("OpaquePayloadIsComparedByBytes", func(t *testing.T) {
		t.Parallel()
		c := setup(t, "ledger", func(context.Context, *idemconsume.Message) error { return nil }, idem.ModeAtomic)
		m := &idemconsume.Message{ID: "m-1", Body: []byte{0, 1, 2}, ContentType: "application/octet-stream"}
		want(t, c.Handle(ctx, m), idemconsume.OutcomeExecuted, idemconsume.Ack)
		want(t, c.Handle(ctx, m), idemconsume.OutcomeDuplicate, idemconsume.Ack)
		m2 := &idemconsume.Message{ID: "m-1", Body: []byte{0, 1, 3}, ContentType: "application/octet-stream"}
		want(t, c.Handle(ctx, m2), idemconsume.OutcomeMismatch, idemconsume.DeadLetter)
	})

	t.Run("ConcurrentDuplicateIsNakedWithTheLease", func(t *testing.T) {
		t.Parallel()
		entered, release := make(chan struct{}), make(chan struct{})
		var runs atomic.Int32
		c := setup(t, "ledger", func(context.Context, *idemconsume.Message) error {
			runs.Add(1)
			close(entered)
			<-release
			return nil
		}, idem.ModeTwoPhase)
		var wg sync.WaitGroup
		var first idemconsume.Result
		wg.Go(func() { first = c.Handle(ctx, msg("m-1", transfer)) })
		<-entered
		r := c.Handle(ctx, msg("m-1", transfer))
		want(t, r, idemconsume.OutcomeInFlight, idemconsume.Nak)
		if r.Delay < time.Second || r.Delay > 5*time.Second {
			t.Fatalf("delay %s, want the lease's rest (at most 5s)", r.Delay)
		}
		close(release)
		wg.Wait()
		want(t, first, idemconsume.OutcomeExecuted, idemconsume.Ack)
		want(t, c.Handle(ctx, msg("m-1", transfer)), idemconsume.OutcomeDuplicate, idemconsume.Ack)
		if n := runs.Load(); n != 1 {
			t.Fatalf("handler ran %d times, want 1", n)
		}
	})

	t.Run("PhasesResumeOnRedelivery", func(t *testing.T) {
		t.Parallel()
		var charged, failed atomic.Int32
		ph := idem.Phases{
			idemstore.RecoveryStarted: func(ctx context.Context, w http.ResponseWriter, s idem.State) (string, error) {
				charged.Add(1)
				return "charged", nil
			},
			"charged": func(ctx context.Context, w http.ResponseWriter, s idem.State) (string, error) {
				if failed.Add(1) == 1 {
					return "", errors.New("downstream timed out")
				}
				w.WriteHeader(http.StatusOK)
				return idemstore.RecoveryFinished, nil
			},
		}
		c := setup(t, "ledger", func(ctx context.Context, m *idemconsume.Message) error {
			return idemconsume.RunPhases(ctx, ph)
		}, idem.ModeTwoPhase)
		want(t, c.Handle(ctx, msg("m-1", transfer)), idemconsume.OutcomeUnavailable, idemconsume.Nak)
		want(t, c.Handle(ctx, msg("m-1", transfer)), idemconsume.OutcomeExecuted, idemconsume.Ack)
		want(t, c.Handle(ctx, msg("m-1", transfer)), idemconsume.OutcomeDuplicate, idemconsume.Ack)
		if charged.Load() != 1 {
			t.Fatalf("first phase ran %d times, want 1", charged.Load())
		}
	})
}

func TestNewRefusesClientID(t *testing.T) {
	t.Parallel()
	h := func(context.Context, *idemconsume.Message) error { return nil }
	for name, cfg := range map[string]*idemconsume.Config{
		"NoName":   {},
		"ClientID": {Name: "x", Idem: &idem.Config{ClientID: func(*http.Request) (string, bool) { return "a", true }}},
		"Path":     {Name: "x", Path: "v1"},
	} {
		if _, err := idemconsume.New(idemtest.NewMemoryStore(), h, cfg); err == nil {
			t.Errorf("%s: New accepted it", name)
		}
	}
}

// A consumer that is stopping claims nothing and acks nothing.
func TestHandleAfterCancelNaks(t *testing.T) {
	t.Parallel()
	var runs atomic.Int32
	c := setup(t, "ledger", func(context.Context, *idemconsume.Message) error {
		runs.Add(1)
		return nil
	}, idem.ModeAtomic)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	want(t, c.Handle(ctx, msg("m-1", transfer)), idemconsume.OutcomeUnavailable, idemconsume.Nak)
	if runs.Load() != 0 {
		t.Fatal("the handler ran for a stopping consumer")
	}
	want(t, c.Handle(context.Background(), msg("m-1", transfer)), idemconsume.OutcomeExecuted, idemconsume.Ack)
}
