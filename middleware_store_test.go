package idem_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/idemtest"
)

// errBoom is an error of a type that idem knows nothing about, as a
// third-party store may return.
var errBoom = errors.New("boom")

// errConflict is the error of a commit that hit a transaction conflict.
var errConflict = errors.New("commit: serialization failure")

// faultyStore wraps the memory store. It fails the call named by fail with
// errBoom, and its leases report a transaction conflict when conflict is set.
// The next commitConflicts Completes fail as a commit that hit a conflict
// does: nothing of the lease stays, and the lease reports the conflict.
type faultyStore struct {
	inner           *idemtest.MemoryStore
	fail            string // "Claim", "NoLease", "Complete" or "Release"
	conflict        bool
	commitConflicts atomic.Int64
}

func (s *faultyStore) Claim(ctx context.Context, p idemstore.ClaimParams) (idemstore.ClaimResult, error) {
	switch s.fail {
	case "Claim":
		return idemstore.ClaimResult{}, errBoom
	case "NoLease":
		return idemstore.ClaimResult{}, nil // a broken store: neither a lease nor a record
	}
	res, err := s.inner.Claim(ctx, p)
	if res.Lease != nil {
		res.Lease = &faultyLease{Lease: res.Lease, store: s}
	}
	return res, err
}

type faultyLease struct {
	idemstore.Lease
	store      *faultyStore
	conflicted bool // its commit hit a conflict
}

func (l *faultyLease) Complete(ctx context.Context, resp *idemstore.Response) error {
	if l.store.fail == "Complete" {
		return errBoom
	}
	if l.store.commitConflicts.Add(-1) >= 0 {
		l.conflicted = true
		l.Lease.Release(ctx) // the transaction rolled back, the claim with it
		return errConflict
	}
	return l.Lease.Complete(ctx, resp)
}

func (l *faultyLease) Release(ctx context.Context) error {
	if l.store.fail == "Release" {
		return errBoom
	}
	return l.Lease.Release(ctx)
}

// Conflicted implements idemstore.ConflictReporter.
func (l *faultyLease) Conflicted() bool { return l.store.conflict || l.conflicted }

// lockedBuffer collects log output from concurrent handlers.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// faultyEnv is a server with the middleware on a faultyStore, in front of a
// handler that answers the status in the X-Status header (201 by default).
type faultyEnv struct {
	url     string
	store   *faultyStore
	runs    atomic.Int64
	log     *lockedBuffer
	metrics *countingMetrics
}

func setupFaulty(t *testing.T, cfg idem.Config) *faultyEnv {
	t.Helper()
	e := &faultyEnv{
		store:   &faultyStore{inner: idemtest.NewMemoryStore()},
		log:     &lockedBuffer{},
		metrics: &countingMetrics{counts: map[idem.Result]int{}},
	}
	cfg.ClientID = func(r *http.Request) (string, bool) { return "alice", true }
	cfg.Logger = slog.New(slog.NewTextHandler(e.log, nil))
	cfg.Metrics = e.metrics
	mw, err := idem.New(e.store, &cfg)
	if err != nil {
		t.Fatalf("idem.New: %v", err)
	}
	srv := httptest.NewServer(mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := e.runs.Add(1)
		status := http.StatusCreated
		if s := r.Header.Get("X-Status"); s != "" {
			fmt.Sscan(s, &status)
		}
		w.WriteHeader(status)
		fmt.Fprintf(w, `{"run":%d}`, n)
	})))
	t.Cleanup(srv.Close)
	e.url = srv.URL
	return e
}

