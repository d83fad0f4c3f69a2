package idem_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemfingerprint"
	"github.com/idemkit/idem/idemstore"
)

// TestResumerReleasesKeyThatPassedNoPoint: a holder that dies before its
// first phase commits leaves a started key with no recovery point. Once
// its lease expired, the resumer takes it over and releases it, which
// deletes it; the dead holder's checkpoint is fenced out then, and still
// after a retry made the key anew at token 1, the dead holder's token, and
// the client's retry runs the operation fresh. A live lease is waited for,
// and a key of an operation that the resumer does not drive is left
// alone.
func TestResumerReleasesKeyThatPassedNoPoint(t *testing.T) {
	t.Parallel()
	e := setupPhased(t, nil)
	ctx := context.Background()
	fp, err := idemfingerprint.New(idemfingerprint.Params{
		Method: http.MethodPost, Path: "/v1/payments", ContentType: "application/json", Body: []byte(`{"amount":100}`),
	})
	if err != nil {
		t.Fatal(err)
	}
	claim := func(key, path string) idemstore.Lease {
		t.Helper()
		res, err := e.store.Claim(ctx, idemstore.ClaimParams{
			Scope: idemstore.Scope{ClientID: "alice", Key: key}, Method: http.MethodPost, Path: path,
			RequestHash: fp.Hash, TwoPhase: true, Now: e.clock.Now(),
			LockTimeout: idem.LockTimeoutDefault, Retention: idem.RetentionDefault,
		})
		if err != nil || res.Lease == nil {
			t.Fatalf("Claim = %+v, %v", res, err)
		}
		return res.Lease
	}
	dead := claim("k1", "/v1/payments")
	claim("k2", "/v1/refunds")
	m := &passes{}
	c := e.resumer(t, m)

	e.clock.Advance(idem.LockTimeoutDefault - time.Second)
	if res := runOnce(t, c); res.Released+res.Completed+res.Failed+res.Skipped != 0 {
		t.Fatalf("pass while the lease lives = %+v; want the key left to its holder", res)
	}
	e.clock.Advance(time.Second)
	if res := runOnce(t, c); res.Released != 1 || res.Completed+res.Failed+res.Skipped != 0 || res.Oldest != 0 {
		t.Fatalf("pass after the lease expired = %+v; want one key released, none left unfinished", res)
	}
	if rec, found := e.point(t, "k1"); found {
		t.Fatalf("released key = %+v; want it gone", rec)
	}
	if rec, found := e.point(t, "k2"); !found || rec.Status != idemstore.StatusInFlight {
		t.Errorf("other operation's key = %+v, %v; want it left started", rec, found)
	}
	checkpoint := func() error {
		return dead.(idemstore.RecoveryLease).Checkpoint(ctx, idemstore.Recovery{Point: "created", State: idem.State{"payment_id": "pay_9"}})
	}
	if err := checkpoint(); !errors.Is(err, idemstore.ErrLeaseLost) {
		t.Errorf("dead holder's checkpoint = %v; want ErrLeaseLost", err)
	}
	retry := claim("k1", "/v1/payments")
	if info := retry.Info(); info.TakenOver || info.Token != 1 {
		t.Errorf("claim after the release = %+v; want a new key at token 1", info)
	}
	if err := checkpoint(); !errors.Is(err, idemstore.ErrLeaseLost) {
		t.Errorf("dead holder's checkpoint while a retry holds the key = %v; want ErrLeaseLost", err)
	}
	if err := retry.Release(ctx); err != nil {
		t.Fatalf("release the retry's claim: %v", err)
	}

	w := e.post(t, "k1")
	if w.Code != http.StatusCreated || w.Header().Get(idem.HeaderReplayed) == "true" {
		t.Fatalf("client's retry = %d %s; want a fresh 201", w.Code, w.Body)
	}
	if n := e.op.count(idemstore.RecoveryStarted); n != 1 {
		t.Errorf("first phase ran %d times; want 1, by the retry", n)
	}
	if res := runOnce(t, c); res.Released+res.Completed+res.Failed+res.Skipped != 0 {
		t.Errorf("pass after the retry = %+v; want nothing to do", res)
	}
	if len(m.all) != 3 || m.all[1].Released != 1 {
		t.Errorf("metrics got %+v; want three passes, the second releasing one key", m.all)
	}
}

