package idemsqlite_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemsqlite"
	"github.com/idemkit/idem/idemtest"
)

var quiet = slog.New(slog.DiscardHandler)

// env is a real HTTP server with the middleware on a real SQLite store, in
// front of a handler that writes one business row per execution.
type env struct {
	t      *testing.T
	url    string
	store  *idemsqlite.Store
	clock  *idemtest.Clock
	runs   atomic.Int64
	gates  sync.Map // key -> chan struct{}: the handler waits on it
	inside chan string
}

func setup(t *testing.T, cfg *idem.Config) *env {
	t.Helper()
	store, err := idemsqlite.Open(filepath.Join(t.TempDir(), "idem.db"), &idemsqlite.Config{Logger: quiet})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { store.Close() })
	ctx := context.Background()
	if err := store.Migrate(ctx); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	if _, err := store.DB().Exec(`CREATE TABLE business (key TEXT NOT NULL, derived TEXT NOT NULL)`); err != nil {
		t.Fatalf("create business table: %v", err)
	}
	e := &env{t: t, store: store, clock: idemtest.NewClock(time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)), inside: make(chan string, 100)}
	c := idem.Config{}
	if cfg != nil {
		c = *cfg
	}
	c.Now = e.clock.Now
	c.Logger = quiet
	if c.ClientID == nil {
		c.ClientID = func(r *http.Request) (string, bool) {
			id := r.Header.Get("X-Client")
			return id, id != ""
		}
	}
	if c.ReplayHeaders == nil {
		c.ReplayHeaders = []string{"X-Request-Cost"}
	}
	mw, err := idem.New(store, &c)
	if err != nil {
		t.Fatalf("idem.New: %v", err)
	}
	srv := httptest.NewUnstartedServer(mw.Wrap(http.HandlerFunc(e.handle)))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the panic test's panic is expected
	srv.Start()
	t.Cleanup(srv.Close)
	e.url = srv.URL
	return e
}

// waitDeadline bounds every wait of these tests: far more than anything
// here takes on any machine, far less than the test binary's timeout, so
// that a broken rule fails the test by name instead of hanging it.
const waitDeadline = 30 * time.Second

// recvWithin returns the next value from ch, or fails the test, naming
// what it waited for, when none came within waitDeadline.
func recvWithin[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	timer := time.NewTimer(waitDeadline)
	defer timer.Stop()
	select {
	case v := <-ch:
		return v
	case <-timer.C:
		t.Fatalf("waited %v for %s; nothing came", waitDeadline, what)
		panic("unreachable")
	}
}

// gate makes the handler of requests with key wait until the returned
// open is called. The test's cleanup opens it too, so that a test that
// fails first leaves no handler, and so no server Close, waiting.
func (e *env) gate(key string) (open func()) {
	ch := make(chan struct{})
	var once sync.Once
	open = func() { once.Do(func() { close(ch) }) }
	e.t.Cleanup(open)
	e.gates.Store(key, ch)
	return open
}

