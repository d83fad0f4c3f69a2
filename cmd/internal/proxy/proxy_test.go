package proxy

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/tls"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idempg"
	"github.com/idemkit/idem/idemsqlite"
	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

var storeKinds = []string{"sqlite", "postgres"}

const testSecret = "0123456789abcdef0123456789abcdef"

// newStore returns a migrated key store of a kind on a fresh database.
func newStore(t *testing.T, kind string) idemstore.Store {
	t.Helper()
	ctx := context.Background()
	logger := slog.New(slog.DiscardHandler)
	if kind == "mysql" {
		return newMySQLStore(t)
	}
	if kind == "redis" {
		return newRedisStore(t)
	}
	if kind == "postgres" {
		s, err := idempg.New(pgtest.NewPool(t), &idempg.Config{Logger: logger})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Migrate(ctx); err != nil {
			t.Fatal(err)
		}
		return s
	}
	s, err := idemsqlite.Open(filepath.Join(t.TempDir(), "keys.db"), &idemsqlite.Config{Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	return s
}

// forwardCounts counts forwards by result.
type forwardCounts struct {
	ch chan ForwardResult
}

func (f *forwardCounts) Forward(_ context.Context, _ string, r ForwardResult) { f.ch <- r }

// setup starts a proxy in front of up on a store of kind; edit changes the
// configuration. It returns the proxy's URL.
func setup(t *testing.T, kind string, up *upstream, edit func(*Config)) string {
	t.Helper()
	return setupOn(t, newStore(t, kind), up, edit)
}

// setupOn starts a proxy in front of up on store, as setup does.
func setupOn(t *testing.T, store idemstore.Store, up *upstream, edit func(*Config)) string {
	t.Helper()
	id, err := CredentialIdentity([]byte(testSecret))
	if err != nil {
		t.Fatal(err)
	}
	target, _ := url.Parse(up.URL)
	cfg := Config{
		Upstream: target, Store: store, Identity: id,
		Idem: idem.Config{Logger: slog.New(slog.DiscardHandler)},
	}
	if edit != nil {
		edit(&cfg)
	}
	p, err := New(&cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)
	return srv.URL
}

// exchange is a response, read whole.
type exchange struct {
	status int
	header http.Header
	body   string
}

func (e exchange) problemCode(t *testing.T) string {
	t.Helper()
	var p idem.Problem
	if err := json.Unmarshal([]byte(e.body), &p); err != nil {
		t.Fatalf("status %d, body %q: not a problem document: %v", e.status, e.body, err)
	}
	return p.Code
}

// send sends one request through a client that never retries.
func send(t *testing.T, method, target, key, body string, header ...string) exchange {
	t.Helper()
	req, err := http.NewRequest(method, target, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body == "" {
		req.Body = http.NoBody
	}
	req.Header.Set("Authorization", "Bearer sk_test_alice")
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
		req.Header.Set("X-Test-Key", key)
	}
	for i := 0; i+1 < len(header); i += 2 {
		if header[i+1] == "" {
			req.Header.Del(header[i])
		} else {
			req.Header.Add(header[i], header[i+1])
		}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return exchange{resp.StatusCode, resp.Header, string(b)}
}

func TestContract(t *testing.T) {
	t.Parallel()
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			up := newUpstream(t, false)
			base := setup(t, kind, up, nil)
			body := `{"amount":100,"currency":"usd"}`

			t.Run("ReplaysWithOneForward", func(t *testing.T) {
				first := send(t, "POST", base+"/v1/charges", "k-replay", body)
				if first.status != http.StatusCreated || first.header.Get("Location") == "" {
					t.Fatalf("first: %d %v %q", first.status, first.header, first.body)
				}
				again := send(t, "POST", base+"/v1/charges", "k-replay", body)
				if again.status != first.status || again.body != first.body || again.header.Get("Idempotent-Replayed") != "true" || again.header.Get("Location") != first.header.Get("Location") {
					t.Fatalf("retry: %d %v %q, want the replay of %d %q", again.status, again.header, again.body, first.status, first.body)
				}
				if req, ch := up.count("k-replay"); req != 1 || ch != 1 {
					t.Fatalf("upstream saw %d requests and %d charges, want 1 and 1", req, ch)
				}
			})
			t.Run("Headers", func(t *testing.T) {
				resp := send(t, "POST", base+"/v1/charges", "k-headers", body,
					"Connection", "X-Secret-Hop", "X-Secret-Hop", "1", "Keep-Alive", "timeout=5", "Forwarded", "for=6.6.6.6", "X-Forwarded-For", "6.6.6.6")
				if resp.status != http.StatusCreated {
					t.Fatalf("%d %q", resp.status, resp.body)
				}
				if resp.header.Get("X-Hop") != "" {
					t.Errorf("the upstream's hop-by-hop header X-Hop reached the client")
				}
				up.mu.Lock()
				h := up.headers["k-headers"]
				up.mu.Unlock()
				for _, name := range []string{"X-Secret-Hop", "Keep-Alive"} {
					if h.Get(name) != "" {
						t.Errorf("hop-by-hop header %s reached the upstream", name)
					}
				}
				if h.Get("Idempotency-Key") != "k-headers" {
					t.Errorf("upstream got Idempotency-Key %q, want the client's key", h.Get("Idempotency-Key"))
				}
				if got := h.Get("X-Forwarded-For"); got != "127.0.0.1" {
					t.Errorf("X-Forwarded-For %q, want only the client's address 127.0.0.1", got)
				}
				if got := h.Values("Forwarded"); len(got) != 1 || !strings.HasPrefix(got[0], `for="127.0.0.1";host=`) {
					t.Errorf("Forwarded %q, want one element for 127.0.0.1", got)
				}
			})
			t.Run("Mismatch", func(t *testing.T) {
				send(t, "POST", base+"/v1/charges", "k-mismatch", body)
				resp := send(t, "POST", base+"/v1/charges", "k-mismatch", `{"amount":200,"currency":"usd"}`)
				if resp.status != http.StatusUnprocessableEntity || resp.problemCode(t) != string(idem.ProblemKeyReused) {
					t.Fatalf("%d %q, want 422", resp.status, resp.body)
				}
			})
			t.Run("KeysAreScopedByCredential", func(t *testing.T) {
				a := send(t, "POST", base+"/v1/charges", "k-scope", body)
				b := send(t, "POST", base+"/v1/charges", "k-scope", body, "Authorization", "", "Authorization", "Bearer sk_test_bob")
				if a.body == b.body || b.header.Get("Idempotent-Replayed") != "" {
					t.Fatalf("bob got alice's response %q", b.body)
				}
				basic := send(t, "POST", base+"/v1/charges", "k-scope", body, "Authorization", "", "Authorization", "Basic YWxpY2U6d3Jvbmc=") // alice:wrong
				if basic.header.Get("Idempotent-Replayed") != "" {
					t.Fatalf("Basic credentials got a bearer client's response")
				}
			})
			t.Run("Rejections", func(t *testing.T) {
				cases := []struct {
					name   string
					key    string
					header []string
					status int
					code   idem.ProblemCode
				}{
					{"NoKey", "", nil, 400, idem.ProblemKeyMissing},
					{"NoIdentity", "k-anon", []string{"Authorization", ""}, 401, idem.ProblemUnauthenticated},
					{"OtherScheme", "k-anon", []string{"Authorization", "", "Authorization", "Digest x"}, 401, idem.ProblemUnauthenticated},
				}
				for _, c := range cases {
					resp := send(t, "POST", base+"/v1/charges", c.key, body, c.header...)
					if resp.status != c.status || resp.problemCode(t) != string(c.code) {
						t.Errorf("%s: %d %q, want %d %s", c.name, resp.status, resp.body, c.status, c.code)
					}
				}
				if req, _ := up.count(""); req != 0 {
					t.Errorf("upstream got %d requests without a key", req)
				}
			})
			t.Run("OtherRequestsPassThrough", func(t *testing.T) {
				resp := send(t, "GET", base+"/v1/ping", "", "")
				if resp.status != http.StatusOK || resp.body != "pong\n" {
					t.Fatalf("GET: %d %q", resp.status, resp.body)
				}
			})
			t.Run("ProblemPages", func(t *testing.T) {
				resp := send(t, "GET", base+ProblemTypeBaseDefault+string(idem.ProblemOutcomeUnknown), "", "")
				if resp.status != http.StatusOK || !strings.Contains(resp.body, "Outcome unknown") || !strings.Contains(resp.body, "keys for 1 day after") {
					t.Fatalf("%d %q", resp.status, resp.body)
				}
				if missing := send(t, "GET", base+ProblemTypeBaseDefault+"no-such-problem", "", ""); missing.status != http.StatusNotFound || strings.Contains(missing.body, "Retention") {
					t.Fatalf("unknown problem: %d %q", missing.status, missing.body)
				}
			})
		})
	}
}

