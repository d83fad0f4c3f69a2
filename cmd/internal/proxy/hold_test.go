package proxy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemstore"
)

// The tests of this file hold an upstream that does not honour keys, as an
// API that cannot change does not, and count its effects per key: on a hold
// route, and by default, no path leads to a second forward of a key once a
// forward may have reached the upstream.

// holdRoute makes every POST under /v1/ a hold route.
func holdRoute(c *Config) { c.Routes = []Route{{Method: "POST", Path: "/v1/*", Policy: PolicyHold}} }

// untilAnswered sends the request until it gets something other than 409
// (the key in flight), for at most 30 s.
func untilAnswered(t *testing.T, target, key, body string) exchange {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp := send(t, "POST", target, key, body)
		if resp.status != http.StatusConflict {
			return resp
		}
		if time.Now().After(deadline) {
			t.Fatalf("the key was still in flight after 30 s")
		}
		time.Sleep(5 * time.Millisecond) // a poll's pause
	}
}

// waitRequests polls until the upstream received n requests with key.
func waitRequests(t *testing.T, up *upstream, key string, n int) {
	t.Helper()
	waitFor(t, func() bool { req, _ := up.count(key); return req >= n })
}

// wantHeld checks that resp is the held outcome-unknown problem.
func wantHeld(t *testing.T, what string, resp exchange) {
	t.Helper()
	if resp.status != http.StatusBadGateway || resp.problemCode(t) != string(idem.ProblemOutcomeUnknown) || !strings.Contains(resp.body, "The key is held") {
		t.Fatalf("%s: %d %q, want the held 502 %s", what, resp.status, resp.body, idem.ProblemOutcomeUnknown)
	}
}

// TestHoldAfterTakeover: a proxy that dies mid-forward (here: one still
// waiting for an upstream that charged, with a lease longer than the other
// proxy's, which is what a killed proxy leaves behind) leaves its key to be
// taken over. The proxy that takes it over on a hold route answers the held
// outcome-unknown problem, and forwards nothing.
func TestHoldAfterTakeover(t *testing.T) {
	t.Parallel()
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			up := newUpstream(t, false)
			store := newStore(t, kind)
			dead := setupOn(t, store, up, func(c *Config) {
				holdRoute(c)
				c.UpstreamTimeout, c.Idem.LockTimeout = time.Hour, 2*time.Hour
			})
			quick := setupOn(t, store, up, func(c *Config) {
				holdRoute(c)
				c.UpstreamTimeout, c.Idem.LockTimeout = 50*time.Millisecond, 200*time.Millisecond
			})
			t.Cleanup(up.releaseSlow) // before the proxies close, which waits for their requests
			first := make(chan exchange, 1)
			go func() { first <- send(t, "POST", dead+"/v1/hang", "hold-vanished", `{"amount":7}`) }()
			waitRequests(t, up, "hold-vanished", 1)
			retry := untilAnswered(t, quick+"/v1/hang", "hold-vanished", `{"amount":7}`)
			wantHeld(t, "retry after the takeover", retry)
			for range 3 {
				again := send(t, "POST", quick+"/v1/hang", "hold-vanished", `{"amount":7}`)
				if again.body != retry.body || again.header.Get("Idempotent-Replayed") != "true" {
					t.Fatalf("later retry: %d %q, want the held problem, replayed", again.status, again.body)
				}
			}
			up.releaseSlow()
			if got := <-first; got.status != http.StatusCreated {
				t.Fatalf("the first request: %d %q, want the upstream's answer to it", got.status, got.body)
			}
			if again := send(t, "POST", dead+"/v1/hang", "hold-vanished", `{"amount":7}`); again.body != retry.body {
				t.Fatalf("retry after the first request ended: %d %q, want the held problem", again.status, again.body)
			}
			req, ch := up.count("hold-vanished")
			if req != 1 || ch != 1 {
				t.Fatalf("upstream saw %d requests and %d charges, want 1 and 1", req, ch)
			}
			t.Logf("retries got %d %s, then its replay; upstream: %d request, %d charge", retry.status, retry.problemCode(t), req, ch)
		})
	}
}

