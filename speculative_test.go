package idem_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
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