// handle is the business handler. X-Behave selects a failure.
func (e *env) handle(w http.ResponseWriter, r *http.Request) {
	n := e.runs.Add(1)
	scope, _ := idem.ScopeFromContext(r.Context())
	if gate, ok := e.gates.Load(scope.Key); ok {
		e.inside <- scope.Key
		<-gate.(chan struct{})
	}
	if r.Method != http.MethodPost && r.Method != http.MethodPatch {
		fmt.Fprintf(w, "passed through %s", r.Method)
		return
	}
	var db interface {
		ExecContext(context.Context, string, ...any) (sql.Result, error)
	} = e.store.DB() // a request without a key has no idempotency transaction
	if tx, err := idemsqlite.TxFromContext(r.Context()); err == nil {
		db = tx
	}
	if _, err := db.ExecContext(r.Context(), `INSERT INTO business (key, derived) VALUES (?, ?)`, scope.Key, idem.DeriveKey(r.Context(), "charge")); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	body, _ := io.ReadAll(r.Body)
	switch r.Header.Get("X-Behave") {
	case "400":
		w.WriteHeader(http.StatusBadRequest)
		io.WriteString(w, `{"error":"invalid amount"}`)
		return
	case "500":
		w.WriteHeader(http.StatusInternalServerError)
		io.WriteString(w, `{"error":"boom"}`)
		return
	case "panic":
		panic("handler exploded")
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Location", fmt.Sprintf("/v1/payments/pay_%d", n))
	w.Header().Set("Set-Cookie", "session=secret")
	w.Header().Set("X-Request-Cost", "7")
	w.Header().Set("X-Not-Replayed", "1")
	w.WriteHeader(http.StatusCreated)
	fmt.Fprintf(w, `{"id":"pay_%d","echo":%q}`, n, body)
}

func (e *env) rows(key string) int {
	e.t.Helper()
	var n int
	if err := e.store.ReadDB().QueryRow(`SELECT count(*) FROM business WHERE key = ?`, key).Scan(&n); err != nil {
		e.t.Fatalf("count rows: %v", err)
	}
	return n
}

func (e *env) keys() int {
	e.t.Helper()
	var n int
	if err := e.store.ReadDB().QueryRow(`SELECT count(*) FROM idempotency_keys`).Scan(&n); err != nil {
		e.t.Fatalf("count keys: %v", err)
	}
	return n
}

type req struct {
	method, path, client, contentType, body, behave string
	keys                                            []string    // Idempotency-Key fields, raw
	extra                                           http.Header // added after the fields above
	// once stops net/http from sending the request again when the server
	// drops a reused connection, which it does for a request with an
	// Idempotency-Key, depending on whether an idle connection was there.
	once bool
}

type resp struct {
	status int
	header http.Header
	body   []byte
}

func (r resp) problem(t *testing.T) idem.Problem {
	t.Helper()
	if ct := r.header.Get("Content-Type"); ct != idem.ProblemContentType {
		t.Fatalf("Content-Type = %q, want %q; body %s", ct, idem.ProblemContentType, r.body)
	}
	var p idem.Problem
	if err := json.Unmarshal(r.body, &p); err != nil {
		t.Fatalf("problem body %s: %v", r.body, err)
	}
	if p.Status != r.status || p.Type != "/problems/"+p.Code || p.Title == "" {
		t.Fatalf("problem %+v does not match status %d", p, r.status)
	}
	return p
}

func (e *env) do(r req) resp {
	e.t.Helper()
	if r.method == "" {
		r.method = http.MethodPost
	}
	if r.path == "" {
		r.path = "/v1/payments"
	}
	if r.client == "" {
		r.client = "alice"
	}
	if r.contentType == "" && r.body != "" {
		r.contentType = "application/json"
	}
	hr, err := http.NewRequest(r.method, e.url+r.path, strings.NewReader(r.body))
	if err != nil {
		e.t.Fatalf("NewRequest: %v", err)
	}
	if r.client != "-" {
		hr.Header.Set("X-Client", r.client)
	}
	if r.contentType != "" && r.contentType != "-" {
		hr.Header.Set("Content-Type", r.contentType)
	}
	if r.behave != "" {
		hr.Header.Set("X-Behave", r.behave)
	}
	for _, k := range r.keys {
		hr.Header.Add("Idempotency-Key", k)
	}
	for name, values := range r.extra {
		for _, v := range values {
			hr.Header.Add(name, v)
		}
	}
	if r.once {
		hr.GetBody = nil // a body that cannot be read again is never resent
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitDeadline)
	defer cancel()
	res, err := http.DefaultClient.Do(hr.WithContext(ctx))
	if err != nil && r.behave == "panic" {
		return resp{} // the server drops the connection of a panicking handler
	}
	if err != nil {
		e.t.Fatalf("%s %s: %v", r.method, r.path, err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		e.t.Fatalf("read body: %v", err)
	}
	return resp{status: res.StatusCode, header: res.Header, body: body}
}

const payment = `{"amount":4200,"currency":"usd","customer":"cus_123"}`

func TestRejectsBadKeysBeforeTheStore(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	long := strings.Repeat("k", 256)
	tests := []struct {
		name string
		r    req
		code string
		want int
	}{
		{"MissingKey", req{body: payment}, "idempotency-key-missing", 400},
		{"EmptyKey", req{body: payment, keys: []string{`""`}}, "idempotency-key-malformed", 400},
		{"UnterminatedString", req{body: payment, keys: []string{`"abc`}}, "idempotency-key-malformed", 400},
		{"BadEscape", req{body: payment, keys: []string{`"a\nb"`}}, "idempotency-key-malformed", 400},
		{"ListOfStrings", req{body: payment, keys: []string{`"a", "b"`}}, "idempotency-key-malformed", 400},
		{"NonASCII", req{body: payment, keys: []string{"caf\xc3\xa9"}}, "idempotency-key-malformed", 400},
		{"SpaceInBareKey", req{body: payment, keys: []string{"a b"}}, "idempotency-key-malformed", 400},
		{"TooLongBare", req{body: payment, keys: []string{long}}, "idempotency-key-malformed", 400},
		{"TooLongQuoted", req{body: payment, keys: []string{`"` + long + `"`}}, "idempotency-key-malformed", 400},
		{"TwoFields", req{body: payment, keys: []string{"k1", "k1"}}, "idempotency-key-malformed", 400},
		{"NoClient", req{body: payment, client: "-", keys: []string{"k1"}}, "unauthenticated", 401},
		{"DuplicateMember", req{body: `{"amount":1,"amount":2}`, keys: []string{"k2"}}, "request-body-malformed", 400},
		{"InvalidJSON", req{body: `{"amount":`, keys: []string{"k3"}}, "request-body-malformed", 400},
		{"UnsupportedMediaType", req{body: "amount=1", contentType: "text/plain", keys: []string{"k4"}}, "unsupported-media-type", 415},
		{"BodyWithoutContentType", req{body: "x", contentType: "-", keys: []string{"k5"}}, "unsupported-media-type", 415},
		{"BadForm", req{body: "a=%zz", contentType: "application/x-www-form-urlencoded", keys: []string{"k6"}}, "request-body-malformed", 400},
		{"BadQuery", req{path: "/v1/payments?a=%zz", body: payment, keys: []string{"k7"}}, "request-body-malformed", 400},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := e.do(tt.r)
			if r.status != tt.want {
				t.Fatalf("status = %d, want %d; body %s", r.status, tt.want, r.body)
			}
			if p := r.problem(t); p.Code != tt.code || p.Detail == "" {
				t.Errorf("problem = %+v, want code %q with a detail", p, tt.code)
			}
		})
	}
	if n := e.runs.Load(); n != 0 {
		t.Errorf("handler ran %d times, want 0", n)
	}
	if n := e.keys(); n != 0 {
		t.Errorf("%d keys stored, want 0", n)
	}
}

