package proxy

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem"
)

// resultCounts counts forwards and probes by result.
type resultCounts struct {
	mu       sync.Mutex
	forwards map[ForwardResult]int
	probes   map[ProbeResult]int
}

func newResultCounts() *resultCounts {
	return &resultCounts{forwards: map[ForwardResult]int{}, probes: map[ProbeResult]int{}}
}

func (c *resultCounts) Forward(_ context.Context, _ string, r ForwardResult) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.forwards[r]++
}

func (c *resultCounts) Probe(_ context.Context, _ string, r ProbeResult) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.probes[r]++
}

func (c *resultCounts) probe(r ProbeResult) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.probes[r]
}

func (c *resultCounts) forward(r ForwardResult) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.forwards[r]
}

// probeTimeout bounds the tests' probes: generous, as a probe that a
// loaded machine delays past it fails, and the retry that made it is
// answered as if the status URL had not answered.
const probeTimeout = 20 * time.Second

// probing makes every POST under /v1/ a probe route with the status URL
// tmpl, with probeTimeout, and counts into counts.
func probing(tmpl string, counts *resultCounts) func(*Config) {
	return func(c *Config) {
		c.Routes = []Route{{Method: "POST", Path: "/v1/*", Policy: PolicyProbe, ProbeURL: tmpl}}
		c.ProbeTimeout = probeTimeout
		c.Forwards, c.Probes = counts, counts
	}
}

// unknownFirst sends the first request of key to path, whose outcome must
// be unknown (502), and returns the answer.
func unknownFirst(t *testing.T, base, path, key string) exchange {
	t.Helper()
	resp := send(t, "POST", base+path, key, `{"amount":100}`)
	if resp.status != http.StatusBadGateway || resp.problemCode(t) != string(idem.ProblemOutcomeUnknown) || resp.header.Get("Retry-After") != "1" {
		t.Fatalf("first request: %d %v %q, want 502 %s with Retry-After: 1", resp.status, resp.header, resp.body, idem.ProblemOutcomeUnknown)
	}
	if !strings.Contains(resp.body, "asks the upstream") {
		t.Fatalf("first request: %q does not say that the retry probes", resp.body)
	}
	return resp
}