// faultyStore is a real store whose leases fail to store responses, and
// to release keys, while the switches say so: a key store that failed
// (PgBouncer killed, say) right when the response was to be stored.
type faultyStore struct {
	idemstore.RecoveryStore
	failComplete, failRelease atomic.Bool
	checkpoints               atomic.Int64 // recovery points saved
}

func (s *faultyStore) Claim(ctx context.Context, p idemstore.ClaimParams) (idemstore.ClaimResult, error) {
	res, err := s.RecoveryStore.Claim(ctx, p)
	if res.Lease != nil {
		res.Lease = &faultyLease{RecoveryLease: res.Lease.(idemstore.RecoveryLease), s: s}
	}
	return res, err
}

type faultyLease struct {
	idemstore.RecoveryLease
	s *faultyStore
}

var errStoreDown = fmt.Errorf("the key store's connection was closed: %w", idemstore.ErrUnavailable)

func (l *faultyLease) Complete(ctx context.Context, resp *idemstore.Response) error {
	if l.s.failComplete.Load() {
		return errStoreDown
	}
	return l.RecoveryLease.Complete(ctx, resp)
}

func (l *faultyLease) Checkpoint(ctx context.Context, r idemstore.Recovery) error {
	l.s.checkpoints.Add(1)
	return l.RecoveryLease.Checkpoint(ctx, r)
}

func (l *faultyLease) Release(ctx context.Context) error {
	if l.s.failRelease.Load() {
		return errStoreDown
	}
	return l.RecoveryLease.Release(ctx)
}

// TestHoldAfterFailedStore: the upstream answered and the client got the
// answer, streamed, but the key store failed when the response was to be
// stored. The middleware releases such a key (or, when the release fails
// too, its lease expires); on a hold route the retry that claims it gets the
// held problem, and nothing is forwarded again.
func TestHoldAfterFailedStore(t *testing.T) {
	t.Parallel()
	for _, kind := range storeKinds {
		for _, releaseFails := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/ReleaseFails=%v", kind, releaseFails), func(t *testing.T) {
				t.Parallel()
				up := newUpstream(t, false)
				store := &faultyStore{RecoveryStore: newStore(t, kind).(idemstore.RecoveryStore)}
				base := setupOn(t, store, up, func(c *Config) {
					holdRoute(c)
					// Generous: the first forward must be answered within it
					// on a loaded machine; ReleaseFails waits out the lease.
					c.UpstreamTimeout, c.Idem.LockTimeout = 2*time.Second, 3*time.Second
				})
				store.failComplete.Store(true)
				store.failRelease.Store(releaseFails)
				first := send(t, "POST", base+"/v1/charges", "hold-unstored", `{"amount":7}`)
				if first.status != http.StatusCreated {
					t.Fatalf("first request: %d %q, want the upstream's 201, streamed before the store failed", first.status, first.body)
				}
				store.failComplete.Store(false)
				store.failRelease.Store(false)
				retry := untilAnswered(t, base+"/v1/charges", "hold-unstored", `{"amount":7}`)
				wantHeld(t, "retry", retry)
				if again := send(t, "POST", base+"/v1/charges", "hold-unstored", `{"amount":7}`); again.body != retry.body || again.header.Get("Idempotent-Replayed") != "true" {
					t.Fatalf("second retry: %d %q, want the held problem, replayed", again.status, again.body)
				}
				req, ch := up.count("hold-unstored")
				if req != 1 || ch != 1 {
					t.Fatalf("upstream saw %d requests and %d charges, want 1 and 1", req, ch)
				}
				t.Logf("first got %d; retries got %d %s; upstream: %d request, %d charge", first.status, retry.status, retry.problemCode(t), req, ch)
			})
		}
	}
}