func TestBodyOverLimitGets413(t *testing.T) {
	t.Parallel()
	e := setup(t, &idem.Config{MaxBodyBytes: 64})
	big := `{"pad":"` + strings.Repeat("x", 100) + `"}`
	r := e.do(req{body: big, keys: []string{"k"}})
	if r.status != http.StatusRequestEntityTooLarge || r.problem(t).Code != "request-body-too-large" {
		t.Fatalf("status %d body %s, want 413 request-body-too-large", r.status, r.body)
	}
	if e.keys() != 0 || e.runs.Load() != 0 {
		t.Errorf("keys %d, runs %d; want nothing stored or run", e.keys(), e.runs.Load())
	}
}

func TestIdempotentMethodsPassThrough(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	for _, m := range []string{http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodPut, http.MethodDelete} {
		t.Run(m, func(t *testing.T) {
			// Even a malformed key is not looked at.
			for range 2 {
				r := e.do(req{method: m, keys: []string{`"unterminated`}})
				if r.status != http.StatusOK || r.header.Get(idem.HeaderReplayed) != "" {
					t.Fatalf("status %d replayed %q, want 200 straight from the handler", r.status, r.header.Get(idem.HeaderReplayed))
				}
			}
		})
	}
	if n := e.runs.Load(); n != 10 {
		t.Errorf("handler ran %d times, want 10 (twice per method)", n)
	}
}

func TestOptionalKeyRoutes(t *testing.T) {
	t.Parallel()
	e := setup(t, &idem.Config{Require: idem.RequireNone})
	if r := e.do(req{body: payment}); r.status != http.StatusCreated {
		t.Fatalf("without a key: status %d, want 201", r.status)
	}
	first := e.do(req{body: "raw bytes", contentType: "text/plain", keys: []string{"opt"}})
	again := e.do(req{body: "raw bytes", contentType: "text/plain", keys: []string{"opt"}})
	if first.status != http.StatusCreated || again.header.Get(idem.HeaderReplayed) != "true" || !bytes.Equal(first.body, again.body) {
		t.Fatalf("optional key with a raw body: %d then %d replayed=%q", first.status, again.status, again.header.Get(idem.HeaderReplayed))
	}
}

