package idemclient

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeClock is an injected clock: sleep records the wait and advances now
// instead of blocking.
type fakeClock struct {
	mu    sync.Mutex
	t     time.Time
	waits []time.Duration
}

func newFakeClock() *fakeClock {
	return &fakeClock{t: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
}

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.waits = append(c.waits, d)
	c.t = c.t.Add(d)
	return nil
}

func (c *fakeClock) recorded() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Duration(nil), c.waits...)
}

// newClient returns a Client for srv with the fake clock installed.
func newClient(t *testing.T, srv *httptest.Server, clock *fakeClock, cfg Config) *Client {
	t.Helper()
	cfg.Transport = srv.Client().Transport
	if clock != nil {
		cfg.now = clock.now
		cfg.sleep = clock.sleep
	}
	c, err := New(&cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return c
}

// seen is one request as the test server received it.
type seen struct {
	method string
	keys   []string
	body   []byte
}

// paymentsServer is a tiny but honest idempotent endpoint: it executes a
// request once per key, stores the response, replays it with
// Idempotent-Replayed: true, and answers 422 when a key comes back with a
// different body. faults scripts what the first attempts meet instead.
type paymentsServer struct {
	mu         sync.Mutex
	faults     []string // per attempt: "execute-then-drop", "500", "409-retry-after-1"
	requests   []seen
	executions map[string]int
	stored     map[string]storedPayment
}

type storedPayment struct {
	body     []byte
	response string
}

func newPaymentsServer(t *testing.T, faults ...string) (*paymentsServer, *httptest.Server) {
	t.Helper()
	p := &paymentsServer{faults: faults, executions: map[string]int{}, stored: map[string]storedPayment{}}
	srv := httptest.NewServer(http.HandlerFunc(p.serveHTTP))
	t.Cleanup(srv.Close)
	return p, srv
}

func (p *paymentsServer) serveHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, "bad body", http.StatusBadRequest)
		return
	}
	key := r.Header.Get(HeaderKey)
	p.mu.Lock()
	defer p.mu.Unlock()
	n := len(p.requests)
	p.requests = append(p.requests, seen{method: r.Method, keys: r.Header.Values(HeaderKey), body: body})
	fault := ""
	if n < len(p.faults) {
		fault = p.faults[n]
	}
	switch fault {
	case "execute-then-drop":
		p.execute(key, body)
		conn, _, err := w.(http.Hijacker).Hijack()
		if err != nil {
			panic(err)
		}
		conn.Close()
		return
	case "500":
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	case "409-retry-after-1":
		w.Header().Set("Retry-After", "1")
		http.Error(w, "a request is outstanding for this key", http.StatusConflict)
		return
	}
	if key == "" {
		http.Error(w, "missing key", http.StatusBadRequest)
		return
	}
	if s, ok := p.stored[key]; ok {
		if !bytes.Equal(s.body, body) {
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusUnprocessableEntity)
			io.WriteString(w, `{"title":"Idempotency-Key is already used","detail":"the body differs","code":"idempotency_key_reused"}`)
			return
		}
		w.Header().Set(HeaderReplayed, "true")
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, s.response)
		return
	}
	w.WriteHeader(http.StatusCreated)
	io.WriteString(w, p.execute(key, body))
}

// execute performs the operation for key unless it was performed before.
func (p *paymentsServer) execute(key string, body []byte) string {
	if s, ok := p.stored[key]; ok {
		return s.response
	}
	p.executions[key]++
	resp := `{"id":"pay_` + string(rune('0'+len(p.stored)+1)) + `","status":"succeeded"}`
	p.stored[key] = storedPayment{body: body, response: resp}
	return resp
}

func (p *paymentsServer) snapshot() ([]seen, map[string]int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	execs := make(map[string]int, len(p.executions))
	for k, v := range p.executions {
		execs[k] = v
	}
	return append([]seen(nil), p.requests...), execs
}

// doFuncs sends a request through Client.Do or through an http.Client that
// uses Client.Transport.
var doFuncs = []struct {
	name string
	do   func(c *Client, req *http.Request) (*http.Response, error)
}{
	{"ClientDo", func(c *Client, req *http.Request) (*http.Response, error) { return c.Do(req) }},
	{"HTTPClientTransport", func(c *Client, req *http.Request) (*http.Response, error) {
		return (&http.Client{Transport: c.Transport()}).Do(req)
	}},
}