// post sends a payment with the key, and a status for the handler to
// answer. It waits 30 s at most for the answer: a request the middleware
// runs again and again fails the test, and its context's end stops it.
func (e *faultyEnv) post(t *testing.T, key string, status int) resp {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := http.NewRequestWithContext(ctx, http.MethodPost, e.url+"/v1/payments", strings.NewReader(payment))
	if err != nil {
		t.Fatal(err)
	}
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("Idempotency-Key", key)
	if status != 0 {
		r.Header.Set("X-Status", fmt.Sprint(status))
	}
	res, err := http.DefaultClient.Do(r)
	if err != nil {
		t.Fatalf("POST with key %q, waiting 30 s at most for the answer: %v (runs so far: %d)", key, err, e.runs.Load())
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	return resp{status: res.StatusCode, header: res.Header, body: body}
}

// TestStoreErrorOfUnknownTypeGets503 fails each store call in turn with an
// error the middleware cannot know: every one answers 503 store-unavailable
// with a detail that says what became of the request, and is logged.
func TestStoreErrorOfUnknownTypeGets503(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		fail     string
		mode     idem.Mode
		status   int    // the handler's answer
		conflict bool   // the lease reports a transaction conflict
		runs     int64  // handler runs
		detail   string // in the problem's detail
		logged   string // the log message
	}{
		{"Claim", "Claim", idem.ModeAtomic, 0, false, 0, "the request was not processed", "idem: claim failed"},
		{"ClaimWithoutLeaseOrRecord", "NoLease", idem.ModeAtomic, 0, false, 0, "the request was not processed", "idem: claim failed"},
		{"Complete", "Complete", idem.ModeAtomic, 0, false, 1, "failed to record the result", "idem: storing the response failed"},
		{"CompleteTwoPhase", "Complete", idem.ModeTwoPhase, 0, false, 1, "failed to record the result", "idem: storing the response failed"},
		{"ReleaseOf4xx", "Release", idem.ModeAtomic, http.StatusBadRequest, false, 1, "did not confirm that its key was freed", "idem: release failed"},
		{"ReleaseOf5xx", "Release", idem.ModeTwoPhase, http.StatusInternalServerError, false, 1, "did not confirm that its key was freed", "idem: release failed"},
		{"ReleaseAfterConflict", "Release", idem.ModeAtomic, 0, true, 1, "did not confirm that its key was freed", "idem: release after a transaction conflict failed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := setupFaulty(t, idem.Config{Mode: tt.mode})
			e.store.fail, e.store.conflict = tt.fail, tt.conflict
			r := e.post(t, "k-"+tt.name, tt.status)
			if r.status != http.StatusServiceUnavailable || r.header.Get("Retry-After") != "1" {
				t.Fatalf("status %d Retry-After %q body %s; want 503 with Retry-After 1", r.status, r.header.Get("Retry-After"), r.body)
			}
			if p := r.problem(t); p.Code != "store-unavailable" || !strings.Contains(p.Detail, tt.detail) {
				t.Errorf("problem %+v; want store-unavailable saying %q", p, tt.detail)
			}
			if bytes.Contains(r.body, []byte("boom")) {
				t.Errorf("the answer shows the store's error: %s", r.body)
			}
			if n := e.runs.Load(); n != tt.runs {
				t.Errorf("handler ran %d times, want %d", n, tt.runs)
			}
			log := e.log.String()
			logErr := "err=boom"
			if tt.fail == "NoLease" {
				logErr = "neither a lease nor a record"
			}
			for _, want := range []string{tt.logged, logErr, "client_id=alice", "key_digest="} {
				if !strings.Contains(log, want) {
					t.Errorf("log lacks %q:\n%s", want, log)
				}
			}
			e.metrics.mu.Lock()
			defer e.metrics.mu.Unlock()
			if n := e.metrics.counts[idem.ResultUnavailable]; n != 1 {
				t.Errorf("counted %d unavailable results, want 1 (%v)", n, e.metrics.counts)
			}
		})
	}
}