func TestReplaysTheStoredResponse(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	first := e.do(req{body: payment, keys: []string{`"8e03978e-40d5-43e8-bc93-6894a57f9324"`}})
	if first.status != http.StatusCreated || first.header.Get("Set-Cookie") == "" || first.header.Get(idem.HeaderReplayed) != "" {
		t.Fatalf("first: status %d, headers %v", first.status, first.header)
	}
	retries := []struct {
		name string
		r    req
	}{
		{"SameBytes", req{body: payment, keys: []string{`"8e03978e-40d5-43e8-bc93-6894a57f9324"`}}},
		{"BareTokenIsTheSameKey", req{body: payment, keys: []string{`8e03978e-40d5-43e8-bc93-6894a57f9324`}}},
		{"ParametersIgnored", req{body: payment, keys: []string{`"8e03978e-40d5-43e8-bc93-6894a57f9324";v=1`}}},
		{"ReorderedAndReformatted", req{body: "{ \"customer\": \"cus_123\",\n \"currency\":\"usd\", \"amount\": 4.2e3 }", keys: []string{`8e03978e-40d5-43e8-bc93-6894a57f9324`}}},
		{"CharsetParameter", req{body: payment, contentType: "application/json; charset=utf-8", keys: []string{`8e03978e-40d5-43e8-bc93-6894a57f9324`}}},
	}
	for _, tt := range retries {
		t.Run(tt.name, func(t *testing.T) {
			r := e.do(tt.r)
			if r.status != first.status || !bytes.Equal(r.body, first.body) {
				t.Fatalf("replay = %d %s, want %d %s", r.status, r.body, first.status, first.body)
			}
			if r.header.Get(idem.HeaderReplayed) != "true" {
				t.Errorf("Idempotent-Replayed = %q, want true", r.header.Get(idem.HeaderReplayed))
			}
			for _, h := range []string{"Content-Type", "Location", "X-Request-Cost"} {
				if r.header.Get(h) != first.header.Get(h) {
					t.Errorf("%s = %q, want %q", h, r.header.Get(h), first.header.Get(h))
				}
			}
			for _, h := range []string{"Set-Cookie", "X-Not-Replayed"} {
				if v := r.header.Get(h); v != "" {
					t.Errorf("%s replayed as %q; it must not be stored", h, v)
				}
			}
		})
	}
	if n := e.runs.Load(); n != 1 {
		t.Errorf("handler ran %d times, want 1", n)
	}
	if n := e.rows("8e03978e-40d5-43e8-bc93-6894a57f9324"); n != 1 {
		t.Errorf("%d business rows, want 1", n)
	}
}

func TestFormAndQueryAreCanonical(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	form := "application/x-www-form-urlencoded"
	first := e.do(req{path: "/v1/payments?expand=customer&b=2", body: "amount=4200&currency=usd&customer=cus_1", contentType: form, keys: []string{"f1"}})
	again := e.do(req{path: "/v1/payments?b=2&expand=customer", body: "customer=cus_1&amount=4200&currency=usd", contentType: form, keys: []string{"f1"}})
	if first.status != http.StatusCreated || again.header.Get(idem.HeaderReplayed) != "true" || !bytes.Equal(first.body, again.body) {
		t.Fatalf("reordered form and query: %d then %d replayed=%q", first.status, again.status, again.header.Get(idem.HeaderReplayed))
	}
	other := e.do(req{path: "/v1/payments?b=3&expand=customer", body: "customer=cus_1&amount=4200&currency=usd", contentType: form, keys: []string{"f1"}})
	if other.status != http.StatusUnprocessableEntity {
		t.Fatalf("changed query value: status %d, want 422", other.status)
	}
	changed := e.do(req{path: "/v1/payments?b=2&expand=customer", body: "customer=cus_1&amount=999&currency=usd", contentType: form, keys: []string{"f1"}})
	if p := changed.problem(t); changed.status != 422 || len(p.Fields) != 1 || p.Fields[0] != "/amount" {
		t.Fatalf("changed form field: %d %+v, want 422 naming /amount", changed.status, p)
	}
}

// TestRepeatedFormValuesKeepTheirOrder: each amount goes with the dest
// before it, so a retry with the amounts swapped pays A 1 and B 100 instead
// of A 100 and B 1; it is another request (422), not the replay of the
// first. Distinct names may still come in any order.
func TestRepeatedFormValuesKeepTheirOrder(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	form := "application/x-www-form-urlencoded"
	first := e.do(req{path: "/v1/transfers?leg=a&leg=b", body: "dest=A&amount=100&dest=B&amount=1", contentType: form, keys: []string{"split-1"}})
	if first.status != http.StatusCreated {
		t.Fatalf("first request: %d %s", first.status, first.body)
	}
	regrouped := e.do(req{path: "/v1/transfers?leg=a&leg=b", body: "amount=100&amount=1&dest=A&dest=B", contentType: form, keys: []string{"split-1"}})
	if regrouped.status != http.StatusCreated || regrouped.header.Get(idem.HeaderReplayed) != "true" {
		t.Fatalf("names regrouped, each name's values in order: %d replayed=%q, want the replay", regrouped.status, regrouped.header.Get(idem.HeaderReplayed))
	}
	swapped := e.do(req{path: "/v1/transfers?leg=a&leg=b", body: "dest=A&amount=1&dest=B&amount=100", contentType: form, keys: []string{"split-1"}})
	if p := swapped.problem(t); swapped.status != http.StatusUnprocessableEntity || fmt.Sprint(p.Fields) != "[/amount]" {
		t.Fatalf("amounts swapped: %d %+v, want 422 naming /amount", swapped.status, p)
	}
	query := e.do(req{path: "/v1/transfers?leg=b&leg=a", body: "dest=A&amount=100&dest=B&amount=1", contentType: form, keys: []string{"split-1"}})
	if query.status != http.StatusUnprocessableEntity {
		t.Fatalf("query values swapped: %d %s, want 422", query.status, query.body)
	}
	if n := e.runs.Load(); n != 1 {
		t.Errorf("handler ran %d times, want 1", n)
	}
}