// bodyKinds builds a POST whose body can be rewound with GetBody, or one
// that idemclient has to buffer.
var bodyKinds = []struct {
	name       string
	newRequest func(ctx context.Context, url string, body []byte) (*http.Request, error)
}{
	{"GetBody", func(ctx context.Context, url string, body []byte) (*http.Request, error) {
		return http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	}},
	{"BufferedBody", func(ctx context.Context, url string, body []byte) (*http.Request, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, io.NopCloser(bytes.NewReader(body)))
		if err == nil && req.GetBody != nil {
			panic("expected a body without GetBody")
		}
		return req, err
	}},
}

func TestFlakyServerExecutesOnce(t *testing.T) {
	t.Parallel()
	body := []byte(`{"amount":100,"currency":"usd","customer":"cus_1"}`)
	for _, df := range doFuncs {
		for _, bk := range bodyKinds {
			t.Run(df.name+"/"+bk.name, func(t *testing.T) {
				t.Parallel()
				p, srv := newPaymentsServer(t, "execute-then-drop", "500", "409-retry-after-1")
				clock := newFakeClock()
				c := newClient(t, srv, clock, Config{})
				req, err := bk.newRequest(context.Background(), srv.URL+"/v1/payments", body)
				if err != nil {
					t.Fatal(err)
				}
				resp, err := df.do(c, req)
				if err != nil {
					t.Fatalf("do: %v", err)
				}
				defer resp.Body.Close()
				got, err := io.ReadAll(resp.Body)
				if err != nil {
					t.Fatalf("reading response: %v", err)
				}

				requests, execs := p.snapshot()
				if len(requests) != 4 {
					t.Fatalf("server saw %d attempts, want 4", len(requests))
				}
				key := requests[0].keys
				if len(key) != 1 || key[0] == "" {
					t.Fatalf("first attempt keys = %q, want one key", key)
				}
				for i, r := range requests {
					if len(r.keys) != 1 || r.keys[0] != key[0] {
						t.Errorf("attempt %d carried keys %q, want %q", i+1, r.keys, key[0])
					}
					if !bytes.Equal(r.body, body) {
						t.Errorf("attempt %d carried body %q, want %q", i+1, r.body, body)
					}
				}
				if len(execs) != 1 || execs[key[0]] != 1 {
					t.Errorf("executions = %v, want exactly one for key %s", execs, key[0])
				}
				if resp.StatusCode != http.StatusCreated || !Replayed(resp) {
					t.Errorf("final response: status %d, replayed %v; want 201 replayed", resp.StatusCode, Replayed(resp))
				}
				if want := p.stored[key[0]].response; string(got) != want {
					t.Errorf("final body %q, want the stored %q", got, want)
				}
				if n := Attempts(resp); n != 4 {
					t.Errorf("Attempts = %d, want 4", n)
				}
				if k := resp.Request.Header.Get(HeaderKey); k != key[0] {
					t.Errorf("resp.Request key = %q, want %q", k, key[0])
				}

				waits := clock.recorded()
				if len(waits) != 3 {
					t.Fatalf("waits = %v, want 3", waits)
				}
				for i, ceiling := range []time.Duration{BaseDelayDefault, 2 * BaseDelayDefault} {
					if waits[i] < 0 || waits[i] > ceiling {
						t.Errorf("wait %d = %v, want within [0, %v]", i+1, waits[i], ceiling)
					}
				}
				if waits[2] != time.Second {
					t.Errorf("wait after 409 = %v, want the Retry-After of 1s", waits[2])
				}
			})
		}
	}
}