// TestCompleteFailureFreesTwoPhaseKey: after a failed Complete in two-phase
// mode the middleware releases the committed claim, so the retry runs now
// instead of waiting for the lease to expire.
func TestCompleteFailureFreesTwoPhaseKey(t *testing.T) {
	t.Parallel()
	e := setupFaulty(t, idem.Config{Mode: idem.ModeTwoPhase})
	e.store.fail = "Complete"
	if r := e.post(t, "k", 0); r.status != http.StatusServiceUnavailable {
		t.Fatalf("first: status %d, want 503", r.status)
	}
	// The release after it succeeded, and is not logged as failed.
	if log := e.log.String(); !strings.Contains(log, "storing the response failed; the key is released") || strings.Contains(log, "release after a failed complete failed") {
		t.Errorf("log:\n%s\nwant the failed complete, and no failed release", log)
	}
	e.store.fail = ""
	if r := e.post(t, "k", 0); r.status != http.StatusCreated || r.header.Get(idem.HeaderReplayed) != "" {
		t.Fatalf("retry: status %d replayed %q, want a fresh 201", r.status, r.header.Get(idem.HeaderReplayed))
	}
	if n := e.runs.Load(); n != 2 {
		t.Errorf("handler ran %d times, want 2", n)
	}
}

// TestConflictReruns counts the runs of a request whose every transaction
// reports a conflict: MaxConflictRetries reruns, then the last run's result
// stands; NoConflictRetries runs it once.
func TestConflictReruns(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		maxRetries int
		runs       int64
	}{
		{"Default", 0, 1 + idem.MaxConflictRetriesDefault},
		{"One", 1, 2},
		{"Off", idem.NoConflictRetries, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := setupFaulty(t, idem.Config{MaxConflictRetries: tt.maxRetries})
			e.store.conflict = true
			r := e.post(t, "k", 0)
			if r.status != http.StatusCreated {
				t.Fatalf("status %d body %s, want 201 from the last run", r.status, r.body)
			}
			if n := e.runs.Load(); n != tt.runs {
				t.Errorf("handler ran %d times, want %d", n, tt.runs)
			}
			e.metrics.mu.Lock()
			defer e.metrics.mu.Unlock()
			if n := e.metrics.counts[idem.ResultConflictRerun]; int64(n) != tt.runs-1 {
				t.Errorf("counted %d reruns, want %d", n, tt.runs-1)
			}
		})
	}
}

// TestConflictRerunPauses checks the pause before each rerun after a
// transaction conflict, on a fake clock (testing/synctest): 10 ms times
// the runs so far, plus up to 10 ms of jitter; and that each rerun is
// logged with its number.
func TestConflictRerunPauses(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		const reruns = 3
		store := &faultyStore{inner: idemtest.NewMemoryStore(), conflict: true}
		log := &lockedBuffer{}
		mw, err := idem.New(store, &idem.Config{
			ClientID:           func(*http.Request) (string, bool) { return "alice", true },
			Logger:             slog.New(slog.NewTextHandler(log, nil)),
			MaxConflictRetries: reruns,
		})
		if err != nil {
			t.Fatal(err)
		}
		var starts, ends []time.Time
		// A run past the last rerun ends the request's context, which ends
		// the middleware's reruns: the test then fails instead of hanging.
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		h := mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			starts = append(starts, time.Now())
			if len(starts) > 1+reruns {
				cancel()
			}
			w.WriteHeader(http.StatusCreated)
			ends = append(ends, time.Now())
		}))
		r := httptest.NewRequestWithContext(ctx, http.MethodPost, "/v1/payments", strings.NewReader(payment))
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set(idem.HeaderKey, `"k"`)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != http.StatusCreated || len(starts) != 1+reruns {
			t.Fatalf("status %d after %d runs, want 201 after %d", w.Code, len(starts), 1+reruns)
		}
		for i := 1; i < len(starts); i++ {
			pause, least := starts[i].Sub(ends[i-1]), time.Duration(i)*10*time.Millisecond
			if pause < least || pause >= least+10*time.Millisecond {
				t.Errorf("pause before rerun %d: %s, want at least %s and less than %s", i, pause, least, least+10*time.Millisecond)
			}
		}
		var attempts []string
		for _, line := range strings.Split(log.String(), "\n") {
			if strings.Contains(line, "running the request again") {
				_, n, _ := strings.Cut(line, " attempt=")
				attempts = append(attempts, n)
			}
		}
		if got := strings.Join(attempts, ","); got != "1,2,3" {
			t.Errorf("reruns logged as attempts %q, want 1,2,3:\n%s", got, log)
		}
	})
}