// TestPathSpellings: a retry that spells the path's escapes otherwise is
// the same request, replayed, whether the middleware wraps a ServeMux route
// or a handler without one; a "/" escaped inside a segment is another path,
// as it is another route.
func TestPathSpellings(t *testing.T) {
	t.Parallel()
	store, err := idemsqlite.Open(filepath.Join(t.TempDir(), "idem.db"), &idemsqlite.Config{Logger: quiet})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { store.Close() })
	if err := store.Migrate(context.Background()); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	mw, err := idem.New(store, &idem.Config{Logger: quiet, ClientID: func(*http.Request) (string, bool) { return "alice", true }})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	var runs atomic.Int64
	handler := mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := runs.Add(1)
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, "run %d: %s %s", n, r.Pattern, r.URL.EscapedPath())
	}))
	mux := http.NewServeMux()
	mux.Handle("POST /v1/payments", handler)
	mux.Handle("POST /v1/objects/{id}", handler)
	mux.Handle("POST /v1/objects/{id}/{sub}", handler)
	mux.Handle("POST /v1/files/{name...}", handler)
	muxSrv := httptest.NewServer(mux)
	t.Cleanup(muxSrv.Close)
	bareSrv := httptest.NewServer(handler) // no mux: no pattern
	t.Cleanup(bareSrv.Close)

	post := func(t *testing.T, url, key string) (int, string, idem.Problem) {
		t.Helper()
		r, err := http.NewRequest(http.MethodPost, url, strings.NewReader(`{"amount":1}`))
		if err != nil {
			t.Fatalf("NewRequest: %v", err)
		}
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set(idem.HeaderKey, key)
		res, err := http.DefaultClient.Do(r)
		if err != nil {
			t.Fatalf("POST %s: %v", url, err)
		}
		defer res.Body.Close()
		body, _ := io.ReadAll(res.Body)
		var p idem.Problem
		if res.StatusCode == http.StatusUnprocessableEntity {
			json.Unmarshal(body, &p)
		}
		return res.StatusCode, string(body), p
	}
	for _, tt := range []struct {
		name, url, first, retry string
	}{
		{"MuxRoute", muxSrv.URL, "/v1/payments", "/v1/%70ayments"},
		{"MuxRouteEscapedFirst", muxSrv.URL, "/v1/%70ayment%73", "/v1/payments"},
		{"MuxWildcard", muxSrv.URL, "/v1/objects/pay_1", "/v1/objects/pay%5F1"},
		{"MuxWildcardEscapedSlash", muxSrv.URL, "/v1/objects/a%2Fb", "/v1/objects/a%2fb"},
		{"NoMux", bareSrv.URL, "/v1/payments", "/v1/%70ayments"},
		{"NoMuxHexCase", bareSrv.URL, "/v1/caf%C3%A9", "/v1/caf%c3%a9"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			key := "spell-" + tt.name
			code, first, _ := post(t, tt.url+tt.first, key)
			if code != http.StatusCreated {
				t.Fatalf("POST %s = %d %s, want 201", tt.first, code, first)
			}
			if code, again, p := post(t, tt.url+tt.retry, key); code != http.StatusCreated || again != first {
				t.Errorf("retry as POST %s = %d %q %+v, want the replay of %q", tt.retry, code, again, p, first)
			}
		})
	}
	for _, tt := range []struct {
		name, url, first, other, original string
	}{
		// Two routes: one segment "a/b", or two segments "a" and "b".
		{"EscapedSlashIsAnotherRoute", muxSrv.URL, "/v1/objects/a%2Fb", "/v1/objects/a/b", "POST /v1/objects/a%2Fb"},
		// One route, whose wildcard's value is "a/b" both ways: the
		// handler may still read the path, which differs.
		{"EscapedSlashInRestWildcard", muxSrv.URL, "/v1/files/a%2Fb", "/v1/files/a/b", "POST /v1/files/a%2Fb"},
		{"EscapedSlashWithoutMux", bareSrv.URL, "/v1/a%2Fb", "/v1/a/b", "POST /v1/a%2Fb"},
		{"DotSegmentWithoutMux", bareSrv.URL, "/v1/x/../payments", "/v1/payments", "POST /v1/x/../payments"},
		{"DoubleSlashWithoutMux", bareSrv.URL, "/v1//payments", "/v1/payments", "POST /v1//payments"},
		{"RecordedPathIsCanonical", muxSrv.URL, "/v1/%70ayments", "/v1/objects/x", "POST /v1/payments"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			key := "other-" + tt.name
			if code, body, _ := post(t, tt.url+tt.first, key); code != http.StatusCreated {
				t.Fatalf("POST %s = %d %s, want 201", tt.first, code, body)
			}
			if code, body, p := post(t, tt.url+tt.other, key); code != http.StatusUnprocessableEntity || p.OriginalRequest != tt.original {
				t.Errorf("POST %s with the key of POST %s = %d %s, want 422 naming %q", tt.other, tt.first, code, body, tt.original)
			}
		})
	}
}