func TestKeyReusedStopsAtOnce(t *testing.T) {
	t.Parallel()
	problem := `{"type":"https://example.com/problems/key-reused","title":"Idempotency-Key is already used","detail":"amount differs from the first request","code":"idempotency_key_reused"}`
	var mu sync.Mutex
	attempts := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		attempts++
		mu.Unlock()
		w.Header().Set("Content-Type", "application/problem+json; charset=utf-8")
		w.WriteHeader(http.StatusUnprocessableEntity)
		io.WriteString(w, problem)
	}))
	t.Cleanup(srv.Close)
	clock := newFakeClock()
	c := newClient(t, srv, clock, Config{})

	ctx := WithKey(context.Background(), "order-42")
	resp, err := c.Post(ctx, srv.URL, "application/json", []byte(`{"amount":200}`))
	if resp != nil {
		t.Errorf("Post returned a response with status %d; want none", resp.StatusCode)
	}
	if !errors.Is(err, ErrKeyReused) {
		t.Fatalf("err = %v, want ErrKeyReused", err)
	}
	var kre *KeyReusedError
	if !errors.As(err, &kre) {
		t.Fatalf("err = %T, want *KeyReusedError", err)
	}
	want := KeyReusedError{
		StatusCode: 422,
		Key:        "order-42",
		Type:       "https://example.com/problems/key-reused",
		Title:      "Idempotency-Key is already used",
		Detail:     "amount differs from the first request",
		Code:       "idempotency_key_reused",
	}
	if kre.StatusCode != want.StatusCode || kre.Key != want.Key || kre.Type != want.Type ||
		kre.Title != want.Title || kre.Detail != want.Detail || kre.Code != want.Code {
		t.Errorf("KeyReusedError = %+v, want %+v", *kre, want)
	}
	if string(kre.Body) != problem {
		t.Errorf("Body = %q, want the problem document", kre.Body)
	}
	if !strings.Contains(err.Error(), "amount differs from the first request") {
		t.Errorf("error %q does not carry the problem detail", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if attempts != 1 {
		t.Errorf("server saw %d attempts, want 1", attempts)
	}
	if w := clock.recorded(); len(w) != 0 {
		t.Errorf("client waited %v, want no wait", w)
	}
}

func TestContextCancellation(t *testing.T) {
	t.Parallel()

	// result is what a Do call running in a goroutine returned.
	type result struct {
		resp *http.Response
		err  error
	}
	// await waits for the Do call, failing the test if it does not stop.
	await := func(t *testing.T, done <-chan result) result {
		t.Helper()
		select {
		case r := <-done:
			return r
		case <-time.After(10 * time.Second):
			t.Fatal("Do did not return after the context was cancelled")
			return result{}
		}
	}
	checkCanceled := func(t *testing.T, r result, wantAttempts int) {
		t.Helper()
		if r.resp != nil {
			r.resp.Body.Close()
			t.Errorf("got a response with status %d, want none", r.resp.StatusCode)
		}
		if !errors.Is(r.err, context.Canceled) {
			t.Fatalf("err = %v, want context.Canceled", r.err)
		}
		var re *RetryError
		if !errors.As(r.err, &re) {
			t.Fatalf("err = %T, want a *RetryError", r.err)
		}
		if re.Attempts != wantAttempts || re.Key == "" {
			t.Errorf("RetryError = %+v, want %d attempts and the key", re, wantAttempts)
		}
	}
	counter := func(t *testing.T, h http.HandlerFunc) (*httptest.Server, func() int) {
		t.Helper()
		var mu sync.Mutex
		n := 0
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			n++
			mu.Unlock()
			h(w, r)
		}))
		t.Cleanup(srv.Close)
		return srv, func() int { mu.Lock(); defer mu.Unlock(); return n }
	}
	unavailable := func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "unavailable", http.StatusServiceUnavailable)
	}

	t.Run("BeforeFirstAttempt", func(t *testing.T) {
		t.Parallel()
		srv, count := counter(t, unavailable)
		c := newClient(t, srv, newFakeClock(), Config{})
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		resp, err := c.Post(ctx, srv.URL, "application/json", []byte(`{}`))
		checkCanceled(t, result{resp, err}, 0)
		if n := count(); n != 0 {
			t.Errorf("server saw %d attempts, want 0", n)
		}
	})

	t.Run("DuringBackoffWait", func(t *testing.T) {
		t.Parallel()
		srv, count := counter(t, unavailable)
		waiting := make(chan time.Duration, 1)
		cfg := Config{
			Transport:  srv.Client().Transport,
			MaxElapsed: 2 * time.Hour,
			Backoff:    func(int, time.Duration, time.Duration) time.Duration { return time.Hour },
		}
		cfg.sleep = func(ctx context.Context, d time.Duration) error {
			waiting <- d
			return sleep(ctx, d) // the real timer
		}
		c, err := New(&cfg)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		done := make(chan result, 1)
		go func() {
			resp, err := c.Post(ctx, srv.URL, "application/json", []byte(`{}`))
			done <- result{resp, err}
		}()
		if d := <-waiting; d != time.Hour {
			t.Errorf("waiting %v, want 1h", d)
		}
		cancel()
		checkCanceled(t, await(t, done), 1)
		if n := count(); n != 1 {
			t.Errorf("server saw %d attempts, want 1", n)
		}
	})

	t.Run("DuringAttempt", func(t *testing.T) {
		t.Parallel()
		arrived := make(chan struct{}, 1)
		srv, count := counter(t, func(w http.ResponseWriter, r *http.Request) {
			io.ReadAll(r.Body) // the server notices a closed connection only once the body is read
			arrived <- struct{}{}
			<-r.Context().Done() // hold the attempt until the client goes away
		})
		c := newClient(t, srv, newFakeClock(), Config{AttemptTimeout: -1})
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		done := make(chan result, 1)
		go func() {
			resp, err := c.Post(ctx, srv.URL, "application/json", []byte(`{}`))
			done <- result{resp, err}
		}()
		<-arrived
		cancel()
		checkCanceled(t, await(t, done), 1)
		if n := count(); n != 1 {
			t.Errorf("server saw %d attempts, want 1", n)
		}
	})

	t.Run("WaitBeyondContextDeadlineReturnsLastResponse", func(t *testing.T) {
		t.Parallel()
		srv, count := counter(t, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Retry-After", "3600")
			http.Error(w, "still running", http.StatusConflict)
		})
		clock := newFakeClock()
		c := newClient(t, srv, nil, Config{MaxElapsed: 2 * time.Hour})
		c.rt.cfg.sleep = clock.sleep
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		resp, err := c.Post(ctx, srv.URL, "application/json", []byte(`{}`))
		if err != nil {
			t.Fatalf("Post: %v", err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusConflict || Attempts(resp) != 1 {
			t.Errorf("status %d after %d attempts, want the 409 after 1", resp.StatusCode, Attempts(resp))
		}
		if n := count(); n != 1 {
			t.Errorf("server saw %d attempts, want 1", n)
		}
		if w := clock.recorded(); len(w) != 0 {
			t.Errorf("client waited %v, want no wait", w)
		}
	})
}

