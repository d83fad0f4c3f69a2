package idem_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemtest"
)

// claimCounter counts Store.Claim calls.
type claimCounter struct{ claims atomic.Int64 }

func (*claimCounter) Request(context.Context, idem.Result)          {}
func (c *claimCounter) Claim(context.Context, time.Duration, error) { c.claims.Add(1) }

// waitServer serves a handler whose first run holds its key until release
// is called, answering with status, behind the middleware with
// MaxPreferWait limit. post sends the key with the body {"amount":1}, or
// another if given. The test's end releases the key if the test did not,
// so that a test that fails while the key is held ends, and says why,
// instead of waiting for its server's handler forever.
func waitServer(t *testing.T, limit time.Duration, status int) (post func(prefer string, body ...string) *http.Response, release func(), runs, claims func() int64) {
	t.Helper()
	held := make(chan struct{})
	release = sync.OnceFunc(func() { close(held) })
	var ran atomic.Int64
	counter := &claimCounter{}
	mw, err := idem.New(idemtest.NewMemoryStore(), &idem.Config{
		Mode: idem.ModeTwoPhase, MaxPreferWait: limit, Metrics: counter,
		ClientID: func(*http.Request) (string, bool) { return "alice", true },
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := ran.Add(1)
		if n == 1 {
			<-held
		}
		w.WriteHeader(status)
		fmt.Fprintf(w, "run %d", n)
	})))
	// A client waits 30 s at most, and the test's end ends every request:
	// either ends a middleware that would claim or run a request forever.
	client := &http.Client{Timeout: 30 * time.Second}
	clients, endClients := context.WithCancel(context.Background())
	t.Cleanup(srv.Close) // which waits for the handlers, so last
	t.Cleanup(endClients)
	t.Cleanup(release)
	post = func(prefer string, body ...string) *http.Response {
		b := `{"amount":1}`
		if len(body) > 0 {
			b = body[0]
		}
		req, _ := http.NewRequestWithContext(clients, "POST", srv.URL+"/v1/charges", strings.NewReader(b))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", "k")
		if prefer != "" {
			req.Header.Set("Prefer", prefer)
		}
		resp, err := client.Do(req)
		if err != nil {
			if clients.Err() == nil { // else the test has ended
				t.Errorf("POST, waiting 30 s at most for the answer: %v", err)
			}
			return nil
		}
		t.Cleanup(func() { resp.Body.Close() })
		return resp
	}
	return post, release, ran.Load, counter.claims.Load
}

// awaitAnswer returns the answer that the channel brings, waiting 30 s at
// most for it.
func awaitAnswer(t *testing.T, answers <-chan *http.Response, which string) *http.Response {
	t.Helper()
	select {
	case resp := <-answers:
		if resp == nil {
			t.Fatalf("%s: no answer", which)
		}
		return resp
	case <-time.After(30 * time.Second):
		t.Fatalf("%s: no answer within 30 s", which)
		return nil
	}
}

// awaitClaims polls until at least n claims were made, for at most 10 s.
func awaitClaims(t *testing.T, claims func() int64, n int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for claims() < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d claims in 10 s, want %d", claims(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestPreferWait(t *testing.T) {
	t.Parallel()
	t.Run("DuplicateGetsTheReplay", func(t *testing.T) {
		t.Parallel()
		post, release, runs, claims := waitServer(t, 30*time.Second, http.StatusCreated)
		first := make(chan *http.Response, 1)
		go func() { first <- post("") }()
		awaitClaims(t, claims, 1)
		dup := make(chan *http.Response, 1)
		go func() { dup <- post("respond-async, wait=30") }()
		awaitClaims(t, claims, 3) // the duplicate found the key in flight and claimed again
		release()
		if resp := awaitAnswer(t, first, "first"); resp.StatusCode != http.StatusCreated {
			t.Fatalf("first: %d", resp.StatusCode)
		}
		resp := awaitAnswer(t, dup, "duplicate")
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusCreated || string(body) != "run 1" || resp.Header.Get(idem.HeaderReplayed) != "true" || resp.Header.Get(idem.HeaderPreferenceApplied) != "wait=30" {
			t.Fatalf("duplicate: %d %v %q, want the replay with Preference-Applied: wait=30", resp.StatusCode, resp.Header, body)
		}
		if runs() != 1 {
			t.Fatalf("handler ran %d times", runs())
		}
	})
	t.Run("CappedAtTheMaximum", func(t *testing.T) {
		t.Parallel()
		post, release, _, claims := waitServer(t, 2*time.Second, http.StatusCreated)
		defer release()
		go post("")
		awaitClaims(t, claims, 1)
		resp := post("wait=100") // waits 2 s for a holder that never finishes
		if resp.StatusCode != http.StatusConflict || resp.Header.Get(idem.HeaderPreferenceApplied) != "wait=2" {
			t.Fatalf("%d %v, want 409 after waiting the maximum, 2 s", resp.StatusCode, resp.Header)
		}
	})
	t.Run("IgnoredUnlessConfigured", func(t *testing.T) {
		t.Parallel()
		post, release, _, claims := waitServer(t, 0, http.StatusCreated)
		defer release()
		go post("")
		awaitClaims(t, claims, 1)
		resp := post("wait=5")
		if resp.StatusCode != http.StatusConflict || resp.Header.Get(idem.HeaderPreferenceApplied) != "" || claims() != 2 {
			t.Fatalf("%d %v after %d claims, want an immediate 409", resp.StatusCode, resp.Header, claims())
		}
	})
	t.Run("AnotherRequestIsNotWaitedFor", func(t *testing.T) {
		t.Parallel()
		post, release, runs, claims := waitServer(t, 30*time.Second, http.StatusCreated)
		defer release()
		go post("")
		awaitClaims(t, claims, 1)
		// The key was first used with another body: waiting cannot change
		// the answer, a 422 at once.
		resp := post("wait=1", `{"amount":2}`)
		if resp.StatusCode != http.StatusUnprocessableEntity || resp.Header.Get(idem.HeaderPreferenceApplied) != "" || claims() != 2 || runs() != 1 {
			t.Fatalf("%d %v after %d claims and %d runs, want an immediate 422 after 2 claims and 1 run", resp.StatusCode, resp.Header, claims(), runs())
		}
	})
	t.Run("RunsWhenTheHolderReleases", func(t *testing.T) {
		t.Parallel()
		post, release, runs, claims := waitServer(t, 30*time.Second, http.StatusServiceUnavailable)
		go post("")
		awaitClaims(t, claims, 1)
		dup := make(chan *http.Response, 1)
		go func() { dup <- post("wait=30") }()
		awaitClaims(t, claims, 3)
		release() // the first answers 503: the key is released
		resp := awaitAnswer(t, dup, "duplicate")
		body, _ := io.ReadAll(resp.Body)
		if string(body) != "run 2" || resp.Header.Get(idem.HeaderReplayed) != "" || runs() != 2 {
			t.Fatalf("duplicate: %d %q after %d runs, want its own run", resp.StatusCode, body, runs())
		}
	})
}