func TestMismatchNamesFieldsWithoutValues(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	e.do(req{body: `{"amount":4200,"currency":"usd","customer":"cus_secret_123"}`, keys: []string{"m1"}})
	tests := []struct {
		name   string
		r      req
		fields []string
		orig   string
	}{
		{"ChangedAmount", req{body: `{"amount":4300,"currency":"usd","customer":"cus_secret_123"}`, keys: []string{"m1"}}, []string{"/amount"}, ""},
		{"ChangedTwoFields", req{body: `{"amount":1,"currency":"eur","customer":"cus_secret_123"}`, keys: []string{"m1"}}, []string{"/amount", "/currency"}, ""},
		{"AddedAndRemoved", req{body: `{"amount":4200,"currency":"usd","memo":"x"}`, keys: []string{"m1"}}, []string{"/customer", "/memo"}, ""},
		{"OtherEndpoint", req{path: "/v1/refunds", body: `{"amount":4200,"currency":"usd","customer":"cus_secret_123"}`, keys: []string{"m1"}}, nil, "POST /v1/payments"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := e.do(tt.r)
			if r.status != http.StatusUnprocessableEntity {
				t.Fatalf("status %d, want 422; body %s", r.status, r.body)
			}
			p := r.problem(t)
			if p.Code != "idempotency-key-reused" || p.Title != "Idempotency-Key is already used" {
				t.Errorf("problem = %+v", p)
			}
			if fmt.Sprint(p.Fields) != fmt.Sprint(tt.fields) || p.OriginalRequest != tt.orig {
				t.Errorf("fields %v original %q, want %v %q", p.Fields, p.OriginalRequest, tt.fields, tt.orig)
			}
			for _, secret := range []string{"4200", "cus_secret_123", "usd"} {
				if bytes.Contains(r.body, []byte(secret)) {
					t.Errorf("the 422 body echoes the original value %q: %s", secret, r.body)
				}
			}
		})
	}
	if n := e.runs.Load(); n != 1 {
		t.Errorf("handler ran %d times, want 1", n)
	}
}

func TestExcludedFieldsDoNotChangeTheFingerprint(t *testing.T) {
	t.Parallel()
	e := setup(t, &idem.Config{ExcludeFields: []string{"/client_ts"}})
	first := e.do(req{body: `{"amount":1,"client_ts":"10:00:01"}`, keys: []string{"x1"}})
	again := e.do(req{body: `{"amount":1,"client_ts":"10:00:07"}`, keys: []string{"x1"}})
	if first.status != http.StatusCreated || again.header.Get(idem.HeaderReplayed) != "true" {
		t.Fatalf("volatile field changed: %d then %d replayed=%q", first.status, again.status, again.header.Get(idem.HeaderReplayed))
	}
}

func TestKeyInFlightGets409WithRetryAfter(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		mode    idem.Mode
		advance time.Duration
		want    string
	}{
		{idem.ModeAtomic, 10 * time.Second, "1"},
		{idem.ModeTwoPhase, 10 * time.Second, "20"}, // 30 s lease, 10 s gone
	} {
		t.Run(tt.mode.String(), func(t *testing.T) {
			t.Parallel()
			e := setup(t, &idem.Config{Mode: tt.mode})
			open := e.gate("busy")
			first := make(chan resp, 1)
			go func() { first <- e.do(req{body: payment, keys: []string{"busy"}}) }()
			recvWithin(t, e.inside, "the first request to reach the handler") // it holds the key
			e.clock.Advance(tt.advance)
			second := make(chan resp, 1)
			go func() { second <- e.do(req{body: payment, keys: []string{"busy"}}) }()
			r := recvWithin(t, second, "the answer to a duplicate of a request in flight (want 409 at once, not a wait for the first)")
			if r.status != http.StatusConflict || r.header.Get("Retry-After") != tt.want {
				t.Fatalf("duplicate in flight: %d Retry-After %q, want 409 and %s", r.status, r.header.Get("Retry-After"), tt.want)
			}
			if p := r.problem(t); p.Code != "idempotency-key-in-flight" || p.Title != "A request is outstanding for this Idempotency-Key" {
				t.Errorf("problem = %+v", p)
			}
			open()
			if f := recvWithin(t, first, "the first request's answer once its handler was let go"); f.status != http.StatusCreated {
				t.Fatalf("first request: %d %s", f.status, f.body)
			}
			if r := e.do(req{body: payment, keys: []string{"busy"}}); r.header.Get(idem.HeaderReplayed) != "true" {
				t.Errorf("after the first finished: %d replayed=%q, want the replay", r.status, r.header.Get(idem.HeaderReplayed))
			}
		})
	}
}