func TestProbe(t *testing.T) {
	t.Parallel()
	for _, kind := range storeKinds {
		// The upstream charged, recorded the key, then reset the
		// connection: the probe finds the answer, which the retry gets as
		// a replay, and the key keeps it.
		t.Run(kind+"/ChargedThenResetIsReplayed", func(t *testing.T) {
			t.Parallel()
			up := newUpstream(t, true)
			counts := newResultCounts()
			logs := &syncBuffer{}
			base := setup(t, kind, up, func(c *Config) {
				probing("/v1/requests/{key}", counts)(c)
				c.Idem.Logger = slog.New(slog.NewTextHandler(logs, nil))
			})
			key := `"probe-charged"` // a quoted key: the status URL gets it escaped, quotes and all
			unknownFirst(t, base, "/v1/reset", key)
			for i := range 3 {
				retry := send(t, "POST", base+"/v1/reset", key, `{"amount":100}`)
				if retry.status != http.StatusOK || retry.header.Get("Idempotent-Replayed") != "true" || !strings.Contains(retry.body, `"ch_lost_\"probe-charged\""`) {
					t.Fatalf("retry %d: %d %v %q, want the upstream's recorded answer, replayed", i, retry.status, retry.header, retry.body)
				}
				if retry.header.Get("Content-Type") != "application/json" || retry.header.Get(ProbeStatusHeader) != "" {
					t.Fatalf("retry %d: headers %v, want the replay's, not the status URL's", i, retry.header)
				}
			}
			if req, ch := up.count(key); req != 1 || ch != 1 {
				t.Fatalf("upstream saw %d requests and %d charges, want 1 and 1", req, ch)
			}
			if n := up.probeCount(key); n != 1 {
				t.Fatalf("status URL asked %d times, want once: the probe's answer is stored", n)
			}
			if counts.probe(ProbeCompleted) != 1 || counts.forward(ForwardOutcomeUnknown) != 1 || counts.forward(ForwardAnswered) != 0 {
				t.Fatalf("counted forwards %v, probes %v", counts.forwards, counts.probes)
			}
			if got := logs.String(); strings.Count(got, "probe_result=completed") != 1 || strings.Contains(got, "probe-charged") {
				t.Fatalf("logs: want one line with probe_result=completed, and no key:\n%s", got)
			}
		})
		// The upstream failed the first request before it recorded
		// anything: the probe says never received, and the retry is
		// forwarded, once.
		t.Run(kind+"/NeverReceivedIsForwarded", func(t *testing.T) {
			t.Parallel()
			up := newUpstream(t, true)
			counts := newResultCounts()
			base := setup(t, kind, up, probing("/v1/requests/{key}", counts))
			unknownFirst(t, base, "/v1/drop", "probe-dropped")
			retry := send(t, "POST", base+"/v1/drop", "probe-dropped", `{"amount":100}`)
			if retry.status != http.StatusCreated || retry.header.Get("Idempotent-Replayed") != "" {
				t.Fatalf("retry: %d %v %q, want the upstream's own 201, forwarded", retry.status, retry.header, retry.body)
			}
			again := send(t, "POST", base+"/v1/drop", "probe-dropped", `{"amount":100}`)
			if again.body != retry.body || again.header.Get("Idempotent-Replayed") != "true" {
				t.Fatalf("then: %d %q, want the replay of %q", again.status, again.body, retry.body)
			}
			if req, ch := up.count("probe-dropped"); req != 2 || ch != 1 {
				t.Fatalf("upstream saw %d requests and %d charges, want 2 and exactly 1", req, ch)
			}
			if n := up.probeCount("probe-dropped"); n != 1 {
				t.Fatalf("status URL asked %d times, want 1", n)
			}
			if counts.probe(ProbeNotReceived) != 1 || counts.forward(ForwardAnswered) != 1 {
				t.Fatalf("counted forwards %v, probes %v", counts.forwards, counts.probes)
			}
		})
		// The upstream is still working on the key when the proxy gives
		// up: the probe answers 202, so the retry gets the problem again
		// and nothing is forwarded; once the upstream is done, the next
		// retry's probe finds the answer.
		t.Run(kind+"/StillRunningIsNotForwarded", func(t *testing.T) {
			t.Parallel()
			up := newUpstream(t, true)
			counts := newResultCounts()
			base := setup(t, kind, up, func(c *Config) {
				probing("/v1/requests/{key}", counts)(c)
				c.UpstreamTimeout, c.Idem.LockTimeout = time.Second, time.Second+probeTimeout+10*time.Second
			})
			first := send(t, "POST", base+"/v1/slow", "probe-slow", `{"amount":1}`)
			if first.status != http.StatusGatewayTimeout || first.problemCode(t) != string(idem.ProblemOutcomeUnknown) {
				t.Fatalf("first: %d %q, want 504 %s", first.status, first.body, idem.ProblemOutcomeUnknown)
			}
			for i := range 2 {
				retry := send(t, "POST", base+"/v1/slow", "probe-slow", `{"amount":1}`)
				if retry.status != http.StatusGatewayTimeout || retry.problemCode(t) != string(idem.ProblemOutcomeUnknown) ||
					retry.header.Get("Retry-After") != "3" || retry.header.Get("Idempotent-Replayed") != "" || !strings.Contains(retry.body, "still working on it") {
					t.Fatalf("retry %d while the upstream works: %d %v %q, want the 504 problem again with the status URL's Retry-After", i, retry.status, retry.header, retry.body)
				}
			}
			if req, _ := up.count("probe-slow"); req != 1 {
				t.Fatalf("upstream saw %d requests, want 1: nothing forwarded while it works", req)
			}
			up.releaseSlow()
			waitFor(t, func() bool {
				up.mu.Lock()
				defer up.mu.Unlock()
				return up.answers["probe-slow"] != nil
			})
			done := send(t, "POST", base+"/v1/slow", "probe-slow", `{"amount":1}`)
			if done.status != http.StatusOK || done.header.Get("Idempotent-Replayed") != "true" || !strings.Contains(done.body, `"ch_1"`) {
				t.Fatalf("retry after the upstream finished: %d %q, want its answer, replayed", done.status, done.body)
			}
			if req, ch := up.count("probe-slow"); req != 1 || ch != 1 {
				t.Fatalf("upstream saw %d requests and %d charges, want 1 and 1", req, ch)
			}
			if counts.probe(ProbeUnknown) != 2 || counts.probe(ProbeCompleted) != 1 {
				t.Fatalf("counted probes %v, want 2 unknown and 1 completed", counts.probes)
			}
		})
		// The status URL does not answer: the key stays unknown and nothing
		// is forwarded, however often the client retries.
		t.Run(kind+"/StatusURLDownIsNotForwarded", func(t *testing.T) {
			t.Parallel()
			up := newUpstream(t, true)
			counts := newResultCounts()
			base := setup(t, kind, up, func(c *Config) {
				probing("", counts)(c)
				c.ProbeURL = "http://" + resetAddr(t) + "/v1/requests/{key}"
			})
			unknownFirst(t, base, "/v1/reset", "probe-down")
			for i := range 3 {
				retry := send(t, "POST", base+"/v1/reset", "probe-down", `{"amount":100}`)
				if retry.status != http.StatusBadGateway || retry.problemCode(t) != string(idem.ProblemOutcomeUnknown) || retry.header.Get("Retry-After") != "1" ||
					!strings.Contains(retry.body, "did not answer") || !strings.Contains(retry.body, "Nothing was sent upstream") {
					t.Fatalf("retry %d: %d %v %q, want the 502 problem again", i, retry.status, retry.header, retry.body)
				}
			}
			if req, ch := up.count("probe-down"); req != 1 || ch != 1 {
				t.Fatalf("upstream saw %d requests and %d charges, want 1 and 1", req, ch)
			}
			if counts.probe(ProbeFailed) != 3 {
				t.Fatalf("counted probes %v, want 3 failed", counts.probes)
			}
		})
		// A status URL that does not keep the contract (a catch-all 200, a
		// router's 404) settles nothing: the upstream never promised.
		t.Run(kind+"/AnswerWithoutPromiseIsNotForwarded", func(t *testing.T) {
			t.Parallel()
			up := newUpstream(t, false) // its status URL is a plain 404
			counts := newResultCounts()
			base := setup(t, kind, up, probing("/v1/requests/{key}", counts))
			unknownFirst(t, base, "/v1/drop", "probe-router-404")
			catchAll := setup(t, kind, up, probing("/v1/ping?key={key}", counts))
			unknownFirst(t, catchAll, "/v1/drop", "probe-catch-all")
			for _, c := range []struct{ base, key, says string }{
				{base, "probe-router-404", "did not say whether it received it"},
				{catchAll, "probe-catch-all", "did not say whether it received it"},
			} {
				retry := send(t, "POST", c.base+"/v1/drop", c.key, `{"amount":100}`)
				if retry.status != http.StatusBadGateway || retry.problemCode(t) != string(idem.ProblemOutcomeUnknown) || !strings.Contains(retry.body, c.says) {
					t.Fatalf("%s: retry: %d %q, want the 502 problem again, saying %q", c.key, retry.status, retry.body, c.says)
				}
				if req, _ := up.count(c.key); req != 1 {
					t.Fatalf("%s: upstream saw %d requests, want 1", c.key, req)
				}
			}
			if counts.probe(ProbeUnknown) != 2 {
				t.Fatalf("counted probes %v, want 2 unknown", counts.probes)
			}
		})
	}
}

