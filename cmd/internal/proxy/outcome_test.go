package proxy

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/idemkit/idem"
)

// reuseAttempts bounds the tries to get a request onto a reused upstream
// connection, the case in which net/http re-sends requests on its own.
const reuseAttempts = 50

// resetOnReusedConn warms the proxy's upstream connection with a GET, then
// sends the request that makes the upstream charge and reset, until that
// request arrived on the warmed, reused connection. It returns the key and
// the client's answer.
func resetOnReusedConn(t *testing.T, up *upstream, base, name, body string, header ...string) (string, exchange) {
	t.Helper()
	for i := range reuseAttempts {
		key := fmt.Sprintf("%s-%d", name, i)
		if resp := send(t, "GET", base+"/v1/ping", "", ""); resp.status != http.StatusOK {
			t.Fatalf("warm-up: %d %q", resp.status, resp.body)
		}
		resp := send(t, "POST", base+"/v1/reset", key, body, header...)
		up.mu.Lock()
		reused := up.reused[key]
		up.mu.Unlock()
		if reused {
			return key, resp
		}
	}
	t.Fatalf("no request reached the upstream on a reused connection in %d attempts", reuseAttempts)
	return "", exchange{}
}

// TestPlainReverseProxyChargesTwice shows what the proxy guards against:
// through httputil.ReverseProxy, a body-less POST with an Idempotency-Key
// whose reused upstream connection is reset after the upstream charged is
// sent again by net/http, without the proxy seeing the failure.
func TestPlainReverseProxyChargesTwice(t *testing.T) {
	t.Parallel()
	up := newUpstream(t, false)
	target, _ := url.Parse(up.URL)
	plain := httptest.NewServer(httputil.NewSingleHostReverseProxy(target))
	t.Cleanup(plain.Close)
	key, resp := resetOnReusedConn(t, up, plain.URL, "plain", "", "Content-Type", "")
	if req, ch := up.count(key); req != 2 || ch != 2 || resp.status != http.StatusCreated {
		t.Fatalf("upstream saw %d requests and %d charges, client got %d; want net/http's silent re-send: 2, 2 and 201", req, ch, resp.status)
	}
}

func TestOutcomeUnknownAfterReset(t *testing.T) {
	t.Parallel()
	bodies := map[string][]string{
		"JSONBody": {`{"amount":100}`},
		"NoBody":   {"", "Content-Type", ""},
		// net/http also re-sends body-less requests with X-Idempotency-Key.
		"NoBodyXKey": {"", "Content-Type", "", "X-Idempotency-Key", "x-1"},
	}
	for _, kind := range storeKinds {
		for bodyName, b := range bodies {
			t.Run(kind+"/"+bodyName+"/RetryWithKeyHonouringUpstream", func(t *testing.T) {
				t.Parallel()
				up := newUpstream(t, true)
				base := setup(t, kind, up, retrying)
				key, resp := resetOnReusedConn(t, up, base, "retry", b[0], b[1:]...)
				if resp.status != http.StatusBadGateway || resp.problemCode(t) != string(idem.ProblemOutcomeUnknown) {
					t.Fatalf("client got %d %q, want 502 %s", resp.status, resp.body, idem.ProblemOutcomeUnknown)
				}
				if req, ch := up.count(key); req != 1 || ch != 1 {
					t.Fatalf("upstream saw %d requests and %d charges, want 1 and 1: nothing re-sent behind the proxy's back", req, ch)
				}
				retry := send(t, "POST", base+"/v1/reset", key, b[0], b[1:]...)
				if retry.status != http.StatusCreated || retry.header.Get("Idempotent-Replayed") != "" {
					t.Fatalf("retry: %d %v %q, want the upstream's own answer, forwarded", retry.status, retry.header, retry.body)
				}
				again := send(t, "POST", base+"/v1/reset", key, b[0], b[1:]...)
				if again.body != retry.body || again.header.Get("Idempotent-Replayed") != "true" {
					t.Fatalf("second retry: %d %q, want the replay of %q", again.status, again.body, retry.body)
				}
				if req, ch := up.count(key); req != 2 || ch != 1 {
					t.Fatalf("upstream saw %d requests and %d charges, want 2 and exactly 1", req, ch)
				}
			})
			t.Run(kind+"/"+bodyName+"/Hold", func(t *testing.T) {
				t.Parallel()
				up := newUpstream(t, false)
				base := setup(t, kind, up, func(c *Config) { c.DropKey = true })
				key, resp := resetOnReusedConn(t, up, base, "hold", b[0], b[1:]...)
				if resp.status != http.StatusBadGateway || resp.problemCode(t) != string(idem.ProblemOutcomeUnknown) {
					t.Fatalf("client got %d %q, want 502 %s", resp.status, resp.body, idem.ProblemOutcomeUnknown)
				}
				for range 3 {
					retry := send(t, "POST", base+"/v1/reset", key, b[0], b[1:]...)
					if retry.status != resp.status || retry.body != resp.body || retry.header.Get("Idempotent-Replayed") != "true" {
						t.Fatalf("retry: %d %q, want the held problem again", retry.status, retry.body)
					}
				}
				if req, ch := up.count(key); req != 1 || ch != 1 {
					t.Fatalf("upstream saw %d requests and %d charges, want 1 and 1", req, ch)
				}
				up.mu.Lock()
				forwarded := up.headers[key].Get("Idempotency-Key")
				up.mu.Unlock()
				if forwarded != "" {
					t.Fatalf("the key was forwarded despite DropKey")
				}
			})
		}
	}
}

