package idem_test

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemfingerprint"
	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/idemtest"
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

// logRecords is a slog.Handler that keeps every record, for tests of what
// is logged and at which level.
type logRecords struct {
	mu  sync.Mutex
	all []slog.Record
}

func (l *logRecords) Enabled(context.Context, slog.Level) bool { return true }

func (l *logRecords) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.all = append(l.all, r.Clone())
	return nil
}

func (l *logRecords) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logRecords) WithGroup(string) slog.Handler      { return l }

// find returns the records logged at level with msg, each as its own
// attributes (not those of Logger.With).
func (l *logRecords) find(level slog.Level, msg string) []map[string]string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]string
	for _, r := range l.all {
		if r.Level != level || r.Message != msg {
			continue
		}
		attrs := map[string]string{}
		r.Attrs(func(a slog.Attr) bool {
			attrs[a.Key] = a.Value.String()
			return true
		})
		out = append(out, attrs)
	}
	return out
}

// signalLister says on calls when a pass lists unfinished keys, then
// lists them, fails with err, or (block) waits for the listing's context
// to end and fails with its error.
type signalLister struct {
	idemstore.RecoveryStore
	calls chan struct{}
	err   error
	block bool
}

func (s *signalLister) Unfinished(ctx context.Context, p idemstore.UnfinishedParams) ([]*idemstore.Record, error) {
	select {
	case s.calls <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	switch {
	case s.block:
		<-ctx.Done()
		return nil, ctx.Err()
	case s.err != nil:
		return nil, s.err
	}
	return s.RecoveryStore.Unfinished(ctx, p)
}

// TestResumerRunLogsFailedPasses: Run logs a pass that failed at Error
// and goes on; it logs no pass that worked, nor one that failed because
// Run was being stopped.
func TestResumerRunLogsFailedPasses(t *testing.T) {
	t.Parallel()
	errListing := errors.New("the listing failed")
	for name, tc := range map[string]struct {
		lister     *signalLister
		listings   int // listings to wait for before Run is stopped
		wantLogged bool
	}{
		"ListingFails":        {&signalLister{err: errListing}, 2, true},
		"ListingWorks":        {&signalLister{}, 2, false},
		"StoppedWhileListing": {&signalLister{block: true}, 1, false},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			store := tc.lister
			store.RecoveryStore, store.calls = idemtest.NewMemoryStore(), make(chan struct{})
			logs := &logRecords{}
			// A 1 ms interval: the second listing is of the second pass, so
			// the first pass's log is written by then.
			c, err := idem.NewResumer(store, &idem.Config{Logger: slog.New(logs), Resume: idem.ResumeOpts{
				Operations: map[string]idem.Phases{"POST /v1/payments": newPhased().resume()}, Interval: time.Millisecond}})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- c.Run(ctx) }()
			for i := 1; i <= tc.listings; i++ {
				select {
				case <-store.calls:
				case <-time.After(10 * time.Second):
					cancel()
					t.Fatalf("listing %d of Run not made within 10 s", i)
				}
			}
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Run = %v after cancel; want nil", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("Run did not return within 10 s of its cancel")
			}
			failed := logs.find(slog.LevelError, "idem: resumer pass failed")
			if tc.wantLogged && len(failed) == 0 {
				t.Error("no pass logged at Error; want the first pass's failure")
			}
			if !tc.wantLogged && len(failed) != 0 {
				t.Errorf("logged at Error: %v; want no pass failure", failed)
			}
			for _, f := range failed {
				if !strings.Contains(f["err"], errListing.Error()) {
					t.Errorf("pass failure logged with err=%q; want the listing's error", f["err"])
				}
			}
		})
	}
}