// TestCommitConflictReruns: a conflict that the commit itself hits, in
// Complete after the handler ran, reruns the request as one that the
// handler's statements hit does, and the rerun's response is the one
// stored; without reruns it is answered 503.
func TestCommitConflictReruns(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		maxRetries int
		status     int
		runs       int64
	}{
		{"Rerun", 0, http.StatusCreated, 2},
		{"NoReruns", idem.NoConflictRetries, http.StatusServiceUnavailable, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := setupFaulty(t, idem.Config{MaxConflictRetries: tt.maxRetries})
			e.store.commitConflicts.Store(1)
			r := e.post(t, "k", 0)
			if r.status != tt.status || e.runs.Load() != tt.runs {
				t.Fatalf("status %d after %d runs, body %s; want %d after %d", r.status, e.runs.Load(), r.body, tt.status, tt.runs)
			}
			e.metrics.mu.Lock()
			reruns := e.metrics.counts[idem.ResultConflictRerun]
			e.metrics.mu.Unlock()
			if int64(reruns) != tt.runs-1 {
				t.Errorf("counted %d reruns, want %d", reruns, tt.runs-1)
			}
			retry := e.post(t, "k", 0)
			if tt.status == http.StatusCreated && (retry.header.Get(idem.HeaderReplayed) != "true" || string(retry.body) != `{"run":2}`) {
				t.Errorf("retry: %d %s, replayed %q; want the replay of run 2", retry.status, retry.body, retry.header.Get(idem.HeaderReplayed))
			}
			if tt.status != http.StatusCreated && (retry.status != http.StatusCreated || string(retry.body) != `{"run":2}`) {
				t.Errorf("retry: %d %s; want a run of its own, the key having been rolled back", retry.status, retry.body)
			}
		})
	}
}

// TestPanicReleasesKey: a handler's panic goes on to the server, and its
// key is released, so that the retry runs; a release that fails is
// logged, and one that does not is not.
func TestPanicReleasesKey(t *testing.T) {
	t.Parallel()
	for _, fail := range []string{"", "Release"} {
		t.Run("Fail"+fail, func(t *testing.T) {
			t.Parallel()
			store := &faultyStore{inner: idemtest.NewMemoryStore(), fail: fail}
			log := &lockedBuffer{}
			metrics := &countingMetrics{counts: map[idem.Result]int{}}
			mw, err := idem.New(store, &idem.Config{
				ClientID: func(*http.Request) (string, bool) { return "alice", true },
				Logger:   slog.New(slog.NewTextHandler(log, nil)),
				Metrics:  metrics,
			})
			if err != nil {
				t.Fatal(err)
			}
			var runs atomic.Int64
			h := mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if runs.Add(1) == 1 {
					panic("handler bug")
				}
				w.WriteHeader(http.StatusCreated)
			}))
			serve := func() (code int, recovered any) {
				r := httptest.NewRequest(http.MethodPost, "/v1/payments", strings.NewReader(payment))
				r.Header.Set("Content-Type", "application/json")
				r.Header.Set(idem.HeaderKey, `"k"`)
				w := httptest.NewRecorder()
				defer func() { recovered = recover() }()
				h.ServeHTTP(w, r)
				return w.Code, nil
			}
			if _, p := serve(); p != "handler bug" {
				t.Fatalf("recovered %v from the middleware, want the handler's panic", p)
			}
			metrics.mu.Lock()
			released := metrics.counts[idem.ResultReleased]
			metrics.mu.Unlock()
			if released != 1 {
				t.Errorf("counted %d released, want 1", released)
			}
			logged := strings.Contains(log.String(), "idem: release after panic failed")
			if want := fail == "Release"; logged != want || want && !strings.Contains(log.String(), "err=boom") {
				t.Errorf("release after panic failed logged: %t, want %t:\n%s", logged, want, log)
			}
			if fail != "" {
				return
			}
			if code, p := serve(); code != http.StatusCreated || p != nil || runs.Load() != 2 {
				t.Errorf("retry: %d (panic %v) after %d runs, want 201 from a second run", code, p, runs.Load())
			}
		})
	}
}