func TestOutcomeUnknownAfterTimeout(t *testing.T) {
	t.Parallel()
	// The slow route answers only when released, so every forward to it
	// times out; a second, which the other routes' answers (a 409 among
	// them) get well within on a loaded machine.
	short := func(c *Config) { c.UpstreamTimeout, c.Idem.LockTimeout = time.Second, 20*time.Second }
	for _, kind := range storeKinds {
		t.Run(kind+"/RetryWithKeyHonouringUpstream", func(t *testing.T) {
			t.Parallel()
			up := newUpstream(t, true)
			base := setup(t, kind, up, func(c *Config) { short(c); retrying(c) })
			resp := send(t, "POST", base+"/v1/slow", "k-slow", `{"amount":1}`)
			if resp.status != http.StatusGatewayTimeout || resp.problemCode(t) != string(idem.ProblemOutcomeUnknown) {
				t.Fatalf("client got %d %q, want 504 %s", resp.status, resp.body, idem.ProblemOutcomeUnknown)
			}
			// The upstream still works on it: it answers 409, which frees the key.
			if busy := send(t, "POST", base+"/v1/slow", "k-slow", `{"amount":1}`); busy.status != http.StatusConflict {
				t.Fatalf("retry while the upstream works: %d %q, want its 409", busy.status, busy.body)
			}
			up.releaseSlow()
			waitFor(t, func() bool {
				up.mu.Lock()
				defer up.mu.Unlock()
				_, ok := up.answers["k-slow"]
				return ok
			})
			done := send(t, "POST", base+"/v1/slow", "k-slow", `{"amount":1}`)
			if done.status != http.StatusCreated {
				t.Fatalf("retry after the upstream finished: %d %q, want 201", done.status, done.body)
			}
			if replay := send(t, "POST", base+"/v1/slow", "k-slow", `{"amount":1}`); replay.body != done.body || replay.header.Get("Idempotent-Replayed") != "true" {
				t.Fatalf("then: %d %q, want the replay", replay.status, replay.body)
			}
			if req, ch := up.count("k-slow"); req != 3 || ch != 1 {
				t.Fatalf("upstream saw %d requests and %d charges, want 3 and exactly 1", req, ch)
			}
		})
		t.Run(kind+"/Hold", func(t *testing.T) {
			t.Parallel()
			up := newUpstream(t, false)
			base := setup(t, kind, up, func(c *Config) { short(c); c.Routes = []Route{{Method: "POST", Path: "/v1/*", Policy: PolicyHold}} })
			resp := send(t, "POST", base+"/v1/slow", "k-slow", `{"amount":1}`)
			if resp.status != http.StatusGatewayTimeout || resp.problemCode(t) != string(idem.ProblemOutcomeUnknown) {
				t.Fatalf("client got %d %q, want 504 %s", resp.status, resp.body, idem.ProblemOutcomeUnknown)
			}
			up.releaseSlow()
			for range 3 {
				if retry := send(t, "POST", base+"/v1/slow", "k-slow", `{"amount":1}`); retry.body != resp.body || retry.header.Get("Idempotent-Replayed") != "true" {
					t.Fatalf("retry: %d %q, want the held problem", retry.status, retry.body)
				}
			}
			if req, ch := up.count("k-slow"); req != 1 || ch != 1 {
				t.Fatalf("upstream saw %d requests and %d charges, want 1 and 1", req, ch)
			}
		})
	}
}

