package idem_test

import (
	"context"
	"fmt"
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

// speculationSpy records ClaimParams.Speculative of each claim.
type speculationSpy struct {
	*idemtest.MemoryStore
	mu  sync.Mutex
	got []bool
}

func (s *speculationSpy) Claim(ctx context.Context, p idemstore.ClaimParams) (idemstore.ClaimResult, error) {
	s.mu.Lock()
	s.got = append(s.got, p.Speculative)
	s.mu.Unlock()
	return s.MemoryStore.Claim(ctx, p)
}

func (s *speculationSpy) last(t *testing.T) bool {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.got) == 0 {
		t.Fatal("no claim")
	}
	return s.got[len(s.got)-1]
}

// TestClaimIsSpeculativeForKeysNotSeenHere: in atomic mode a middleware
// claims a key it has not claimed before speculatively, and a key it has
// (a retry, or a duplicate in flight) at once, so that the retry does not
// run its handler; another middleware on the same store (another
// instance) has not seen the key. Two-phase claims never speculate, nor
// does a request that prefers to wait.
func TestClaimIsSpeculativeForKeysNotSeenHere(t *testing.T) {
	t.Parallel()
	spy := &speculationSpy{MemoryStore: idemtest.NewMemoryStore()}
	serve := func(mode idem.Mode) *httptest.Server {
		mw, err := idem.New(spy, &idem.Config{Mode: mode, MaxPreferWait: time.Second, ClientID: func(r *http.Request) (string, bool) { return r.Header.Get("X-Client"), true }})
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusCreated)
		})))
		t.Cleanup(srv.Close)
		return srv
	}
	one, other, twoPhase := serve(idem.ModeAtomic), serve(idem.ModeAtomic), serve(idem.ModeTwoPhase)
	post := func(srv *httptest.Server, client, key string, header ...string) bool {
		t.Helper()
		r, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/payments", strings.NewReader(`{"amount":1}`))
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("Idempotency-Key", key)
		r.Header.Set("X-Client", client)
		for i := 0; i+1 < len(header); i += 2 {
			r.Header.Set(header[i], header[i+1])
		}
		res, err := srv.Client().Do(r)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return spy.last(t)
	}
	steps := []struct {
		name        string
		srv         *httptest.Server
		client, key string
		header      []string
		want        bool
	}{
		{"a new key", one, "alice", "k1", nil, true},
		{"its retry", one, "alice", "k1", nil, false},
		{"its retry at another instance", other, "alice", "k1", nil, true},
		{"another client's key of that name", one, "bob", "k1", nil, true},
		{"a new key that prefers to wait", one, "alice", "k2", []string{"Prefer", "wait=1"}, false},
		{"its retry without the preference", one, "alice", "k2", nil, false},
		{"two-phase", twoPhase, "alice", "k3", nil, false},
	}
	for _, s := range steps {
		if got := post(s.srv, s.client, s.key, s.header...); got != s.want {
			t.Errorf("%s: Speculative = %v, want %v", s.name, got, s.want)
		}
	}
}

// lateClaimStore is the memory store with the speculative claims that
// idemstore.ClaimParams.Speculative allows, as idempg makes them: a
// speculative claim returns a lease that claims the key only when it is
// completed or released, with the transaction's first statement, and that
// fails with an *idemstore.ExistsError carrying the key it found, held or
// completed, instead.
type lateClaimStore struct{ *idemtest.MemoryStore }

func (s lateClaimStore) Claim(ctx context.Context, p idemstore.ClaimParams) (idemstore.ClaimResult, error) {
	if !p.Speculative {
		return s.MemoryStore.Claim(ctx, p)
	}
	p.Speculative = false
	return idemstore.ClaimResult{Lease: &lateLease{store: s.MemoryStore, params: p}}, nil
}

type lateLease struct {
	store  *idemtest.MemoryStore
	params idemstore.ClaimParams
}

func (l *lateLease) Context(ctx context.Context) context.Context { return ctx }
func (l *lateLease) Info() idemstore.LeaseInfo {
	return idemstore.LeaseInfo{CreatedAt: l.params.Now}
}