func TestUnprocessedAndFailedRequestsReleaseTheKey(t *testing.T) {
	t.Parallel()
	for _, behave := range []string{"400", "500", "panic"} {
		t.Run(behave, func(t *testing.T) {
			t.Parallel()
			e := setup(t, nil)
			r := e.do(req{body: payment, behave: behave, keys: []string{"rel"}})
			if behave != "panic" && r.status != mustAtoi(behave) {
				t.Fatalf("status %d, want %s", r.status, behave)
			}
			if n := e.rows("rel"); n != 0 {
				t.Fatalf("%d business rows after %s, want 0: the writes roll back with the key", n, behave)
			}
			if e.keys() != 0 {
				t.Fatalf("the key is still stored after %s", behave)
			}
			// A corrected retry with the same key, even another body, runs.
			ok := e.do(req{body: `{"amount":1}`, keys: []string{"rel"}})
			if ok.status != http.StatusCreated || ok.header.Get(idem.HeaderReplayed) != "" {
				t.Fatalf("corrected retry: %d replayed=%q, want a fresh 201", ok.status, ok.header.Get(idem.HeaderReplayed))
			}
			if n := e.rows("rel"); n != 1 {
				t.Errorf("%d business rows after the retry, want 1", n)
			}
		})
	}
}

func mustAtoi(s string) int {
	var n int
	fmt.Sscan(s, &n)
	return n
}

func TestStoreServerErrorsPolicyReplays500(t *testing.T) {
	t.Parallel()
	e := setup(t, &idem.Config{Outcome: idem.StoreServerErrorsPolicy})
	first := e.do(req{body: payment, behave: "500", keys: []string{"s5"}})
	again := e.do(req{body: payment, keys: []string{"s5"}})
	if first.status != 500 || again.status != 500 || again.header.Get(idem.HeaderReplayed) != "true" || !bytes.Equal(first.body, again.body) {
		t.Fatalf("500 then %d replayed=%q, want the stored 500 replayed", again.status, again.header.Get(idem.HeaderReplayed))
	}
	if n := e.rows("s5"); n != 1 {
		t.Errorf("%d business rows, want 1 (stored with the 500)", n)
	}
}

func TestKeysAreScopedPerClient(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	a := e.do(req{client: "alice", body: payment, keys: []string{"shared"}})
	b := e.do(req{client: "bob", body: payment, keys: []string{"shared"}})
	c := e.do(req{client: "bob", body: `{"amount":1}`, keys: []string{"shared"}})
	if a.status != 201 || b.status != 201 || bytes.Equal(a.body, b.body) || b.header.Get(idem.HeaderReplayed) != "" {
		t.Fatalf("alice %d %s, bob %d %s: want two separate executions", a.status, a.body, b.status, b.body)
	}
	if c.status != 422 {
		t.Fatalf("bob's reuse with another body: %d, want 422 from bob's own record", c.status)
	}
	var derived []string
	rows, err := e.store.ReadDB().Query(`SELECT derived FROM business WHERE key = 'shared'`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var d string
		rows.Scan(&d)
		derived = append(derived, d)
	}
	rows.Close()
	if len(derived) != 2 || derived[0] == derived[1] {
		t.Errorf("derived keys %q: want two, different per client", derived)
	}
}

func TestExpiredKeyRunsAgain(t *testing.T) {
	t.Parallel()
	e := setup(t, &idem.Config{Retention: time.Hour})
	first := e.do(req{body: payment, keys: []string{"old"}})
	e.clock.Advance(time.Hour + time.Second)
	again := e.do(req{body: payment, keys: []string{"old"}})
	if first.status != 201 || again.status != 201 || again.header.Get(idem.HeaderReplayed) != "" || bytes.Equal(first.body, again.body) {
		t.Fatalf("after retention: %d replayed=%q, want a new execution", again.status, again.header.Get(idem.HeaderReplayed))
	}
}