var keyPattern = regexp.MustCompile(`^"[A-Z2-7]{26}"$`)

func TestKeysByMethod(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name         string
		method       string
		header       string // an Idempotency-Key the caller sets
		ctxKey       string // a key passed with WithKey
		bare         bool
		wantAttempts int
		wantKey      func(string) bool
	}{
		{name: "PostGetsNewKey", method: http.MethodPost, wantAttempts: 3, wantKey: keyPattern.MatchString},
		{name: "PatchGetsNewKey", method: http.MethodPatch, wantAttempts: 3, wantKey: keyPattern.MatchString},
		{name: "GetSentOnceWithoutKey", method: http.MethodGet, wantAttempts: 1},
		{name: "HeadSentOnceWithoutKey", method: http.MethodHead, wantAttempts: 1},
		{name: "OptionsSentOnceWithoutKey", method: http.MethodOptions, wantAttempts: 1},
		{name: "PutSentOnceWithoutKey", method: http.MethodPut, wantAttempts: 1},
		{name: "DeleteSentOnceWithoutKey", method: http.MethodDelete, wantAttempts: 1},
		{name: "CallerHeaderKeptAsIs", method: http.MethodPost, header: "caller-key-1", ctxKey: "ignored", wantAttempts: 3,
			wantKey: func(k string) bool { return k == "caller-key-1" }},
		{name: "ContextKeyQuoted", method: http.MethodPost, ctxKey: `order "42"`, wantAttempts: 3,
			wantKey: func(k string) bool { return k == `"order \"42\""` }},
		{name: "ContextKeyBare", method: http.MethodPost, ctxKey: "order-42", bare: true, wantAttempts: 3,
			wantKey: func(k string) bool { return k == "order-42" }},
	}
	for _, df := range doFuncs {
		for _, tt := range tests {
			t.Run(df.name+"/"+tt.name, func(t *testing.T) {
				t.Parallel()
				var mu sync.Mutex
				var got []seen
				srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					body, _ := io.ReadAll(r.Body)
					mu.Lock()
					got = append(got, seen{method: r.Method, keys: r.Header.Values(HeaderKey), body: body})
					mu.Unlock()
					http.Error(w, "unavailable", http.StatusServiceUnavailable)
				}))
				t.Cleanup(srv.Close)
				c := newClient(t, srv, newFakeClock(), Config{MaxAttempts: 3, BareKey: tt.bare})
				ctx := context.Background()
				if tt.ctxKey != "" {
					ctx = WithKey(ctx, tt.ctxKey)
				}
				req, err := http.NewRequestWithContext(ctx, tt.method, srv.URL, strings.NewReader("payload"))
				if err != nil {
					t.Fatal(err)
				}
				if tt.header != "" {
					req.Header.Set(HeaderKey, tt.header)
				}
				resp, err := df.do(c, req)
				if err != nil {
					t.Fatalf("do: %v", err)
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusServiceUnavailable {
					t.Errorf("status = %d, want the last 503", resp.StatusCode)
				}
				if tt.header == "" && req.Header.Get(HeaderKey) != "" {
					t.Error("the caller's request was modified")
				}
				mu.Lock()
				defer mu.Unlock()
				if len(got) != tt.wantAttempts {
					t.Fatalf("server saw %d requests, want %d", len(got), tt.wantAttempts)
				}
				for i, s := range got {
					if s.method != tt.method {
						t.Errorf("request %d method %s, want %s", i+1, s.method, tt.method)
					}
					if tt.wantKey == nil {
						if len(s.keys) != 0 {
							t.Errorf("request %d carried keys %q, want none", i+1, s.keys)
						}
						continue
					}
					if len(s.keys) != 1 || !tt.wantKey(s.keys[0]) || s.keys[0] != got[0].keys[0] {
						t.Errorf("request %d carried keys %q, want the same valid key as the first (%q)", i+1, s.keys, got[0].keys)
					}
					if tt.method != http.MethodHead && string(s.body) != "payload" {
						t.Errorf("request %d body %q, want %q", i+1, s.body, "payload")
					}
				}
			})
		}
	}
}