func TestConflictRerunsValidated(t *testing.T) {
	t.Parallel()
	clientID := func(*http.Request) (string, bool) { return "alice", true }
	if _, err := idem.New(idemtest.NewMemoryStore(), &idem.Config{ClientID: clientID, MaxConflictRetries: -2}); err == nil {
		t.Errorf("MaxConflictRetries -2 accepted; want an error naming NoConflictRetries")
	}
	if _, err := idem.New(idemtest.NewMemoryStore(), &idem.Config{ClientID: clientID, MaxConflictRetries: idem.NoConflictRetries}); err != nil {
		t.Errorf("NoConflictRetries rejected: %v", err)
	}
}

// keepingStore wraps the memory store, and its leases keep the response
// given to Complete as it is, without a copy, as a store may.
type keepingStore struct {
	inner *idemtest.MemoryStore
	kept  *idemstore.Response
}

func (s *keepingStore) Claim(ctx context.Context, p idemstore.ClaimParams) (idemstore.ClaimResult, error) {
	res, err := s.inner.Claim(ctx, p)
	if res.Lease != nil {
		res.Lease = &keepingLease{Lease: res.Lease, store: s}
	}
	return res, err
}

type keepingLease struct {
	idemstore.Lease
	store *keepingStore
}

func (l *keepingLease) Complete(ctx context.Context, resp *idemstore.Response) error {
	l.store.kept = resp
	return l.Lease.Complete(ctx, resp)
}

// TestStoredResponseSharesNothingWithClient checks that what the client's
// writer does to the header it got, after the middleware answered,
// changes nothing in the response given to the store, whether the handler
// set only fields that are replayed or others too, and whether the
// response was buffered or streamed.
func TestStoredResponseSharesNothingWithClient(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		extra  bool // the handler sets a field that is not replayed
		stream bool // the handler streams its response, in two-phase mode
	}{
		{"OnlyReplayedFields", false, false},
		{"OtherFieldsToo", true, false},
		{"Streamed", false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			store := &keepingStore{inner: idemtest.NewMemoryStore()}
			cfg := &idem.Config{ClientID: func(*http.Request) (string, bool) { return "client-1", true }}
			if tt.stream {
				cfg.Mode = idem.ModeTwoPhase
			}
			mw, err := idem.New(store, cfg)
			if err != nil {
				t.Fatal(err)
			}
			h := mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if tt.stream && !idem.StreamResponse(w, 1<<10) {
					t.Error("StreamResponse = false")
				}
				w.Header().Set("Content-Type", "application/json")
				w.Header().Set("Location", "/v1/payments/1")
				if tt.extra {
					w.Header().Set("X-Trace", "t-1")
				}
				w.WriteHeader(http.StatusCreated)
				io.WriteString(w, `{"id":"1"}`)
			}))
			r := httptest.NewRequest(http.MethodPost, "/v1/payments", strings.NewReader(`{"amount":1}`))
			r.Header.Set("Content-Type", "application/json")
			r.Header.Set(idem.HeaderKey, `"key-1"`)
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if w.Code != http.StatusCreated || w.Header().Get("Location") != "/v1/payments/1" || w.Body.String() != `{"id":"1"}` {
				t.Fatalf("got %d %v", w.Code, w.Header())
			}
			if tt.extra && w.Header().Get("X-Trace") != "t-1" {
				t.Errorf("X-Trace = %q, want t-1", w.Header().Get("X-Trace"))
			}

			// What an outer middleware may do to the header after the
			// handler returned.
			w.Header()["Content-Type"][0] = "changed"
			w.Header()["Location"] = append(w.Header()["Location"][:0], "changed")
			w.Header().Add("Content-Type", "added")

			want := http.Header{"Content-Type": {"application/json"}, "Location": {"/v1/payments/1"}}
			if store.kept == nil || !reflect.DeepEqual(store.kept.Header, want) {
				t.Errorf("the store was given %v, want %v", store.kept, want)
			}
		})
	}
}

