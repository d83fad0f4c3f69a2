package idem_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/idemtest"
)

// errLost stands for an answer from another system that never came.
var errLost = errors.New("the processor's answer was lost")

// phased is a three-phase operation over the memory store, which counts
// how often each phase ran and can be told to fail a phase.
type phased struct {
	mu   sync.Mutex
	runs map[string]int
	fail map[string]int // phase -> how many more runs fail
	// crash, when set, panics in the phase after its run, as a process
	// that dies there would stop.
	crash string
}

func newPhased() *phased {
	return &phased{runs: map[string]int{}, fail: map[string]int{}}
}

func (o *phased) ran(point string) (fail, crash bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.runs[point]++
	if o.fail[point] > 0 {
		o.fail[point]--
		return true, false
	}
	return false, o.crash == point
}

func (o *phased) count(point string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.runs[point]
}

// resume returns the phases after RecoveryStarted, as a resumer runs them.
func (o *phased) resume() idem.Phases {
	return idem.Phases{
		"created": func(ctx context.Context, w http.ResponseWriter, st idem.State) (string, error) {
			if fail, crash := o.ran("created"); fail {
				return "", errLost
			} else if crash {
				panic("crash after created")
			}
			st["charge_id"] = "ch_" + st["payment_id"]
			return "charged", nil
		},
		"charged": func(ctx context.Context, w http.ResponseWriter, st idem.State) (string, error) {
			if fail, _ := o.ran("charged"); fail {
				return "", errLost
			}
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusCreated)
			json.NewEncoder(w).Encode(map[string]string{"id": st["payment_id"], "charge": st["charge_id"]})
			return idemstore.RecoveryFinished, nil
		},
	}
}

// all returns every phase, the first from the request.
func (o *phased) all(id string) idem.Phases {
	ph := o.resume()
	ph[idemstore.RecoveryStarted] = func(ctx context.Context, w http.ResponseWriter, st idem.State) (string, error) {
		if fail, _ := o.ran(idemstore.RecoveryStarted); fail {
			return "", errLost
		}
		st["payment_id"] = id
		return "created", nil
	}
	return ph
}

type phasedEnv struct {
	store *idemtest.MemoryStore
	op    *phased
	clock *idemtest.Clock
	h     http.Handler
	cfg   idem.Config
}

func setupPhased(t *testing.T, policy idem.OutcomePolicy) *phasedEnv {
	t.Helper()
	e := &phasedEnv{store: idemtest.NewMemoryStore(), op: newPhased(), clock: idemtest.NewClock(time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC))}
	e.cfg = idem.Config{
		ClientID: func(*http.Request) (string, bool) { return "alice", true },
		Mode:     idem.ModeTwoPhase, Outcome: policy, Logger: quiet, Now: e.clock.Now,
	}
	mw, err := idem.New(e.store, &e.cfg)
	if err != nil {
		t.Fatal(err)
	}
	e.h = mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := e.op.all("pay_1").Run(r.Context(), w); err != nil {
			return // Run answered 503
		}
	}))
	return e
}

func (e *phasedEnv) post(t *testing.T, key string) *httptest.ResponseRecorder {
	t.Helper()
	r := httptest.NewRequest(http.MethodPost, "/v1/payments", strings.NewReader(`{"amount":100}`))
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set(idem.HeaderKey, key)
	w := httptest.NewRecorder()
	func() {
		defer func() { recover() }() // a crash in a phase ends the request
		e.h.ServeHTTP(w, r)
	}()
	return w
}

func (e *phasedEnv) point(t *testing.T, key string) (idemstore.Record, bool) {
	t.Helper()
	return e.store.Get(idemstore.Scope{ClientID: "alice", Key: key})
}