// TestResumerReleasesOldKeyThatPassedNoPoint: a key of a listed
// operation created long before the recent range that a pass lists (two
// hours, with a one-minute interval), whose holder is gone, as after an
// outage, is released by the resumer's sweep within a bounded number of
// passes, and no listing of a pass reads more than a bounded span of
// creation times.
func TestResumerReleasesOldKeyThatPassedNoPoint(t *testing.T) {
	t.Parallel()
	e := setupPhased(t, nil)
	res, err := e.store.Claim(context.Background(), idemstore.ClaimParams{
		Scope: idemstore.Scope{ClientID: "alice", Key: "k-old"}, Method: http.MethodPost, Path: "/v1/payments",
		RequestHash: []byte("h"), TwoPhase: true, Now: e.clock.Now(),
		LockTimeout: idem.LockTimeoutDefault, Retention: idem.RetentionDefault,
	})
	if err != nil || res.Lease == nil {
		t.Fatalf("Claim = %+v, %v", res, err)
	}
	e.clock.Advance(2 * time.Hour)
	spy := &listings{RecoveryStore: e.store}
	c, err := idem.NewResumer(spy, &idem.Config{Logger: quiet, Now: e.clock.Now, Resume: idem.ResumeOpts{Operations: map[string]idem.Phases{"POST /v1/payments": e.op.resume()}, Interval: time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	// A full sweep of the 24 h retention takes 360 spans of 4 minutes.
	const maxPasses = 400
	released := 0
	for pass := 1; pass <= maxPasses && released == 0; pass++ {
		released = runOnce(t, c).Released
		e.clock.Advance(time.Minute)
	}
	if released != 1 {
		t.Fatalf("after %d passes: key not released; want it released by the sweep", maxPasses)
	}
	if rec, found := e.point(t, "k-old"); found {
		t.Errorf("released key = %+v; want it gone", rec)
	}
	// Each listing reads a bounded span of creation times: the recent
	// range, or a span of the sweep.
	const bound = 5 * time.Minute
	for _, p := range spy.all {
		if p.CreatedUntil.IsZero() {
			if p.Now.Sub(p.StartedAfter) > idem.LockTimeoutDefault+3*time.Minute {
				t.Errorf("recent listing from %v at %v; want at most the lock timeout and 3 intervals", p.StartedAfter, p.Now)
			}
			continue
		}
		if from := p.Now.Add(-p.Retention); p.CreatedUntil.Sub(from) > bound {
			t.Errorf("sweep listing (%v, %v]; want a span of at most %v", from, p.CreatedUntil, bound)
		}
	}
}

// listings records the UnfinishedParams of every listing.
type listings struct {
	idemstore.RecoveryStore
	all []idemstore.UnfinishedParams
}

func (l *listings) Unfinished(ctx context.Context, p idemstore.UnfinishedParams) ([]*idemstore.Record, error) {
	l.all = append(l.all, p)
	return l.RecoveryStore.Unfinished(ctx, p)
}

// TestResumerGivesUpAfterMaxAttempts: a key whose phase fails every time
// is run MaxAttempts times, then left alone: the resumer says so once at
// Error, and counts it as given up on every pass after, for an alert. A
// new resumer (a restart, after an operator fixed the cause) finishes it.
func TestResumerGivesUpAfterMaxAttempts(t *testing.T) {
	t.Parallel()
	e := setupPhased(t, nil)
	e.op.fail["created"] = 1
	if w := e.post(t, "k1"); w.Code != http.StatusServiceUnavailable {
		t.Fatalf("first attempt = %d %s; want 503, stopped at created", w.Code, w.Body)
	}
	e.op.fail["created"] = 1000
	var logs bytes.Buffer
	m := &passes{}
	newResumer := func() *idem.Resumer {
		c, err := idem.NewResumer(e.store, &idem.Config{Metrics: metricsOf(m), Now: e.clock.Now,
			Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelError})), Resume: idem.ResumeOpts{Operations: map[string]idem.Phases{"POST /v1/payments": e.op.resume()}, MaxAttempts: 3},
		})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	c := newResumer()
	for pass := 1; pass <= 3; pass++ {
		if res := runOnce(t, c); res.Failed != 1 || res.GaveUp != 0 {
			t.Fatalf("pass %d = %+v; want the key failed", pass, res)
		}
	}
	for pass := 4; pass <= 5; pass++ {
		e.clock.Advance(time.Minute)
		if res := runOnce(t, c); res.Failed != 0 || res.GaveUp != 1 || res.Oldest == 0 {
			t.Fatalf("pass %d = %+v; want the key given up on and still unfinished", pass, res)
		}
	}
	if n := e.op.count("created"); n != 1+3 {
		t.Errorf("created ran %d times; want 4: the client's and 3 by the resumer", n)
	}
	if got := strings.Count(logs.String(), "idem: resumer gave up on a key"); got != 1 || !strings.Contains(logs.String(), "attempts=3") {
		t.Errorf("error log:\n%s\nwant one line that the resumer gave up after 3 attempts", logs.String())
	}
	if rec, found := e.point(t, "k1"); !found || rec.Status != idemstore.StatusInFlight {
		t.Errorf("key = %+v, %v; want it left started for an operator", rec, found)
	}

	e.op.fail["created"] = 0
	if res := runOnce(t, newResumer()); res.Completed != 1 {
		t.Errorf("a new resumer's pass = %+v; want the key completed", res)
	}
}