// TestResumerLogsPassesThatDidSomething: a pass that completed, released
// or failed a key says so at Info, with its counts; a pass that did
// nothing, or only found a key it gave up on, logs nothing.
func TestResumerLogsPassesThatDidSomething(t *testing.T) {
	t.Parallel()
	e := setupPhased(t, nil)
	logs := &logRecords{}
	c, err := idem.NewResumer(e.store, &idem.Config{Logger: slog.New(logs), Now: e.clock.Now,
		Resume: idem.ResumeOpts{Operations: map[string]idem.Phases{"POST /v1/payments": e.op.resume()}, MaxAttempts: 1}})
	if err != nil {
		t.Fatal(err)
	}
	logged := 0
	pass := func(step string, want idem.ResumerResult, wantLog map[string]string) {
		t.Helper()
		if res := runOnce(t, c); res.Completed != want.Completed || res.Released != want.Released || res.Failed != want.Failed || res.GaveUp != want.GaveUp {
			t.Fatalf("%s: pass = %+v; want %+v", step, res, want)
		}
		all := logs.find(slog.LevelInfo, "idem: resumer pass")
		switch {
		case wantLog == nil && len(all) != logged:
			t.Errorf("%s: logged %v at Info; want nothing", step, all[logged:])
		case wantLog != nil && len(all) != logged+1:
			t.Errorf("%s: logged %v at Info; want one line %v", step, all[logged:], wantLog)
		case wantLog != nil:
			for k, v := range wantLog {
				if all[logged][k] != v {
					t.Errorf("%s: logged %v; want %s=%s", step, all[logged], k, v)
				}
			}
		}
		logged = len(all)
	}
	pass("NothingToDo", idem.ResumerResult{}, nil)

	e.op.crash = "created"
	e.post(t, "k1")
	e.op.crash = ""
	pass("Completed", idem.ResumerResult{Completed: 1}, map[string]string{"completed": "1", "released": "0", "failed": "0"})

	e.clock.Advance(time.Second)
	e.op.fail["created"] = 2 // the client's run and the resumer's
	if w := e.post(t, "k2"); w.Code != http.StatusServiceUnavailable {
		t.Fatalf("k2 = %d %s; want 503, stopped at created", w.Code, w.Body)
	}
	pass("Failed", idem.ResumerResult{Failed: 1}, map[string]string{"completed": "0", "released": "0", "failed": "1"})
	pass("GaveUpOnly", idem.ResumerResult{GaveUp: 1}, nil)

	e.clock.Advance(time.Second)
	if _, err := e.store.Claim(context.Background(), idemstore.ClaimParams{
		Scope: idemstore.Scope{ClientID: "alice", Key: "k3"}, Method: http.MethodPost, Path: "/v1/payments",
		RequestHash: []byte("h"), TwoPhase: true, Now: e.clock.Now(), LockTimeout: idem.LockTimeoutDefault, Retention: idem.RetentionDefault,
	}); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(idem.LockTimeoutDefault)
	pass("Released", idem.ResumerResult{Released: 1, GaveUp: 1}, map[string]string{"completed": "0", "released": "1", "failed": "0", "gave_up": "1"})
}