func TestPhasesRunEachPhaseOnce(t *testing.T) {
	t.Parallel()
	e := setupPhased(t, nil)
	w := e.post(t, "k1")
	if w.Code != http.StatusCreated || !strings.Contains(w.Body.String(), `"charge":"ch_pay_1"`) {
		t.Fatalf("first answer = %d %s; want 201 with the charge saved by an earlier phase", w.Code, w.Body)
	}
	replay := e.post(t, "k1")
	if replay.Code != http.StatusCreated || replay.Body.String() != w.Body.String() || replay.Header().Get(idem.HeaderReplayed) != "true" {
		t.Errorf("retry = %d %q; want the replay of %q", replay.Code, replay.Body, w.Body)
	}
	for _, p := range []string{idemstore.RecoveryStarted, "created", "charged"} {
		if n := e.op.count(p); n != 1 {
			t.Errorf("phase %q ran %d times; want 1", p, n)
		}
	}
}

func TestUnfinishedPhaseAnswers503AndTheRetryResumes(t *testing.T) {
	t.Parallel()
	for name, policy := range map[string]idem.OutcomePolicy{
		"DefaultPolicy":        idem.DefaultOutcomePolicy,
		"StoreServerErrorsToo": idem.StoreServerErrorsPolicy,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := setupPhased(t, policy)
			e.op.fail["charged"] = 1
			w := e.post(t, "k1")
			var p idem.Problem
			if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil || w.Code != http.StatusServiceUnavailable ||
				p.Code != string(idem.ProblemOperationUnfinished) || w.Header().Get("Retry-After") == "" {
				t.Fatalf("first answer = %d %s (Retry-After %q); want 503 operation-unfinished with Retry-After", w.Code, w.Body, w.Header().Get("Retry-After"))
			}
			if rec, ok := e.point(t, "k1"); !ok || rec.Status != idemstore.StatusInFlight {
				t.Fatalf("key after the unfinished run: %+v, %v; want it kept, started", rec, ok)
			}
			// The retry comes at once: the key has no holder, so it need not
			// wait for the lease to run out.
			w = e.post(t, "k1")
			if w.Code != http.StatusCreated {
				t.Fatalf("retry = %d %s; want 201", w.Code, w.Body)
			}
			want := map[string]int{idemstore.RecoveryStarted: 1, "created": 1, "charged": 2}
			for p, n := range want {
				if got := e.op.count(p); got != n {
					t.Errorf("phase %q ran %d times; want %d", p, got, n)
				}
			}
		})
	}
}

func TestUnfinishedFirstPhaseFreesTheKey(t *testing.T) {
	t.Parallel()
	e := setupPhased(t, nil)
	e.op.fail[idemstore.RecoveryStarted] = 1
	if w := e.post(t, "k1"); w.Code != http.StatusServiceUnavailable {
		t.Fatalf("answer = %d; want 503", w.Code)
	}
	if _, ok := e.point(t, "k1"); ok {
		t.Errorf("a key that passed no recovery point is kept; want it freed as before")
	}
}

// plainStore hides the memory store's recovery points, as a third-party
// store without them would.
type plainStore struct{ inner *idemtest.MemoryStore }

func (s plainStore) Claim(ctx context.Context, p idemstore.ClaimParams) (idemstore.ClaimResult, error) {
	res, err := s.inner.Claim(ctx, p)
	if res.Lease != nil {
		res.Lease = struct{ idemstore.Lease }{res.Lease}
	}
	return res, err
}

func TestPhasesNeedARecoveryLease(t *testing.T) {
	t.Parallel()
	var runErr error
	mw, err := idem.New(plainStore{idemtest.NewMemoryStore()}, &idem.Config{
		ClientID: func(*http.Request) (string, bool) { return "alice", true }, Mode: idem.ModeTwoPhase, Logger: quiet,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, run, runs := runGuard(t)
	h := mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		run()
		runErr = newPhased().all("pay_1").Run(r.Context(), w)
	}))
	r := httptest.NewRequestWithContext(ctx, http.MethodPost, "/v1/payments", strings.NewReader(`{}`))
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set(idem.HeaderKey, "k")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if n := runs(); !errors.Is(runErr, idemstore.ErrNoRecovery) || w.Code != http.StatusServiceUnavailable || n != 1 {
		t.Errorf("Run = %v, answer %d after %d runs; want ErrNoRecovery and 503 after one", runErr, w.Code, n)
	}
	if err := newPhased().all("x").Run(context.Background(), httptest.NewRecorder()); !errors.Is(err, idemstore.ErrNoRecovery) {
		t.Errorf("Run outside the middleware = %v; want ErrNoRecovery", err)
	}
}