func TestGatewayErrorIsOutcomeUnknown(t *testing.T) {
	t.Parallel()
	up := newUpstream(t, true)
	base := setup(t, "sqlite", up, retrying)
	resp := send(t, "POST", base+"/v1/bad-gateway", "k-502", `{}`)
	if resp.status != http.StatusBadGateway || resp.problemCode(t) != string(idem.ProblemOutcomeUnknown) || strings.Contains(resp.body, "bad gateway") {
		t.Fatalf("client got %d %q, want the proxy's 502 %s", resp.status, resp.body, idem.ProblemOutcomeUnknown)
	}
	if retry := send(t, "POST", base+"/v1/bad-gateway", "k-502", `{}`); retry.status != http.StatusCreated {
		t.Fatalf("retry: %d %q, want the upstream's answer", retry.status, retry.body)
	}
	if req, ch := up.count("k-502"); req != 2 || ch != 1 {
		t.Fatalf("upstream saw %d requests and %d charges, want 2 and 1", req, ch)
	}
}

func TestNotSentReleasesKey(t *testing.T) {
	t.Parallel()
	// Every connection to the upstream is refused. (A port that was
	// listened on and closed is no dead address: the proxy's own test server
	// may get it next, and the proxy then forwards to itself.)
	refused := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		return nil, &net.OpError{Op: "dial", Net: network, Err: syscall.ECONNREFUSED}
	}}
	id, _ := CredentialIdentity([]byte(testSecret))
	target, _ := url.Parse("http://upstream.invalid")
	counts := &forwardCounts{ch: make(chan ForwardResult, 10)}
	p, err := New(&Config{Upstream: target, Store: newStore(t, "sqlite"), Identity: id, Forwards: counts, Transport: refused, Idem: idem.Config{Logger: slog.New(slog.DiscardHandler)}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)
	for i := range 2 {
		resp := send(t, "POST", srv.URL+"/v1/charges", "k-dead", `{}`)
		if resp.status != http.StatusServiceUnavailable || resp.problemCode(t) != string(ProblemUpstreamUnavailable) || resp.header.Get("Idempotent-Replayed") != "" {
			t.Fatalf("attempt %d: %d %q, want 503 %s, not a replay", i, resp.status, resp.body, ProblemUpstreamUnavailable)
		}
		if got := <-counts.ch; got != ForwardNotSent {
			t.Fatalf("attempt %d counted as %s, want %s: the key must be free for it", i, got, ForwardNotSent)
		}
	}
}

// retrying makes routes without a policy of their own retry routes, for an
// upstream that honours the forwarded key.
func retrying(c *Config) { c.DefaultPolicy = PolicyRetry }

// waitFor polls cond until it holds, for at most 30 s.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in 30 s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