func TestStoreDownGets503AndNeverRunsTheHandler(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	e.store.Close()
	r := e.do(req{body: payment, keys: []string{"down"}})
	if r.status != http.StatusServiceUnavailable || r.header.Get("Retry-After") == "" || r.problem(t).Code != "store-unavailable" {
		t.Fatalf("store closed: %d Retry-After %q body %s, want 503 store-unavailable with Retry-After", r.status, r.header.Get("Retry-After"), r.body)
	}
	if n := e.runs.Load(); n != 0 {
		t.Errorf("handler ran %d times with no store, want 0", n)
	}
}

func TestConcurrentDuplicatesExecuteOnce(t *testing.T) {
	t.Parallel()
	for _, mode := range []idem.Mode{idem.ModeAtomic, idem.ModeTwoPhase} {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			e := setup(t, &idem.Config{Mode: mode})
			const n = 50
			start := make(chan struct{})
			results := make([]resp, n)
			var wg sync.WaitGroup
			for i := range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					results[i] = e.do(req{body: payment, keys: []string{"burst"}})
				}()
			}
			close(start)
			wg.Wait()
			var created []byte
			counts := map[int]int{}
			for _, r := range results {
				counts[r.status]++
				if r.status == http.StatusCreated {
					if created == nil {
						created = r.body
					} else if !bytes.Equal(created, r.body) {
						t.Errorf("two different 201 bodies: %s and %s", created, r.body)
					}
				} else if r.status != http.StatusConflict {
					t.Errorf("unexpected status %d: %s", r.status, r.body)
				}
			}
			if e.rows("burst") != 1 || e.runs.Load() != 1 {
				t.Fatalf("%d business rows, %d executions; want exactly 1 (statuses %v)", e.rows("burst"), e.runs.Load(), counts)
			}
			t.Logf("statuses: %v", counts)
		})
	}
}

// countingMetrics counts results, as a Prometheus adapter would.
type countingMetrics struct {
	mu     sync.Mutex
	counts map[idem.Result]int
	claims int
}

func (c *countingMetrics) Request(_ context.Context, r idem.Result) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.counts[r]++
}

func (c *countingMetrics) Claim(context.Context, time.Duration, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.claims++
}

func TestMetricsCountEveryResult(t *testing.T) {
	t.Parallel()
	m := &countingMetrics{counts: map[idem.Result]int{}}
	e := setup(t, &idem.Config{Metrics: m})
	e.do(req{body: payment, keys: []string{"m1"}})                              // executed
	e.do(req{body: payment, keys: []string{"m1"}})                              // replayed
	e.do(req{body: `{"amount":1}`, keys: []string{"m1"}})                       // mismatch
	e.do(req{body: payment})                                                    // rejected: no key
	e.do(req{body: payment, keys: []string{`"bad`}})                            // rejected: malformed
	e.do(req{body: payment, behave: "500", keys: []string{"m2"}})               // released
	e.do(req{body: payment, behave: "panic", keys: []string{"m3"}, once: true}) // released
	e.do(req{method: http.MethodGet, keys: []string{"m4"}})                     // not handled
	want := map[idem.Result]int{
		idem.ResultExecuted: 1, idem.ResultReplayed: 1, idem.ResultMismatch: 1,
		idem.ResultRejected: 2, idem.ResultReleased: 2,
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if fmt.Sprint(m.counts) != fmt.Sprint(want) {
		t.Errorf("results = %v, want %v", m.counts, want)
	}
	if m.claims != 5 {
		t.Errorf("%d claims observed, want 5 (one per request that reached the store)", m.claims)
	}
}

// TestReuseWithNumberBeyondDouble changes only a digit that a double cannot
// hold: the retry is another request, answered 422, never the replay of the
// first.
func TestReuseWithNumberBeyondDouble(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	first := e.do(req{body: `{"amount":4200,"order_id":1234567890123456789}`, keys: []string{"long-id"}})
	if first.status != http.StatusCreated {
		t.Fatalf("first request: %d %s", first.status, first.body)
	}
	same := e.do(req{body: `{"order_id":1.234567890123456789e18,"amount":4200}`, keys: []string{"long-id"}})
	if same.status != http.StatusCreated || same.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("the same id spelled otherwise: %d, replayed %q; want the replay", same.status, same.header.Get("Idempotent-Replayed"))
	}
	other := e.do(req{body: `{"amount":4200,"order_id":1234567890123456788}`, keys: []string{"long-id"}})
	if p := other.problem(t); other.status != http.StatusUnprocessableEntity || fmt.Sprint(p.Fields) != "[/order_id]" {
		t.Fatalf("another id: %d %+v, want 422 naming /order_id", other.status, p)
	}
	if n := e.runs.Load(); n != 1 {
		t.Errorf("handler ran %d times, want 1", n)
	}
}