func TestNewKeyPerOperation(t *testing.T) {
	t.Parallel()
	p, srv := newPaymentsServer(t)
	c := newClient(t, srv, newFakeClock(), Config{})
	const operations = 20
	for i := range operations {
		resp, err := c.Post(context.Background(), srv.URL, "application/json", []byte(`{"n":`+string(rune('a'+i))+`}`))
		if err != nil {
			t.Fatalf("operation %d: %v", i, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated || Replayed(resp) {
			t.Errorf("operation %d: status %d replayed %v, want a new 201", i, resp.StatusCode, Replayed(resp))
		}
	}
	requests, execs := p.snapshot()
	if len(requests) != operations || len(execs) != operations {
		t.Errorf("%d requests, %d distinct keys executed; want %d of each", len(requests), len(execs), operations)
	}
}

func TestRetriesByStatus(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name         string
		status       int
		wantAttempts int
	}{
		{"OKNotRetried", http.StatusOK, 1},
		{"CreatedNotRetried", http.StatusCreated, 1},
		{"BadRequestNotRetried", http.StatusBadRequest, 1},
		{"NotFoundNotRetried", http.StatusNotFound, 1},
		{"UnprocessableNotRetried", http.StatusUnprocessableEntity, 1},
		{"NotImplementedNotRetried", http.StatusNotImplemented, 1},
		{"ConflictRetried", http.StatusConflict, 3},
		{"TooManyRequestsRetried", http.StatusTooManyRequests, 3},
		{"InternalServerErrorRetried", http.StatusInternalServerError, 3},
		{"BadGatewayRetried", http.StatusBadGateway, 3},
		{"UnavailableRetried", http.StatusServiceUnavailable, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var mu sync.Mutex
			n := 0
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				n++
				mu.Unlock()
				w.WriteHeader(tt.status)
			}))
			t.Cleanup(srv.Close)
			clock := newFakeClock()
			c := newClient(t, srv, clock, Config{MaxAttempts: 3})
			// The transport returns every status as a response, 422 included.
			req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader("x"))
			resp, err := (&http.Client{Transport: c.Transport()}).Do(req)
			if err != nil {
				t.Fatalf("do: %v", err)
			}
			resp.Body.Close()
			mu.Lock()
			defer mu.Unlock()
			if resp.StatusCode != tt.status || n != tt.wantAttempts || Attempts(resp) != tt.wantAttempts {
				t.Errorf("status %d after %d attempts (Attempts %d); want %d after %d",
					resp.StatusCode, n, Attempts(resp), tt.status, tt.wantAttempts)
			}
			if w := clock.recorded(); len(w) != tt.wantAttempts-1 {
				t.Errorf("waited %d times, want %d", len(w), tt.wantAttempts-1)
			}
		})
	}
}