// TestProbeSerializesRetries sends retries of an unknown key while the
// first retry's probe is held open: the lease makes the others wait (409),
// so there is one probe and one forward.
func TestProbeSerializesRetries(t *testing.T) {
	t.Parallel()
	const others = 8
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			up := newUpstream(t, true)
			started, gate := make(chan string, others+1), make(chan struct{})
			up.mu.Lock()
			up.probeStarted, up.probeGate = started, gate
			up.mu.Unlock()
			counts := newResultCounts()
			base := setup(t, kind, up, probing("/v1/requests/{key}", counts))
			unknownFirst(t, base, "/v1/drop", "probe-many")

			first := make(chan exchange, 1)
			go func() { first <- send(t, "POST", base+"/v1/drop", "probe-many", `{"amount":100}`) }()
			select {
			case <-started:
			case <-time.After(30 * time.Second):
				t.Fatal("the first retry did not probe in 30 s")
			}
			var wg sync.WaitGroup
			answers := make(chan exchange, others)
			for range others {
				wg.Go(func() { answers <- send(t, "POST", base+"/v1/drop", "probe-many", `{"amount":100}`) })
			}
			wg.Wait()
			close(answers)
			for a := range answers {
				if a.status != http.StatusConflict {
					t.Errorf("retry during the probe: %d %q, want 409", a.status, a.body)
				}
			}
			close(gate)
			if got := <-first; got.status != http.StatusCreated {
				t.Fatalf("the probing retry: %d %q, want the forwarded 201", got.status, got.body)
			}
			if req, ch := up.count("probe-many"); req != 2 || ch != 1 {
				t.Fatalf("upstream saw %d requests and %d charges, want 2 and 1", req, ch)
			}
			if n := up.probeCount("probe-many"); n != 1 {
				t.Fatalf("status URL asked %d times, want 1", n)
			}
		})
	}
}