// TestRetryRouteAfterFailedStore: on a retry route, whose upstream honours
// the key, the same failure lets the retry be forwarded again, with the
// same key, and the upstream answers it without a second charge.
func TestRetryRouteAfterFailedStore(t *testing.T) {
	t.Parallel()
	up := newUpstream(t, true)
	store := &faultyStore{RecoveryStore: newStore(t, "sqlite").(idemstore.RecoveryStore)}
	base := setupOn(t, store, up, retrying)
	store.failComplete.Store(true)
	if first := send(t, "POST", base+"/v1/charges", "retry-unstored", `{"amount":7}`); first.status != http.StatusCreated {
		t.Fatalf("first request: %d %q", first.status, first.body)
	}
	store.failComplete.Store(false)
	retry := send(t, "POST", base+"/v1/charges", "retry-unstored", `{"amount":7}`)
	if retry.status != http.StatusCreated || retry.header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("retry: %d %q, want the upstream's own answer, forwarded", retry.status, retry.body)
	}
	if req, ch := up.count("retry-unstored"); req != 2 || ch != 1 {
		t.Fatalf("upstream saw %d requests and %d charges, want 2 and 1", req, ch)
	}
}

// TestStoreWritesPerForward: a hold route saves its recovery point before
// each forward, one store write; a retry route, whose forward may be
// repeated, saves none for a forward that is answered.
func TestStoreWritesPerForward(t *testing.T) {
	t.Parallel()
	for policy, want := range map[Policy]int64{PolicyHold: 1, PolicyRetry: 0} {
		t.Run(string(policy), func(t *testing.T) {
			t.Parallel()
			up := newUpstream(t, false)
			store := &faultyStore{RecoveryStore: newStore(t, "sqlite").(idemstore.RecoveryStore)}
			base := setupOn(t, store, up, func(c *Config) { c.DefaultPolicy = policy })
			if resp := send(t, "POST", base+"/v1/charges", "k-writes", `{}`); resp.status != http.StatusCreated {
				t.Fatalf("%d %q", resp.status, resp.body)
			}
			if n := store.checkpoints.Load(); n != want {
				t.Fatalf("%d recovery points saved for one answered forward, want %d", n, want)
			}
		})
	}
}