// TestResumerKeysGivenUpOnLeaveRoomForOthers: a key given up on stays
// unfinished and listed, yet does not take the place of another key: each
// pass still runs BatchSize other keys.
func TestResumerKeysGivenUpOnLeaveRoomForOthers(t *testing.T) {
	t.Parallel()
	e := setupPhased(t, nil)
	e.op.fail["created"] = 2 // the client's run and the resumer's
	if w := e.post(t, "k-given-up"); w.Code != http.StatusServiceUnavailable {
		t.Fatalf("first key = %d %s; want 503, stopped at created", w.Code, w.Body)
	}
	c, err := idem.NewResumer(e.store, &idem.Config{Logger: quiet, Now: e.clock.Now,
		Resume: idem.ResumeOpts{Operations: map[string]idem.Phases{"POST /v1/payments": e.op.resume()}, BatchSize: 1, MaxAttempts: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if res := runOnce(t, c); res.Failed != 1 {
		t.Fatalf("first pass = %+v; want the key failed, and given up on", res)
	}
	e.op.crash = "created"
	for _, k := range []string{"k2", "k3"} {
		e.clock.Advance(time.Second)
		e.post(t, k)
	}
	e.op.crash = ""
	for pass, key := range []string{"k2", "k3"} {
		if res := runOnce(t, c); res.Completed != 1 || res.GaveUp != 1 || res.Failed+res.Released+res.Skipped != 0 {
			t.Fatalf("pass %d = %+v; want %s completed (BatchSize 1) and the key given up on counted", pass+2, res, key)
		}
		if rec, _ := e.point(t, key); rec.Status != idemstore.StatusCompleted {
			t.Fatalf("after pass %d: %s is %q; want it completed", pass+2, key, rec.Status)
		}
	}
	if rec, _ := e.point(t, "k-given-up"); rec.Status != idemstore.StatusInFlight {
		t.Errorf("key given up on is %q; want it left started", rec.Status)
	}
}

// TestResumerListingRanges: the two listings of a pass, as the Resumer's
// documentation gives them: the recent keys, created within three
// intervals (a minute at least) before the lock timeout; and the sweep,
// from the start of Retention, a span of a 360th of Retention or the
// recent range if longer, the next pass's span starting where this one
// ended.
func TestResumerListingRanges(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		interval, retention time.Duration
		window, span        time.Duration
	}{
		"Defaults":      {0, 0, time.Minute, 4 * time.Minute},
		"LongInterval":  {time.Hour, 0, 3 * time.Hour, 3 * time.Hour},
		"LongRetention": {30 * time.Second, 48 * time.Hour, 90 * time.Second, 8 * time.Minute},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := setupPhased(t, nil)
			spy := &listings{RecoveryStore: e.store}
			c, err := idem.NewResumer(spy, &idem.Config{Logger: quiet, Now: e.clock.Now, Retention: tc.retention,
				Resume: idem.ResumeOpts{Operations: map[string]idem.Phases{"POST /v1/payments": e.op.resume()}, Interval: tc.interval, BatchSize: 7}})
			if err != nil {
				t.Fatal(err)
			}
			retention := cmp.Or(tc.retention, idem.RetentionDefault)
			start := e.clock.Now().Add(-retention)
			for pass := 1; pass <= 2; pass++ {
				runOnce(t, c)
				now := e.clock.Now()
				if len(spy.all) != 2*pass {
					t.Fatalf("pass %d: %d listings in all; want two a pass", pass, len(spy.all))
				}
				recent, sweep := spy.all[2*pass-2], spy.all[2*pass-1]
				if want := now.Add(-idem.LockTimeoutDefault - tc.window); !recent.StartedAfter.Equal(want) || !recent.CreatedUntil.IsZero() ||
					recent.Retention != retention || recent.Limit != 7 {
					t.Errorf("pass %d: recent listing %+v; want keys started after %v, within retention %v, at most 7", pass, recent, want, retention)
				}
				if from := sweep.Now.Add(-sweep.Retention); !from.Equal(start) || !sweep.CreatedUntil.Equal(start.Add(tc.span)) ||
					!sweep.StartedAfter.IsZero() || sweep.Limit != 7 {
					t.Errorf("pass %d: sweep listing (%v, %v] %+v; want (%v, %v], at most 7", pass, from, sweep.CreatedUntil, sweep, start, start.Add(tc.span))
				}
				start = start.Add(tc.span)
				e.clock.Advance(time.Second)
			}
		})
	}
}

// TestResumerSweepMovesPastAFullListing: when the sweep's listing is full
// (BatchSize keys), the next pass's sweep starts after the newest key
// listed, not at the end of the span, so the keys of a crowded span are
// all reached one pass after another.
func TestResumerSweepMovesPastAFullListing(t *testing.T) {
	t.Parallel()
	e := setupPhased(t, nil)
	keys := []string{"k1", "k2", "k3"}
	for _, k := range keys {
		if _, err := e.store.Claim(context.Background(), idemstore.ClaimParams{
			Scope: idemstore.Scope{ClientID: "alice", Key: k}, Method: http.MethodPost, Path: "/v1/payments",
			RequestHash: []byte("h"), TwoPhase: true, Now: e.clock.Now(), LockTimeout: idem.LockTimeoutDefault, Retention: idem.RetentionDefault,
		}); err != nil {
			t.Fatal(err)
		}
		e.clock.Advance(time.Second)
	}
	// The keys are a minute from the end of retention: in the sweep's
	// first span (4 minutes from its start), long before the recent range.
	e.clock.Advance(idem.RetentionDefault - time.Minute - 3*time.Second)
	c, err := idem.NewResumer(e.store, &idem.Config{Logger: quiet, Now: e.clock.Now,
		Resume: idem.ResumeOpts{Operations: map[string]idem.Phases{"POST /v1/payments": e.op.resume()}, BatchSize: 2}})
	if err != nil {
		t.Fatal(err)
	}
	for pass, want := range [][]string{{"k1", "k2"}, {"k3"}} {
		if res := runOnce(t, c); res.Released != len(want) {
			t.Fatalf("pass %d = %+v; want %v released", pass+1, res, want)
		}
		for _, k := range want {
			if rec, found := e.point(t, k); found {
				t.Fatalf("after pass %d: %s = %+v; want it released, gone", pass+1, k, rec)
			}
		}
		e.clock.Advance(idem.ResumeIntervalDefault)
	}
}