// claim claims the key now, as the transaction's first statement would.
func (l *lateLease) claim(ctx context.Context) (idemstore.Lease, error) {
	res, err := l.store.Claim(ctx, l.params)
	switch {
	case err != nil:
		return nil, err
	case res.Record != nil:
		return nil, fmt.Errorf("claim: %w", &idemstore.ExistsError{Record: res.Record})
	}
	return res.Lease, nil
}

func (l *lateLease) Complete(ctx context.Context, resp *idemstore.Response) error {
	lease, err := l.claim(ctx)
	if err != nil {
		return err
	}
	return lease.Complete(ctx, resp)
}

func (l *lateLease) Release(ctx context.Context) error {
	lease, err := l.claim(ctx)
	if err != nil {
		return err
	}
	return lease.Release(ctx)
}

// TestSpeculativeClaimThatFindsTheKey: a speculative claim that, sent with
// the handler's first statement, finds the key held or completed by a
// request at another instance is answered as a claim that found it at once
// would be: 409 for a key in flight, the replay of the stored response for
// a completed one; never with its own handler's response, whether that was
// to be stored (201) or not (500).
func TestSpeculativeClaimThatFindsTheKey(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		completed bool // the first request finished before the second came
		status    int  // the second request's handler's
	}{
		{"HeldComplete", false, http.StatusCreated},
		{"HeldRelease", false, http.StatusInternalServerError},
		{"CompletedComplete", true, http.StatusCreated},
		{"CompletedRelease", true, http.StatusInternalServerError},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			store := lateClaimStore{idemtest.NewMemoryStore()}
			entered, release := make(chan struct{}), make(chan struct{})
			var runs atomic.Int64
			handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				runs.Add(1)
				if r.Header.Get("X-Hold") != "" {
					close(entered)
					<-release
				}
				status := http.StatusCreated
				fmt.Sscan(r.Header.Get("X-Status"), &status)
				w.WriteHeader(status)
				fmt.Fprintf(w, "status %d", status)
			})
			instance := func() http.Handler {
				mw, err := idem.New(store, &idem.Config{
					ClientID: func(*http.Request) (string, bool) { return "alice", true },
					Logger:   quiet, MaxPreferWait: time.Second,
				})
				if err != nil {
					t.Fatal(err)
				}
				return mw.Wrap(handler)
			}
			one, other := instance(), instance()
			serve := func(h http.Handler, header ...string) *httptest.ResponseRecorder {
				r := httptest.NewRequest(http.MethodPost, "/v1/payments", strings.NewReader(payment))
				r.Header.Set("Content-Type", "application/json")
				r.Header.Set(idem.HeaderKey, `"k"`)
				for i := 0; i+1 < len(header); i += 2 {
					r.Header.Set(header[i], header[i+1])
				}
				w := httptest.NewRecorder()
				h.ServeHTTP(w, r)
				return w
			}
			first := make(chan *httptest.ResponseRecorder, 1)
			if tt.completed {
				first <- serve(one)
			} else {
				// A request that prefers to wait claims at once: it holds
				// the key while its handler runs.
				go func() { first <- serve(one, "Prefer", "wait=1", "X-Hold", "1") }()
				select {
				case <-entered:
				case <-time.After(30 * time.Second):
					t.Fatal("the first request's handler did not start within 30 s")
				}
			}
			second := serve(other, "X-Status", fmt.Sprint(tt.status))
			close(release)
			if n := runs.Load(); n != 2 {
				t.Errorf("handlers ran %d times, want 2: the second claim was sent with its handler's first statement", n)
			}
			if tt.completed {
				if second.Code != http.StatusCreated || second.Body.String() != "status 201" || second.Header().Get(idem.HeaderReplayed) != "true" {
					t.Errorf("second: %d %q, replayed %q; want the first's stored 201", second.Code, second.Body, second.Header().Get(idem.HeaderReplayed))
				}
			} else {
				p := resp{status: second.Code, header: second.Header(), body: second.Body.Bytes()}.problem(t)
				if second.Code != http.StatusConflict || p.Code != string(idem.ProblemKeyInFlight) {
					t.Errorf("second: %d %+v, want 409 %s", second.Code, p, idem.ProblemKeyInFlight)
				}
			}
			select {
			case w := <-first:
				if w.Code != http.StatusCreated || w.Body.String() != "status 201" {
					t.Errorf("first: %d %q, want its own 201", w.Code, w.Body)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("the first request did not finish within 30 s of its handler's release")
			}
		})
	}
}