// TestClientStopsReading: a client that reads the status of a large
// response and then nothing more must not hold the forward past its lease,
// where a retry would take the key over and forward it again. Writes to it
// stop well within the lease; the answer is stored for the retry, which
// gets it and is not forwarded.
func TestClientStopsReading(t *testing.T) {
	t.Parallel()
	const size = 64 << 20 // far more than the sockets' buffers hold
	var mu sync.Mutex
	charges := map[string]int{}
	up := largeUpstream(t, size, func(r *http.Request) {
		mu.Lock()
		charges[r.Header.Get("X-Test-Key")]++
		mu.Unlock()
	})
	target, _ := url.Parse(up.URL)
	id, _ := CredentialIdentity([]byte(testSecret))
	p, err := New(&Config{Upstream: target, Store: newStore(t, "sqlite"), Identity: id,
		UpstreamTimeout: 2 * time.Second, Idem: idem.Config{LockTimeout: 6 * time.Second, Logger: discard()}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)

	// The stalled client: it sends the request, reads the status line, and
	// reads nothing more until the test ends.
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.(*net.TCPConn).SetReadBuffer(4096)
	fmt.Fprintf(conn, "POST /v1/exports HTTP/1.1\r\nHost: proxy\r\nAuthorization: Bearer sk_test_alice\r\nIdempotency-Key: stalled\r\nX-Test-Key: stalled\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}")
	status, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil || !strings.Contains(status, "201") {
		t.Fatalf("stalled client's status line: %q, %v", status, err)
	}
	// The retry, once the first request's key is no longer in flight: by
	// then the first forward had to end, within its lease.
	retry := untilAnswered(t, srv.URL+"/v1/exports", "stalled", `{}`)
	if retry.status != http.StatusCreated || retry.header.Get("Idempotent-Replayed") != "true" || retry.problemCode(t) != string(idem.ProblemResponseNotRetained) {
		t.Fatalf("retry: %d %v %q, want the stored 201 %s, replayed", retry.status, retry.header, retry.body, idem.ProblemResponseNotRetained)
	}
	mu.Lock()
	defer mu.Unlock()
	if charges["stalled"] != 1 {
		t.Fatalf("upstream charged %d times, want once", charges["stalled"])
	}
	t.Logf("retry got %d %s (replayed); upstream charged %d time", retry.status, retry.problemCode(t), charges["stalled"])
}

// TestClientGivesUp: a client that gives up while the upstream works
// cancels nothing. The forward goes on, its answer is stored, and the
// client's retry gets it; nothing is forwarded twice, on either policy.
func TestClientGivesUp(t *testing.T) {
	t.Parallel()
	for _, policy := range []Policy{PolicyHold, PolicyRetry} {
		t.Run(string(policy), func(t *testing.T) {
			t.Parallel()
			var charges, cancelled atomic.Int64
			arrived, release := make(chan struct{}, 1), make(chan struct{})
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				io.Copy(io.Discard, r.Body)
				n := charges.Add(1)
				arrived <- struct{}{}
				select {
				case <-release:
				case <-r.Context().Done():
					cancelled.Add(1)
					return
				}
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusCreated)
				fmt.Fprintf(w, `{"id":"ch_%d"}`, n)
			}))
			t.Cleanup(up.Close)
			target, _ := url.Parse(up.URL)
			id, _ := CredentialIdentity([]byte(testSecret))
			p, err := New(&Config{Upstream: target, Store: newStore(t, "sqlite"), Identity: id, Idem: idem.Config{Logger: discard()}, DefaultPolicy: policy})
			if err != nil {
				t.Fatal(err)
			}
			srv := httptest.NewServer(p)
			t.Cleanup(srv.Close)

			ctx, giveUp := context.WithCancel(context.Background())
			req, _ := http.NewRequestWithContext(ctx, "POST", srv.URL+"/v1/charges", strings.NewReader(`{"amount":5}`))
			req.Header.Set("Authorization", "Bearer sk_test_alice")
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Idempotency-Key", "gave-up")
			done := make(chan error, 1)
			go func() {
				resp, err := http.DefaultClient.Do(req)
				if err == nil {
					resp.Body.Close()
				}
				done <- err
			}()
			select {
			case <-arrived:
			case err := <-done:
				t.Fatalf("the request ended before it reached the upstream: %v", err)
			}
			giveUp()
			if err := <-done; !errors.Is(err, context.Canceled) {
				t.Fatalf("the client's request: %v, want it cancelled", err)
			}
			// A forward cancelled with the client is cancelled at once; give
			// it ample time to show, then let the upstream answer.
			deadline := time.After(500 * time.Millisecond)
			for cancelled.Load() == 0 {
				select {
				case <-deadline:
				case <-time.After(5 * time.Millisecond): // a poll's pause
					continue
				}
				break
			}
			close(release)
			if cancelled.Load() != 0 {
				t.Fatal("the forward was cancelled when the client gave up")
			}
			retry := untilAnswered(t, srv.URL+"/v1/charges", "gave-up", `{"amount":5}`)
			if retry.status != http.StatusCreated || retry.body != `{"id":"ch_1"}` || retry.header.Get("Idempotent-Replayed") != "true" {
				t.Fatalf("retry: %d %q, want the first forward's answer, replayed", retry.status, retry.body)
			}
			if n := charges.Load(); n != 1 {
				t.Fatalf("upstream charged %d times, want once", n)
			}
			t.Logf("retry got %d %s (replayed); upstream charged %d time", retry.status, retry.body, charges.Load())
		})
	}
}