func TestRoutes(t *testing.T) {
	t.Parallel()
	up := newUpstream(t, false)
	base := setup(t, "sqlite", up, func(c *Config) {
		c.Routes = []Route{{Method: "POST", Path: "/v1/charges"}, {Method: "POST", Path: "/v2/*", Policy: PolicyHold}}
	})
	if resp := send(t, "POST", base+"/v1/charges", "", `{}`); resp.status != 400 {
		t.Errorf("key route without a key: %d, want 400", resp.status)
	}
	if resp := send(t, "POST", base+"/v2/anything/x", "", `{}`); resp.status != 400 {
		t.Errorf("prefix route without a key: %d, want 400", resp.status)
	}
	if resp := send(t, "POST", base+"/v1/other", "", `{}`); resp.status != 201 {
		t.Errorf("POST outside the routes: %d, want it passed through", resp.status)
	}
	if resp := send(t, "PATCH", base+"/v1/charges", "", `{}`); resp.status != 201 {
		t.Errorf("PATCH outside the routes: %d, want it passed through", resp.status)
	}
}

func TestParseRoute(t *testing.T) {
	t.Parallel()
	good := map[string]Route{
		"POST /v1/*":                                          {Method: "POST", Path: "/v1/*"},
		"PATCH /v1/x hold":                                    {Method: "PATCH", Path: "/v1/x", Policy: PolicyHold},
		"  POST   /a   retry  ":                               {Method: "POST", Path: "/a", Policy: PolicyRetry},
		"POST /v1/refunds probe":                              {Method: "POST", Path: "/v1/refunds", Policy: PolicyProbe},
		"POST /v1/refunds probe /v1/requests/{key}":           {Method: "POST", Path: "/v1/refunds", Policy: PolicyProbe, ProbeURL: "/v1/requests/{key}"},
		"POST /r probe https://up.example/status?k={key}&v=1": {Method: "POST", Path: "/r", Policy: PolicyProbe, ProbeURL: "https://up.example/status?k={key}&v=1"},
	}
	for in, want := range good {
		if got, err := ParseRoute(in); err != nil || got != want {
			t.Errorf("ParseRoute(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "POST", "GET /x", "PUT /x", "DELETE /x", "post /x", "POST x", "POST /a*b", "POST /x hold extra",
		"POST /x probe /no-key", "POST /x probe /{key}/{key}", "POST /x probe https://{key}.example/", "POST /x probe ftp://h/{key}",
		"POST /x probe relative/{key}", "POST /x probe //host/{key}", "POST /x probe /a#{key}", "POST /x hold /v1/requests/{key}",
		"POST /x probe /v1/{key} extra"} {
		if _, err := ParseRoute(in); err == nil {
			t.Errorf("ParseRoute(%q): no error", in)
		}
	}
}

func TestIdentity(t *testing.T) {
	t.Parallel()
	if _, err := CredentialIdentity([]byte("short")); err == nil {
		t.Fatal("a short secret was accepted")
	}
	id, _ := CredentialIdentity([]byte(testSecret))
	other, _ := CredentialIdentity([]byte(testSecret + "x"))
	req := func(auth string) *http.Request {
		r := httptest.NewRequest("POST", "/", nil)
		if auth != "" {
			r.Header.Set("Authorization", auth)
		}
		return r
	}
	a1, _ := id(req("Bearer tok_a"))
	a2, _ := id(req("bearer tok_a"))
	b, _ := id(req("Bearer tok_b"))
	x, _ := other(req("Bearer tok_a"))
	if a1 != a2 || a1 == b || a1 == x || strings.Contains(a1, "tok_a") {
		t.Fatalf("ids %q %q %q %q: want equal for one token, different across tokens and secrets, token not visible", a1, a2, b, x)
	}
	u1, _ := id(req("Basic YWxpY2U6czE=")) // alice:s1
	u2, _ := id(req("Basic YWxpY2U6czI=")) // alice:s2
	if u1 == u2 {
		t.Fatal("a Basic user with two passwords got one id")
	}
	// The ids are those that keys already stored carry, call after call:
	// a hex HMAC-SHA256 of the length-prefixed parts, cut to 128 bits.
	want := func(kind string, parts ...string) string {
		h := hmac.New(sha256.New, []byte(testSecret))
		for _, p := range append([]string{kind}, parts...) {
			h.Write(binary.BigEndian.AppendUint32(nil, uint32(len(p))))
			h.Write([]byte(p))
		}
		return kind + ":" + hex.EncodeToString(h.Sum(nil)[:16])
	}
	for range 3 {
		if got, _ := id(req("Bearer tok_a")); got != want("bearer", "tok_a") {
			t.Fatalf("bearer id %q, want %q", got, want("bearer", "tok_a"))
		}
		if got, _ := id(req("Basic YWxpY2U6czE=")); got != want("basic", "alice", "s1") {
			t.Fatalf("basic id %q, want %q", got, want("basic", "alice", "s1"))
		}
	}
	two := req("Bearer tok_a")
	two.Header.Add("Authorization", "Bearer tok_b")
	if got, ok := id(two); ok {
		t.Errorf("two Authorization fields: id %q, want none", got)
	}
	for _, auth := range []string{"", "Bearer", "Bearer  ", "Bearer a b", "Basic !!!", "Token x"} {
		if got, ok := id(req(auth)); ok {
			t.Errorf("Authorization %q: id %q, want none", auth, got)
		}
	}
	h := HeaderIdentity("x-client-id")
	r := req("")
	if _, ok := h(r); ok {
		t.Fatal("no header, but an id")
	}
	r.Header.Set("X-Client-Id", "acme")
	if got, ok := h(r); !ok || got != "header:acme" {
		t.Fatalf("got %q %v", got, ok)
	}
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	id, _ := CredentialIdentity([]byte(testSecret))
	target, _ := url.Parse("http://127.0.0.1:1")
	store := newStore(t, "sqlite")
	probe := Route{Method: "POST", Path: "/v1/refunds", Policy: PolicyProbe}
	bad := map[string]Config{
		"NoUpstream":              {Store: store, Identity: id},
		"RelativeUpstream":        {Upstream: &url.URL{Path: "/x"}, Store: store, Identity: id},
		"NoStore":                 {Upstream: target, Identity: id},
		"NoIdentity":              {Upstream: target, Store: store},
		"LeaseShorterThanForward": {Upstream: target, Store: store, Identity: id, UpstreamTimeout: 60 * time.Second, Idem: idem.Config{LockTimeout: 30 * time.Second}},
		"BadPolicy":               {Upstream: target, Store: store, Identity: id, DefaultPolicy: "probe"},
		"BadRoute":                {Upstream: target, Store: store, Identity: id, Routes: []Route{{Method: "GET", Path: "/"}}},
		"ProbeWithoutURL":         {Upstream: target, Store: store, Identity: id, Routes: []Route{probe}},
		"ProbeWithBadURL":         {Upstream: target, Store: store, Identity: id, Routes: []Route{probe}, ProbeURL: "/v1/requests"},
		"ProbeWithDropKey":        {Upstream: target, Store: store, Identity: id, Routes: []Route{probe}, ProbeURL: "/s/{key}", DropKey: true},
		"ProbeLeaseTooShort": {Upstream: target, Store: store, Identity: id, Routes: []Route{probe}, ProbeURL: "/s/{key}",
			UpstreamTimeout: 30 * time.Second, ProbeTimeout: 30 * time.Second, Idem: idem.Config{LockTimeout: 59 * time.Second}},
	}
	for name, cfg := range bad {
		if _, err := New(&cfg); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	good := Config{Upstream: target, Store: store, Identity: id, Routes: []Route{probe}, ProbeURL: "/s/{key}",
		UpstreamTimeout: 30 * time.Second, ProbeTimeout: 29 * time.Second, Idem: idem.Config{LockTimeout: 60 * time.Second}}
	if _, err := New(&good); err != nil {
		t.Errorf("probe route with a global status URL: %v", err)
	}
}

// TestIdemConfig checks that the proxy's middleware and purger are built
// from Config.Idem: its settings kept, the proxy's own defaults on its zero
// fields, and the proxy's identity and mode.
func TestIdemConfig(t *testing.T) {
	t.Parallel()
	id, _ := CredentialIdentity([]byte(testSecret))
	target, _ := url.Parse("http://127.0.0.1:1")
	now := func() time.Time { return time.Unix(1e9, 0) }
	p, err := New(&Config{Upstream: target, Store: newStore(t, "sqlite"), Identity: id,
		Idem: idem.Config{Retention: 48 * time.Hour, MaxPreferWait: NoPreferWait, ReplayHeaders: []string{"Request-Id"}, Now: now}})
	if err != nil {
		t.Fatal(err)
	}
	ic := p.IdemConfig()
	switch {
	case ic.Retention != 48*time.Hour || len(ic.ReplayHeaders) != 1 || ic.Now == nil || !ic.Now().Equal(now()):
		t.Errorf("settings of Config.Idem not kept: %+v", ic)
	case ic.LockTimeout != LockTimeoutDefault || ic.MaxPreferWait != 0 || ic.ProblemTypeBase != ProblemTypeBaseDefault || ic.Logger == nil:
		t.Errorf("proxy defaults not applied: %+v", ic)
	case ic.ClientID == nil || ic.Require == nil || ic.Mode != idem.ModeTwoPhase:
		t.Errorf("identity, requirement or mode not set: %+v", ic)
	}
	p, err = New(&Config{Upstream: target, Store: newStore(t, "sqlite"), Identity: id})
	if err != nil {
		t.Fatal(err)
	}
	if ic := p.IdemConfig(); ic.MaxPreferWait != MaxPreferWaitDefault || ic.Retention != 0 {
		t.Errorf("MaxPreferWait %s, Retention %s: want %s and idem's default", ic.MaxPreferWait, ic.Retention, MaxPreferWaitDefault)
	}
}

func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }

func TestUpstreamServerErrors(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name    string
		route   Route
		release bool
		stored  bool
	}{
		{"DefaultStores", Route{Method: "POST", Path: "/v1/*"}, false, true},
		{"RetryStores", Route{Method: "POST", Path: "/v1/*", Policy: PolicyRetry}, false, true},
		{"RetryReleases", Route{Method: "POST", Path: "/v1/*", Policy: PolicyRetry}, true, false},
		// A hold route's upstream does not honour keys: its 5xx is stored
		// whatever ReleaseServerErrors says.
		{"HoldStoresAlways", Route{Method: "POST", Path: "/v1/*", Policy: PolicyHold}, true, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var calls atomic.Int64
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				n := calls.Add(1)
				w.WriteHeader(http.StatusInternalServerError)
				fmt.Fprintf(w, "failure %d", n)
			}))
			t.Cleanup(up.Close)
			target, _ := url.Parse(up.URL)
			id, _ := CredentialIdentity([]byte(testSecret))
			p, err := New(&Config{Upstream: target, Store: newStore(t, "sqlite"), Identity: id, Routes: []Route{c.route}, ReleaseServerErrors: c.release, Idem: idem.Config{Logger: discard()}})
			if err != nil {
				t.Fatal(err)
			}
			srv := httptest.NewServer(p)
			t.Cleanup(srv.Close)
			send(t, "POST", srv.URL+"/v1/charges", "k-500", `{}`)
			retry := send(t, "POST", srv.URL+"/v1/charges", "k-500", `{}`)
			want, wantCalls := "failure 2", int64(2)
			if c.stored {
				want, wantCalls = "failure 1", 1
			}
			if retry.status != http.StatusInternalServerError || retry.body != want || calls.Load() != wantCalls {
				t.Fatalf("retry: %d %q after %d upstream calls; want %q after %d", retry.status, retry.body, calls.Load(), want, wantCalls)
			}
		})
	}
}

func TestForwardedElement(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, remote, host string
		tls                bool
		want               string
	}{
		{"IPv4", "127.0.0.1:5000", "api.example", false, `for="127.0.0.1";host="api.example";proto=http`},
		{"IPv6OverTLS", "[::1]:5000", "api.example:8443", true, `for="[::1]";host="api.example:8443";proto=https`},
		{"HostWithAQuoteLeftOut", "10.0.0.1:1", `a"b`, false, `for="10.0.0.1";proto=http`},
		{"NoAddress", "pipe", "", false, `proto=http`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := httptest.NewRequest("POST", "/v1/charges", nil)
			r.RemoteAddr, r.Host = tc.remote, tc.host
			if tc.tls {
				r.TLS = &tls.ConnectionState{}
			}
			if got := forwardedElement(r); got != tc.want {
				t.Errorf("forwardedElement = %s, want %s", got, tc.want)
			}
		})
	}
}