// unreleasable hands out leases whose Release fails.
type unreleasable struct{ idemstore.RecoveryStore }

var errRelease = errors.New("the release failed")

func (s unreleasable) Claim(ctx context.Context, p idemstore.ClaimParams) (idemstore.ClaimResult, error) {
	res, err := s.RecoveryStore.Claim(ctx, p)
	if res.Lease != nil {
		res.Lease = failingRelease{res.Lease.(idemstore.RecoveryLease)}
	}
	return res, err
}

type failingRelease struct{ idemstore.RecoveryLease }

func (failingRelease) Release(context.Context) error { return errRelease }

// TestResumerLogsAFailedRelease: a run of a key's phases that fails
// releases the key; a release that fails is logged at Warn (the key is
// free when its lease expires), one that works is not.
func TestResumerLogsAFailedRelease(t *testing.T) {
	t.Parallel()
	for name, releaseFails := range map[string]bool{"ReleaseWorks": false, "ReleaseFails": true} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := setupPhased(t, nil)
			e.op.fail["created"] = 2 // the client's run and the resumer's
			if w := e.post(t, "k1"); w.Code != http.StatusServiceUnavailable {
				t.Fatalf("k1 = %d %s; want 503, stopped at created", w.Code, w.Body)
			}
			var store idemstore.RecoveryStore = e.store
			if releaseFails {
				store = unreleasable{e.store}
			}
			logs := &logRecords{}
			c, err := idem.NewResumer(store, &idem.Config{Logger: slog.New(logs), Now: e.clock.Now,
				Resume: idem.ResumeOpts{Operations: map[string]idem.Phases{"POST /v1/payments": e.op.resume()}}})
			if err != nil {
				t.Fatal(err)
			}
			if res := runOnce(t, c); res.Failed != 1 {
				t.Fatalf("pass = %+v; want the key failed", res)
			}
			if n := len(logs.find(slog.LevelWarn, "idem: resumer: the operation is still unfinished")); n != 1 {
				t.Errorf("%d warnings that the operation is unfinished; want 1", n)
			}
			failed := logs.find(slog.LevelWarn, "idem: resumer: release failed; the key is free when its lease expires")
			if want := map[bool]int{false: 0, true: 1}[releaseFails]; len(failed) != want {
				t.Errorf("release failures logged: %v; want %d", failed, want)
			}
			for _, f := range failed {
				if f["err"] != errRelease.Error() {
					t.Errorf("release failure logged with err=%q; want %q", f["err"], errRelease)
				}
			}
		})
	}
}

// TestResumerSkipsKeysOfOtherOperations: a key past a recovery point is
// listed whatever its operation; one of an operation the resumer does not
// drive is counted as skipped, on every pass, and left as it is.
func TestResumerSkipsKeysOfOtherOperations(t *testing.T) {
	t.Parallel()
	e := setupPhased(t, nil)
	ctx := context.Background()
	res, err := e.store.Claim(ctx, idemstore.ClaimParams{
		Scope: idemstore.Scope{ClientID: "alice", Key: "k-refund"}, Method: http.MethodPost, Path: "/v1/refunds",
		RequestHash: []byte("h"), TwoPhase: true, Now: e.clock.Now(), LockTimeout: idem.LockTimeoutDefault, Retention: idem.RetentionDefault,
	})
	if err != nil || res.Lease == nil {
		t.Fatalf("Claim = %+v, %v", res, err)
	}
	if err := res.Lease.(idemstore.RecoveryLease).Checkpoint(ctx, idemstore.Recovery{Point: "refunded"}); err != nil {
		t.Fatal(err)
	}
	if err := res.Lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	c := e.resumer(t, nil)
	for pass := 1; pass <= 2; pass++ {
		if res := runOnce(t, c); res.Skipped != 1 || res.Completed+res.Released+res.Failed+res.GaveUp != 0 {
			t.Fatalf("pass %d = %+v; want the other operation's key skipped", pass, res)
		}
	}
	if rec, found := e.point(t, "k-refund"); !found || rec.Status != idemstore.StatusInFlight {
		t.Errorf("other operation's key = %+v, %v; want it left started", rec, found)
	}
}