// syncBuffer is a log destination that handlers write to concurrently.
type syncBuffer struct {
	mu  sync.Mutex
	buf strings.Builder
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// resetAddr is an address where every connection is reset as soon as it
// is accepted: a status URL that never answers.
func resetAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			conn.(*net.TCPConn).SetLinger(0)
			conn.Close()
		}
	}()
	return ln.Addr().String()
}

// TestProbeAfterTakeover: a proxy whose forward vanished (here: one still
// waiting for an upstream that recorded the charge, with a lease longer than
// the other proxy's) leaves its key to be taken over; the proxy that takes
// it over cannot know whether the forward reached the upstream, so it
// probes first, and replays the recorded answer instead of charging again.
// The quick proxy's clock runs ahead of the slow one's by more than its
// lease: its one retry finds the first request's lease expired, whatever
// the time between them, and its timeouts are generous.
func TestProbeAfterTakeover(t *testing.T) {
	t.Parallel()
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			up := newUpstream(t, true)
			store := newStore(t, kind)
			counts := newResultCounts()
			slow := setupOn(t, store, up, func(c *Config) {
				probing("/v1/requests/{key}", newResultCounts())(c)
				c.UpstreamTimeout, c.Idem.LockTimeout = time.Hour, 2*time.Hour
			})
			const lease = time.Minute
			quick := setupOn(t, store, up, func(c *Config) {
				probing("/v1/requests/{key}", counts)(c)
				c.UpstreamTimeout, c.Idem.LockTimeout = 20*time.Second, lease
				c.Idem.Now = func() time.Time { return time.Now().Add(2 * lease) }
			})
			t.Cleanup(up.releaseSlow) // before the proxies close, which waits for their requests
			first := make(chan exchange, 1)
			go func() { first <- send(t, "POST", slow+"/v1/hang", "probe-vanished", `{"amount":7}`) }()
			deadline := time.Now().Add(30 * time.Second)
			for req, _ := up.count("probe-vanished"); req == 0; req, _ = up.count("probe-vanished") {
				if time.Now().After(deadline) {
					t.Fatal("the first request did not reach the upstream in 30 s")
				}
				time.Sleep(5 * time.Millisecond) // a poll's pause
			}
			// The first request's lease, taken before its forward, expired
			// by the quick proxy's clock and lock timeout.
			retry := send(t, "POST", quick+"/v1/hang", "probe-vanished", `{"amount":7}`)
			if retry.status != http.StatusOK || retry.header.Get("Idempotent-Replayed") != "true" || !strings.Contains(retry.body, `"ch_1"`) {
				t.Fatalf("retry after the takeover: %d %q, want the recorded answer, replayed", retry.status, retry.body)
			}
			up.releaseSlow()
			// The first request's response streams to its client before its
			// key is completed; that fails, as the key is taken over.
			if got := <-first; got.status != http.StatusCreated || !strings.Contains(got.body, `"ch_1"`) {
				t.Fatalf("the first request: %d %q, want the upstream's answer to it", got.status, got.body)
			}
			if req, ch := up.count("probe-vanished"); req != 1 || ch != 1 {
				t.Fatalf("upstream saw %d requests and %d charges, want 1 and 1", req, ch)
			}
			if counts.probe(ProbeCompleted) != 1 {
				t.Fatalf("counted probes %v, want 1 completed", counts.probes)
			}
		})
	}
}

func TestProbeURL(t *testing.T) {
	t.Parallel()
	up, _ := url.Parse("http://up.example:9000/api/?x=1")
	for _, c := range []struct{ tmpl, key, want string }{
		{"/v1/requests/{key}", `"a/b c"`, "http://up.example:9000/api/v1/requests/%22a%2Fb%20c%22"},
		{"/status?key={key}&v=2", "a&b=c d", "http://up.example:9000/api/status?key=a%26b%3Dc+d&v=2"},
		{"https://other.example/k/{key}.json", "k-1", "https://other.example/k/k-1.json"},
	} {
		tmpl, err := parseProbeURL(c.tmpl)
		if err != nil {
			t.Fatalf("%s: %v", c.tmpl, err)
		}
		if got := tmpl.resolve(up).url(c.key); got != c.want {
			t.Errorf("%s with %q: %s, want %s", c.tmpl, c.key, got, c.want)
		}
	}
}