// TestBodyOfHandlerIsDetached checks that the buffer of a body that a
// handler was given goes to another request only once nothing can read it:
// a reader the handler kept after it returned reads nothing more, and a
// read under way when the handler returned, as a Transport's that still
// sends the body upstream after its RoundTrip returned, keeps its buffer,
// whose bytes do not change while other requests come and go.
func TestBodyOfHandlerIsDetached(t *testing.T) {
	t.Parallel()
	var kept io.Reader
	copying := make(chan struct{}) // the late copy has its bytes
	release := make(chan struct{})
	late := make(chan string, 1) // the late copy's bytes, once released
	mw, err := idem.New(idemtest.NewMemoryStore(), &idem.Config{ClientID: func(*http.Request) (string, bool) { return "client-1", true }})
	if err != nil {
		t.Fatal(err)
	}
	h := mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Header.Get("X-Test") {
		case "keep":
			kept = r.Body
		case "copy-late":
			go io.Copy(writerFunc(func(p []byte) (int, error) {
				close(copying)
				<-release
				late <- string(p)
				return len(p), nil
			}), r.Body)
			<-copying
		default:
			io.Copy(io.Discard, r.Body)
		}
		w.WriteHeader(http.StatusCreated)
	}))
	serve := func(key, body, mode string) int {
		r := httptest.NewRequest(http.MethodPost, "/v1/payments", strings.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set(idem.HeaderKey, `"`+key+`"`)
		r.Header.Set("X-Test", mode)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code
	}
	const first = `{"amount":10000}`
	if code := serve("k-keep", first, "keep"); code != http.StatusCreated {
		t.Fatalf("first request: %d", code)
	}
	if code := serve("k-late", first, "copy-late"); code != http.StatusCreated {
		t.Fatalf("request copied late: %d", code)
	}
	for i := range 200 {
		other := fmt.Sprintf(`{"amount":2%04d}`, i) // as long as the first
		if code := serve("k-keep", other, ""); code != http.StatusUnprocessableEntity {
			t.Fatalf("mismatch: %d, want 422", code)
		}
		if code := serve("k-keep", first, ""); code != http.StatusCreated {
			t.Fatalf("replay: %d, want 201", code)
		}
		if code := serve(fmt.Sprint("k", i), other, ""); code != http.StatusCreated {
			t.Fatalf("new key: %d, want 201", code)
		}
	}
	if got, _ := io.ReadAll(kept); len(got) != 0 {
		t.Errorf("the kept body reads %q after its handler returned, want nothing", got)
	}
	close(release)
	if got := <-late; got != first {
		t.Errorf("the copy under way when its handler returned was given %q, want %q", got, first)
	}
}

// TestBodyOfHandlerIsReused checks that the buffer of a body that a
// handler read, and nothing reads any more, goes to the next request. It
// does not run in parallel: the other tests' requests would take buffers
// from the pool it looks in.
func TestBodyOfHandlerIsReused(t *testing.T) {
	var given *byte // the first byte of the buffer the handler read
	mw, err := idem.New(idemtest.NewMemoryStore(), &idem.Config{ClientID: func(*http.Request) (string, bool) { return "client-1", true }})
	if err != nil {
		t.Fatal(err)
	}
	h := mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(writerFunc(func(p []byte) (int, error) {
			given = &p[0]
			return len(p), nil
		}), r.Body)
		w.WriteHeader(http.StatusCreated)
	}))
	// The pool may drop a buffer, or hold it for another processor than
	// the one this goroutine runs on next: one reuse in 100 requests shows
	// it.
	const body = `{"amount":10000,"currency":"eur","customer":"cus_reused_buffer"}`
	for i := range 100 {
		r := httptest.NewRequest(http.MethodPost, "/v1/payments", strings.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set(idem.HeaderKey, fmt.Sprintf(`"k-%d"`, i))
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != http.StatusCreated {
			t.Fatalf("request %d: %d", i, w.Code)
		}
		if b, _ := idem.BodyBuffer(int64(len(body))); b != nil && &b[:1][0] == given {
			return
		}
	}
	t.Error("no buffer a handler read went back to the pool in 100 requests")
}

// writerFunc is an io.Writer of a function.
type writerFunc func(p []byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