// TestDefaultNeverForwardsTwice: with no policy named anywhere, a forward
// whose outcome is unknown is held, as an upstream that cannot change does
// not deduplicate by key.
func TestDefaultNeverForwardsTwice(t *testing.T) {
	t.Parallel()
	up := newUpstream(t, false)
	base := setup(t, "sqlite", up, nil)
	key, resp := resetOnReusedConn(t, up, base, "default", `{"amount":3}`)
	if resp.status != http.StatusBadGateway || resp.problemCode(t) != string(idem.ProblemOutcomeUnknown) {
		t.Fatalf("client got %d %q, want 502 %s", resp.status, resp.body, idem.ProblemOutcomeUnknown)
	}
	for range 2 {
		wantHeld(t, "retry", send(t, "POST", base+"/v1/reset", key, `{"amount":3}`))
	}
	req, ch := up.count(key)
	if req != 1 || ch != 1 {
		t.Fatalf("upstream saw %d requests and %d charges, want 1 and 1", req, ch)
	}
	t.Logf("first got %d; retries got the held 502; upstream: %d request, %d charge", resp.status, req, ch)
}

// TestRetryKeepsFirstSpelling: idem takes "kq" and kq for one key; an
// upstream with its own key table compares the field values. A retry
// spelled otherwise is forwarded with the first forward's spelling, so that
// the upstream recognises it.
func TestRetryKeepsFirstSpelling(t *testing.T) {
	t.Parallel()
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			up := newUpstream(t, true)
			base := setup(t, kind, up, retrying)
			first := send(t, "POST", base+"/v1/bad-gateway", `"kq"`, `{"amount":9}`, "X-Test-Key", "", "X-Test-Key", "kq")
			if first.status != http.StatusBadGateway {
				t.Fatalf("first: %d %q, want 502", first.status, first.body)
			}
			retry := send(t, "POST", base+"/v1/bad-gateway", `kq`, `{"amount":9}`, "X-Test-Key", "", "X-Test-Key", "kq")
			if retry.status != http.StatusCreated {
				t.Fatalf("retry: %d %q, want the upstream's answer", retry.status, retry.body)
			}
			if most, keys := up.maxChargesPerClientKey(); most != 1 || keys != 1 {
				t.Fatalf("upstream charged %d times under %d field values, want once under one", most, keys)
			}
			up.mu.Lock()
			defer up.mu.Unlock()
			if _, ok := up.answers[`"kq"`]; !ok {
				t.Fatalf("upstream's keys %v, want only the first spelling", up.answers)
			}
		})
	}
}

// TestProbeKeepsFirstSpelling: the probe of a retry spelled otherwise asks
// for the key as the first forward sent it, and finds the operation.
func TestProbeKeepsFirstSpelling(t *testing.T) {
	t.Parallel()
	up := newUpstream(t, true)
	counts := newResultCounts()
	base := setup(t, "sqlite", up, probing("/v1/requests/{key}", counts))
	first := send(t, "POST", base+"/v1/bad-gateway", `"pq"`, `{"amount":9}`, "X-Test-Key", "", "X-Test-Key", "pq")
	if first.status != http.StatusBadGateway {
		t.Fatalf("first: %d %q, want 502", first.status, first.body)
	}
	retry := send(t, "POST", base+"/v1/bad-gateway", `pq`, `{"amount":9}`, "X-Test-Key", "", "X-Test-Key", "pq")
	if retry.status != http.StatusOK || retry.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("retry: %d %q, want the operation's response from the status URL", retry.status, retry.body)
	}
	if most, keys := up.maxChargesPerClientKey(); most != 1 || keys != 1 || counts.probe(ProbeCompleted) != 1 {
		t.Fatalf("upstream charged %d times under %d field values, probes %v; want once under one, one completed probe", most, keys, counts.probes)
	}
}