func TestPhaseThatGoesNowhereIsAnError(t *testing.T) {
	t.Parallel()
	e := setupPhased(t, nil)
	var runErr error
	mw, _ := idem.New(e.store, &e.cfg)
	ctx, run, runs := runGuard(t)
	h := mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		run()
		runErr = idem.Phases{
			idemstore.RecoveryStarted: func(context.Context, http.ResponseWriter, idem.State) (string, error) { return "a", nil },
			"a":                       func(context.Context, http.ResponseWriter, idem.State) (string, error) { return "a", nil },
		}.Run(r.Context(), w)
	}))
	r := httptest.NewRequestWithContext(ctx, http.MethodPost, "/v1/payments", strings.NewReader(`{}`))
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set(idem.HeaderKey, "k")
	h.ServeHTTP(httptest.NewRecorder(), r)
	var pe *idem.PhaseError
	if n := runs(); !errors.As(runErr, &pe) || pe.Point != "a" || n != 1 {
		t.Errorf("Run = %v after %d runs; want a PhaseError at \"a\" after one", runErr, n)
	}
}

// passes collects what a resumer reports.
type passes struct {
	mu  sync.Mutex
	all []idem.ResumerResult
}

func (p *passes) ResumerPass(_ context.Context, r idem.ResumerResult) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.all = append(p.all, r)
}