func TestRetryAfter(t *testing.T) {
	t.Parallel()
	clockStart := newFakeClock().now()
	tests := []struct {
		name       string
		status     int
		retryAfter string
		wantWait   time.Duration
	}{
		{"ConflictDeltaSeconds", http.StatusConflict, "2", 2 * time.Second},
		{"TooManyRequestsDeltaSeconds", http.StatusTooManyRequests, "3", 3 * time.Second},
		{"TooManyRequestsHTTPDate", http.StatusTooManyRequests, clockStart.Add(7 * time.Second).Format(http.TimeFormat), 7 * time.Second},
		{"ConflictDateInThePast", http.StatusConflict, clockStart.Add(-time.Hour).Format(http.TimeFormat), 0},
		{"UnavailableZero", http.StatusServiceUnavailable, "0", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var mu sync.Mutex
			n := 0
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				defer mu.Unlock()
				n++
				if n == 1 {
					w.Header().Set("Retry-After", tt.retryAfter)
					w.WriteHeader(tt.status)
					return
				}
				w.WriteHeader(http.StatusCreated)
			}))
			t.Cleanup(srv.Close)
			clock := newFakeClock()
			c := newClient(t, srv, clock, Config{})
			resp, err := c.Post(context.Background(), srv.URL, "text/plain", []byte("x"))
			if err != nil {
				t.Fatalf("Post: %v", err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusCreated || Attempts(resp) != 2 {
				t.Errorf("status %d after %d attempts, want 201 after 2", resp.StatusCode, Attempts(resp))
			}
			if w := clock.recorded(); len(w) != 1 || w[0] != tt.wantWait {
				t.Errorf("waits = %v, want [%v]", w, tt.wantWait)
			}
		})
	}
}

func TestNewConfig(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		cfg     *Config
		wantErr bool
	}{
		{"NilConfig", nil, false},
		{"ZeroConfig", &Config{}, false},
		{"SingleAttempt", &Config{MaxAttempts: 1}, false},
		{"NoAttemptTimeout", &Config{AttemptTimeout: -1}, false},
		{"NegativeAttempts", &Config{MaxAttempts: -1}, true},
		{"NegativeBaseDelay", &Config{BaseDelay: -time.Second}, true},
		{"MaxDelayBelowBase", &Config{BaseDelay: time.Second, MaxDelay: time.Millisecond}, true},
		{"NegativeMaxElapsed", &Config{MaxElapsed: -time.Second}, true},
		{"NegativeMaxBodyBytes", &Config{MaxBodyBytes: -1}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, err := New(tt.cfg)
			if tt.wantErr {
				if !errors.Is(err, ErrInvalidConfig) || c != nil {
					t.Errorf("New = %v, %v; want ErrInvalidConfig", c, err)
				}
				return
			}
			if err != nil || c == nil {
				t.Fatalf("New: %v", err)
			}
		})
	}
	c, err := New(nil)
	if err != nil {
		t.Fatal(err)
	}
	got := c.rt.cfg
	if got.MaxAttempts != MaxAttemptsDefault || got.BaseDelay != BaseDelayDefault || got.MaxDelay != MaxDelayDefault ||
		got.MaxElapsed != MaxElapsedDefault || got.AttemptTimeout != AttemptTimeoutDefault ||
		got.MaxBodyBytes != MaxBodyBytesDefault || got.Transport != http.DefaultTransport {
		t.Errorf("defaults not applied: %+v", got)
	}
}

func TestReplayed(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		value string
		want  bool
	}{
		{"True", "true", true},
		{"TrueAnyCase", " True ", true},
		{"False", "false", false},
		{"Missing", "", false},
		{"Other", "yes", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			resp := &http.Response{Header: http.Header{}}
			if tt.value != "" {
				resp.Header.Set(HeaderReplayed, tt.value)
			}
			if got := Replayed(resp); got != tt.want {
				t.Errorf("Replayed(%q) = %v, want %v", tt.value, got, tt.want)
			}
		})
	}
	if Replayed(nil) || Attempts(nil) != 0 {
		t.Error("Replayed(nil) or Attempts(nil) reports a retry")
	}
}