// TestUpstreamUnavailable: the upstream's own 503 with Retry-After says it
// did not handle the request: it is passed on with its body and
// Retry-After, and the retry is forwarded, on a hold route too. A 503
// without Retry-After, as a gateway answers, says nothing of the outcome.
func TestUpstreamUnavailable(t *testing.T) {
	t.Parallel()
	var calls atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		n := calls.Add(1)
		switch {
		case r.URL.Path == "/v1/gateway":
			http.Error(w, "no healthy upstream", http.StatusServiceUnavailable)
		case n == 1:
			w.Header().Set("Retry-After", "7")
			http.Error(w, "down for maintenance", http.StatusServiceUnavailable)
		default:
			w.WriteHeader(http.StatusCreated)
			fmt.Fprint(w, "charged")
		}
	}))
	t.Cleanup(up.Close)
	target, _ := url.Parse(up.URL)
	id, _ := CredentialIdentity([]byte(testSecret))
	p, err := New(&Config{Upstream: target, Store: newStore(t, "sqlite"), Identity: id, Idem: idem.Config{Logger: discard()}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)
	first := send(t, "POST", srv.URL+"/v1/charges", "k-503", `{}`)
	if first.status != http.StatusServiceUnavailable || first.body != "down for maintenance\n" || first.header.Get("Retry-After") != "7" {
		t.Fatalf("first: %d %v %q, want the upstream's own 503, its body and Retry-After", first.status, first.header, first.body)
	}
	if retry := send(t, "POST", srv.URL+"/v1/charges", "k-503", `{}`); retry.status != http.StatusCreated || retry.body != "charged" {
		t.Fatalf("retry: %d %q, want it forwarded", retry.status, retry.body)
	}
	gw := send(t, "POST", srv.URL+"/v1/gateway", "k-gw", `{}`)
	wantHeld(t, "a gateway's 503", gw)
	if !strings.Contains(gw.body, "or a gateway in front of it, answered 503") {
		t.Fatalf("gateway's 503: %q does not say what answered", gw.body)
	}
}

// TestMethodsAndTargets: a request must not escape its key route by the
// spelling of its method or path, as the upstream reads them.
func TestMethodsAndTargets(t *testing.T) {
	t.Parallel()
	up := newUpstream(t, false)
	base := setup(t, "sqlite", up, func(c *Config) { c.Routes = []Route{{Method: "POST", Path: "/v1/*"}} })
	for _, c := range []struct{ method, target, key string }{
		{"post", "/v1/charges", "lower"},
		{"Post", "/v1/charges", "mixed"},
		{"POST", "/v2/../v1/charges", "dots"},
		{"POST", "//v1/charges", "slashes"},
		{"POST", "/v1/./charges", "dot"},
		{"POST", "*", "star"},
	} {
		status, body := rawRequest(t, base, c.method+" "+c.target, "X-Test-Key: "+c.key)
		want, code := http.StatusBadRequest, string(idem.ProblemKeyMissing)
		if c.target == "*" {
			code = string(ProblemBadTarget) // the asterisk form is OPTIONS's alone
		}
		if status != want || !strings.Contains(body, code) {
			t.Errorf("%s %s without a key: %d %q, want %d %s", c.method, c.target, status, body, want, code)
		}
		if req, _ := up.count(c.key); req != 0 {
			t.Errorf("%s %s without a key reached the upstream", c.method, c.target)
		}
	}

	// X-Real-IP is replaced, as X-Forwarded-For is.
	if resp := send(t, "POST", base+"/v1/charges", "k-real-ip", `{}`, "X-Real-IP", "6.6.6.6"); resp.status != http.StatusCreated {
		t.Fatalf("%d %q", resp.status, resp.body)
	}
	up.mu.Lock()
	got := up.headers["k-real-ip"].Values("X-Real-Ip")
	up.mu.Unlock()
	if len(got) != 1 || got[0] != "127.0.0.1" {
		t.Errorf("upstream got X-Real-IP %q, want only the client's address 127.0.0.1", got)
	}
}

// rawRequest sends a request line as it is, with a JSON body and alice's
// credentials, on a connection of its own, and returns the answer.
func rawRequest(t *testing.T, base, line string, header ...string) (int, string) {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "%s HTTP/1.1\r\nHost: proxy\r\nAuthorization: Bearer sk_test_alice\r\nContent-Type: application/json\r\n", line)
	for _, h := range header {
		fmt.Fprintf(conn, "%s\r\n", h)
	}
	fmt.Fprint(conn, "Content-Length: 2\r\nConnection: close\r\n\r\n{}")
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