func (e *phasedEnv) resumer(t *testing.T, m idem.ResumerMetrics) *idem.Resumer {
	t.Helper()
	c, err := idem.NewResumer(e.store, &idem.Config{
		Logger: quiet, Metrics: metricsOf(m), Now: e.clock.Now, Resume: idem.ResumeOpts{Operations: map[string]idem.Phases{"POST /v1/payments": e.op.resume()}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func runOnce(t *testing.T, c *idem.Resumer) idem.ResumerResult {
	t.Helper()
	res, err := c.RunOnce(context.Background())
	if err != nil {
		t.Fatalf("RunOnce: %v", err)
	}
	return res
}

func TestResumerFinishesAbandonedKey(t *testing.T) {
	t.Parallel()
	e := setupPhased(t, nil)
	// The handler panics in the middle of "created": the key stays at
	// "created", and the client never retries.
	e.op.crash = "created"
	e.post(t, "k1")
	e.op.crash = ""
	// The middleware released the key on the panic, which keeps its
	// recovery point and leaves it without a holder: the resumer need
	// not wait for the lease (TestResumerWaitsForTheLease covers a
	// process that dies holding it).
	m := &passes{}
	c := e.resumer(t, m)
	if res := runOnce(t, c); res.Completed != 1 {
		t.Fatalf("pass = %+v; want the released key completed", res)
	}
	if rec, _ := e.point(t, "k1"); rec.Status != idemstore.StatusCompleted || rec.Response.StatusCode != http.StatusCreated {
		t.Fatalf("key after the resumer: %+v; want completed with 201", rec)
	}
	w := e.post(t, "k1")
	if w.Code != http.StatusCreated || w.Header().Get(idem.HeaderReplayed) != "true" || !strings.Contains(w.Body.String(), "ch_pay_1") {
		t.Errorf("client's return = %d %s; want the resumer's 201, replayed", w.Code, w.Body)
	}
	if n := e.op.count(idemstore.RecoveryStarted); n != 1 {
		t.Errorf("first phase ran %d times; want 1", n)
	}
	if res := runOnce(t, c); res.Completed+res.Failed+res.Skipped != 0 {
		t.Errorf("second pass = %+v; want nothing left", res)
	}
	if len(m.all) != 2 || m.all[0].Completed != 1 {
		t.Errorf("metrics got %+v; want two passes, the first completing one key", m.all)
	}
}

func TestResumerWaitsForTheLease(t *testing.T) {
	t.Parallel()
	e := setupPhased(t, nil)
	ctx := context.Background()
	p := idemstore.ClaimParams{
		Scope: idemstore.Scope{ClientID: "alice", Key: "k1"}, Method: http.MethodPost, Path: "/v1/payments",
		RequestHash: []byte("h"), TwoPhase: true, Now: e.clock.Now(),
		LockTimeout: idem.LockTimeoutDefault, Retention: idem.RetentionDefault,
	}
	res, err := e.store.Claim(ctx, p)
	if err != nil || res.Lease == nil {
		t.Fatalf("Claim = %+v, %v", res, err)
	}
	// The holder passes "created", then dies holding its lease.
	if err := res.Lease.(idemstore.RecoveryLease).Checkpoint(ctx, idemstore.Recovery{Point: "created", State: idem.State{"payment_id": "pay_9"}}); err != nil {
		t.Fatal(err)
	}
	c := e.resumer(t, nil)
	e.clock.Advance(idem.LockTimeoutDefault - time.Second)
	if res := runOnce(t, c); res.Completed+res.Failed+res.Skipped != 0 {
		t.Fatalf("pass while the lease lives = %+v; want the key left to its holder", res)
	}
	e.op.fail["charged"] = 1
	e.clock.Advance(time.Second)
	if res := runOnce(t, c); res.Failed != 1 || res.Oldest != idem.LockTimeoutDefault {
		t.Fatalf("pass with the processor down = %+v; want one failed key, %s old", res, idem.LockTimeoutDefault)
	}
	if rec, _ := e.point(t, "k1"); rec.Status != idemstore.StatusInFlight {
		t.Fatalf("key after a failed pass: %q; want it still started", rec.Status)
	}
	e.clock.Advance(idem.ResumeIntervalDefault)
	if res := runOnce(t, c); res.Completed != 1 {
		t.Fatalf("next pass = %+v; want the key completed", res)
	}
	if got := e.op.count("created"); got != 1 {
		t.Errorf("phase \"created\" ran %d times; want 1 (the failed pass stopped after it)", got)
	}
	if got := e.op.count("charged"); got != 2 {
		t.Errorf("phase \"charged\" ran %d times; want 2", got)
	}
	// The dead holder wakes up: its lease is gone.
	if err := res.Lease.Complete(ctx, &idemstore.Response{StatusCode: 201}); !errors.Is(err, idemstore.ErrLeaseLost) {
		t.Errorf("stale holder's Complete = %v; want ErrLeaseLost", err)
	}
}

// followerStore is a memory store whose resumer lock another instance
// holds.
type followerStore struct{ *idemtest.MemoryStore }

func (followerStore) TryLead(context.Context, string) (func(), bool, error) { return nil, false, nil }

func TestResumerSkipsPassWithoutTheLock(t *testing.T) {
	t.Parallel()
	e := setupPhased(t, nil)
	e.op.crash = "created"
	e.post(t, "k1")
	c, err := idem.NewResumer(followerStore{e.store}, &idem.Config{Logger: quiet, Now: e.clock.Now, Resume: idem.ResumeOpts{Operations: map[string]idem.Phases{"POST /v1/payments": e.op.resume()}}})
	if err != nil {
		t.Fatal(err)
	}
	if res := runOnce(t, c); res.Led || res.Completed != 0 {
		t.Errorf("pass = %+v; want nothing done without the lock", res)
	}
	if rec, _ := e.point(t, "k1"); rec.Status != idemstore.StatusInFlight {
		t.Errorf("key = %q; want it left started", rec.Status)
	}
}

func TestResumerConfig(t *testing.T) {
	t.Parallel()
	store := idemtest.NewMemoryStore()
	for name, cfg := range map[string]*idem.Config{
		"NoOperations":    nil,
		"NegativeBatch":   {Resume: idem.ResumeOpts{Operations: map[string]idem.Phases{"POST /x": {}}, BatchSize: -1}},
		"ForbiddenHeader": {Resume: idem.ResumeOpts{Operations: map[string]idem.Phases{"POST /x": {}}}, ReplayHeaders: []string{"Set-Cookie"}},
	} {
		if _, err := idem.NewResumer(store, cfg); err == nil {
			t.Errorf("%s: NewResumer accepted the config", name)
		}
	}
	if _, err := idem.NewResumer(nil, nil); err == nil {
		t.Error("NewResumer accepted a nil store")
	}
}

// passSignal sends every pass's result on a channel.
type passSignal chan idem.ResumerResult

func (p passSignal) ResumerPass(_ context.Context, r idem.ResumerResult) { p <- r }

func TestResumerRunPassesUntilCancelled(t *testing.T) {
	t.Parallel()
	e := setupPhased(t, nil)
	e.op.crash = "created"
	e.post(t, "k1")
	e.op.crash = ""
	passes := make(passSignal)
	c, err := idem.NewResumer(e.store, &idem.Config{Logger: quiet, Metrics: metricsOf(passes), Now: e.clock.Now, Resume: idem.ResumeOpts{Operations: map[string]idem.Phases{"POST /v1/payments": e.op.resume()}, Interval: time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	select {
	case res := <-passes: // Run passes at once, before the first interval
		if res.Completed != 1 {
			t.Errorf("first pass = %+v; want the key completed", res)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no pass within 10 s of Run")
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run = %v after cancel; want nil", err)
	}
}

func TestResumerSurvivesAPanickingPhase(t *testing.T) {
	t.Parallel()
	e := setupPhased(t, nil)
	e.op.crash = "created"
	e.post(t, "k1")
	c := e.resumer(t, nil)
	if res := runOnce(t, c); res.Failed != 1 {
		t.Fatalf("pass with a panicking phase = %+v; want one failed key", res)
	}
	if rec, _ := e.point(t, "k1"); rec.Status != idemstore.StatusInFlight {
		t.Fatalf("key = %q; want it still started", rec.Status)
	}
	e.op.crash = ""
	if res := runOnce(t, c); res.Completed != 1 {
		t.Errorf("next pass = %+v; want the key completed", res)
	}
}

// TestPhasesDeriveKeysPerClaimAfterTheFirstPoint checks which key
// DeriveKey gives in each phase: in the first, the key of the client, the
// key and the purpose alone, as the handler around the phases derives it;
// from the second on, one that the creation of the key's row makes unique
// to this claim.
func TestPhasesDeriveKeysPerClaimAfterTheFirstPoint(t *testing.T) {
	t.Parallel()
	mw, err := idem.New(idemtest.NewMemoryStore(), &idem.Config{
		ClientID: func(*http.Request) (string, bool) { return "alice", true },
		Mode:     idem.ModeTwoPhase, Logger: quiet,
	})
	if err != nil {
		t.Fatal(err)
	}
	var handler, first, later string
	h := mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		handler = idem.DeriveKey(r.Context(), "charge")
		idem.Phases{
			idemstore.RecoveryStarted: func(ctx context.Context, _ http.ResponseWriter, _ idem.State) (string, error) {
				first = idem.DeriveKey(ctx, "charge")
				return "created", nil
			},
			"created": func(ctx context.Context, w http.ResponseWriter, _ idem.State) (string, error) {
				later = idem.DeriveKey(ctx, "charge")
				w.WriteHeader(http.StatusCreated)
				return idemstore.RecoveryFinished, nil
			},
		}.Run(r.Context(), w)
	}))
	r := httptest.NewRequest(http.MethodPost, "/v1/payments", strings.NewReader(`{"amount":100}`))
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set(idem.HeaderKey, `"k1"`)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Code != http.StatusCreated {
		t.Fatalf("status %d, want 201; body %s", w.Code, w.Body)
	}
	if handler == "" || first != handler {
		t.Errorf("the first phase derived %q, want the handler's %q", first, handler)
	}
	if later == "" || later == handler {
		t.Errorf("the second phase derived %q, want a key of this claim's, not the handler's %q", later, handler)
	}
}

// runGuard returns the context of a request whose handler should run
// once, the function its handler calls at each run, and the count of runs.
// A second run ends the context, which ends a middleware that would run
// the request again and again: the test then fails instead of hanging.
func runGuard(t *testing.T) (ctx context.Context, run func(), runs func() int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	var n atomic.Int64
	run = func() {
		if n.Add(1) > 1 {
			cancel()
		}
	}
	return ctx, run, func() int { return int(n.Load()) }
}
