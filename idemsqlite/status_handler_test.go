package idemsqlite_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemsqlite"
	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/internal/keyspec"
)

// statusStores are the stores the key-status tests run on.
func statusStores(t *testing.T) map[string]interface {
	idemstore.Store
	idemstore.KeyReader
} {
	t.Helper()
	sq, err := idemsqlite.Open(filepath.Join(t.TempDir(), "idem.db"), &idemsqlite.Config{Logger: quiet})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { sq.Close() })
	if err := sq.Migrate(context.Background()); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	return map[string]interface {
		idemstore.Store
		idemstore.KeyReader
	}{"Memory": idemtest.NewMemoryStore(), "SQLite": sq}
}

// statusServer serves POST /v1/payments behind the middleware, whose
// handler runs once per execution and can be held, and the key-status
// endpoint. The client is the X-Client header.
type statusServer struct {
	url     string
	runs    atomic.Int64
	hold    chan struct{} // a request with body {"hold":true} waits on it
	entered chan struct{} // after it entered the handler
	clock   *idemtest.Clock
}

func newStatusServer(t *testing.T, store interface {
	idemstore.Store
	idemstore.KeyReader
}) *statusServer {
	t.Helper()
	s := &statusServer{hold: make(chan struct{}), entered: make(chan struct{}, 1), clock: idemtest.NewClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))}
	clientID := func(r *http.Request) (string, bool) { c := r.Header.Get("X-Client"); return c, c != "" }
	mw, err := idem.New(store, &idem.Config{ClientID: clientID, Mode: idem.ModeTwoPhase, Logger: quiet, Now: s.clock.Now})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	status, err := idem.NewStatusHandler(store, &idem.Config{ClientID: clientID, Logger: quiet, Now: s.clock.Now})
	if err != nil {
		t.Fatalf("NewStatusHandler: %v", err)
	}
	mux := http.NewServeMux()
	mux.Handle("POST /v1/payments", mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.runs.Add(1)
		if body, _ := io.ReadAll(r.Body); string(body) == `{"hold":true}` {
			s.entered <- struct{}{}
			<-s.hold
		}
		w.Header().Set("Location", "/v1/payments/pay_1")
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, `{"id":"pay_1"}`)
	})))
	mux.Handle("GET /v1/idempotency-keys/{key}", status)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	s.url = srv.URL
	return s
}

func (s *statusServer) post(t *testing.T, client, key, body string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, s.url+"/v1/payments", strings.NewReader(body))
	req.Header.Set("X-Client", client)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(idem.HeaderKey, keyspec.Quote(key))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST: %v", err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

// get returns the status, the headers and the body of a key-status request.
func (s *statusServer) get(t *testing.T, client, key string) (int, http.Header, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, s.url+"/v1/idempotency-keys/"+url.PathEscape(key), nil)
	if client != "" {
		req.Header.Set("X-Client", client)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET: %v", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	resp.Header.Del("Date")
	return resp.StatusCode, resp.Header, string(body)
}

func TestKeyStatus(t *testing.T) {
	t.Parallel()
	for name, store := range statusStores(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := newStatusServer(t, store)
			if resp := s.post(t, "alice", "order-1", `{"amount":1}`); resp.StatusCode != http.StatusCreated {
				t.Fatalf("POST = %d, want 201", resp.StatusCode)
			}

			t.Run("OwnerSeesCompleted", func(t *testing.T) {
				code, h, body := s.get(t, "alice", "order-1")
				if code != http.StatusOK || h.Get("Content-Type") != "application/json" || h.Get("Cache-Control") != "no-store" {
					t.Fatalf("GET = %d %v %s, want 200 JSON", code, h, body)
				}
				var st idem.KeyStatus
				if err := json.Unmarshal([]byte(body), &st); err != nil {
					t.Fatalf("decode %s: %v", body, err)
				}
				created := s.clock.Now()
				want := idem.KeyStatus{Key: "order-1", State: idem.KeyStateCompleted, Method: "POST", Path: "/v1/payments",
					Created: created, Expires: created.Add(idem.RetentionDefault), ResponseStatus: 201, Link: "/v1/payments/pay_1"}
				if !st.Created.Equal(want.Created) || !st.Expires.Equal(want.Expires) {
					t.Errorf("created %s expires %s, want %s and %s", st.Created, st.Expires, want.Created, want.Expires)
				}
				st.Created, st.Expires = want.Created, want.Expires
				if st != want {
					t.Errorf("status = %+v, want %+v", st, want)
				}
			})

			t.Run("OtherClientGetsTheUnknownKey404", func(t *testing.T) {
				code, h, body := s.get(t, "bob", "order-1")
				ucode, uh, ubody := s.get(t, "bob", "never-used")
				if code != http.StatusNotFound || h.Get("Content-Type") != idem.ProblemContentType {
					t.Fatalf("another client's key: %d %s %s, want a 404 problem", code, h.Get("Content-Type"), body)
				}
				if code != ucode || body != ubody || !equalHeaders(h, uh) {
					t.Errorf("another client's key answers\n%d %v %q\nand an unknown key\n%d %v %q\nwant byte-identical answers", code, h, body, ucode, uh, ubody)
				}
				if strings.Contains(body, "order-1") || strings.Contains(body, "alice") {
					t.Errorf("404 body %q names the key or its owner", body)
				}
			})

			t.Run("NeverRunsTheOperation", func(t *testing.T) {
				before := s.runs.Load()
				for range 3 {
					s.get(t, "alice", "order-1")
				}
				if n := s.runs.Load(); n != before || n != 1 {
					t.Errorf("handler ran %d times in all, want 1: the status endpoint must not run it", n)
				}
			})

			t.Run("ExpiredKeyIs404", func(t *testing.T) {
				s2 := newStatusServer(t, storeOf(t, name))
				s2.post(t, "alice", "old", `{"amount":1}`)
				s2.clock.Advance(idem.RetentionDefault)
				code, _, body := s2.get(t, "alice", "old")
				_, _, unknown := s2.get(t, "alice", "never-used")
				if code != http.StatusNotFound || body != unknown {
					t.Errorf("expired key: %d %s, want the unknown key's 404 %s", code, body, unknown)
				}
			})

			t.Run("BadRequests", func(t *testing.T) {
				for _, tt := range []struct {
					name, client, key string
					want              int
				}{
					{"NoClient", "", "order-1", http.StatusUnauthorized},
					{"KeyTooLong", "alice", strings.Repeat("k", idem.MaxKeyLength+1), http.StatusBadRequest},
					{"KeyNotPrintable", "alice", "a\x01b", http.StatusBadRequest},
				} {
					if code, h, body := s.get(t, tt.client, tt.key); code != tt.want || h.Get("Content-Type") != idem.ProblemContentType {
						t.Errorf("%s: %d %s %s, want a %d problem", tt.name, code, h.Get("Content-Type"), body, tt.want)
					}
				}
			})
		})
	}
}

// TestKeyStatusPathSpellings: the key in the path is read from the escaped
// path, so that a "/" sent as %2F stays in the key under a prefix pattern
// and without a mux, as it does under a {key} wildcard; and the quoted
// spelling that the Idempotency-Key field carries names the same key.
func TestKeyStatusPathSpellings(t *testing.T) {
	t.Parallel()
	for name, store := range statusStores(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := newStatusServer(t, store)
			keys := []string{"order-1", "tenant/order-2", "k", `with "quotes" \ and space`}
			for _, key := range append(keys, `"lead`) {
				if resp := s.post(t, "alice", key, `{"amount":1}`); resp.StatusCode != http.StatusCreated {
					t.Fatalf("POST with key %q = %d, want 201", key, resp.StatusCode)
				}
			}
			status, err := idem.NewStatusHandler(store, &idem.Config{ClientID: func(*http.Request) (string, bool) { return "alice", true }, Logger: quiet, Now: s.clock.Now})
			if err != nil {
				t.Fatalf("NewStatusHandler: %v", err)
			}
			prefix := http.NewServeMux()
			prefix.Handle("GET /v1/idempotency-keys/", status)
			servers := map[string]string{"Wildcard": s.url}
			for name, h := range map[string]http.Handler{"PrefixPattern": prefix, "NoMux": status} {
				srv := httptest.NewServer(h)
				t.Cleanup(srv.Close)
				servers[name] = srv.URL
			}
			get := func(t *testing.T, url string) (int, idem.KeyStatus) {
				t.Helper()
				req, _ := http.NewRequest(http.MethodGet, url, nil)
				req.Header.Set("X-Client", "alice")
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatalf("GET %s: %v", url, err)
				}
				defer resp.Body.Close()
				var st idem.KeyStatus
				json.NewDecoder(resp.Body).Decode(&st)
				return resp.StatusCode, st
			}
			for server, base := range servers {
				for _, key := range keys {
					quoted := keyspec.Quote(key)
					for spelling, segment := range map[string]string{
						"Bare":         url.PathEscape(key),
						"Quoted":       url.PathEscape(quoted),
						"QuotedParams": url.PathEscape(quoted + ";v=1"),
					} {
						code, st := get(t, base+"/v1/idempotency-keys/"+segment)
						if code != http.StatusOK || st.Key != key || st.State != idem.KeyStateCompleted {
							t.Errorf("%s: GET /v1/idempotency-keys/%s (key %q, %s) = %d %+v, want 200 completed for the key", server, segment, key, spelling, code, st)
						}
					}
				}
				// The key "b" is not the key "tenant/b"'s last segment.
				if code, _ := get(t, base+"/v1/idempotency-keys/order-2"); code != http.StatusNotFound {
					t.Errorf("%s: GET the key order-2 = %d, want 404: only tenant/order-2 was used", server, code)
				}
				// A key that starts with '"' is named by its sf-string, as in
				// the Idempotency-Key field.
				if code, st := get(t, base+"/v1/idempotency-keys/"+url.PathEscape(keyspec.Quote(`"lead`))); code != http.StatusOK || st.Key != `"lead` {
					t.Errorf("%s: GET the sf-string of the key %q = %d %+v, want 200 for the key", server, `"lead`, code, st)
				}
				for _, bad := range []string{"%22lead", "%22unterminated", "%22%22", "%22k%22x"} {
					if code, _ := get(t, base+"/v1/idempotency-keys/"+bad); code != http.StatusBadRequest {
						t.Errorf("%s: GET /v1/idempotency-keys/%s = %d, want 400: a malformed sf-string", server, bad, code)
					}
				}
			}
		})
	}
}

func TestKeyStatusInProgress(t *testing.T) {
	t.Parallel()
	for name := range statusStores(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := newStatusServer(t, storeOf(t, name))
			done := make(chan *http.Response, 1)
			go func() { done <- s.post(t, "alice", "slow", `{"hold":true}`) }()
			select {
			case <-s.entered:
			case <-time.After(20 * time.Second):
				t.Fatal("the held request never reached the handler")
			}
			code, _, body := s.get(t, "alice", "slow")
			var st idem.KeyStatus
			json.Unmarshal([]byte(body), &st)
			if code != http.StatusOK || st.State != idem.KeyStateInFlight || st.ResponseStatus != 0 || st.Link != "" {
				t.Errorf("held key: %d %s, want 200 in_flight without a response", code, body)
			}
			close(s.hold)
			if resp := <-done; resp.StatusCode != http.StatusCreated {
				t.Errorf("held POST = %d, want 201", resp.StatusCode)
			}
		})
	}
}

func TestKeyStatusStoreFailureIs503(t *testing.T) {
	t.Parallel()
	store, err := idemsqlite.Open(filepath.Join(t.TempDir(), "idem.db"), &idemsqlite.Config{Logger: quiet})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	store.Close()
	h, err := idem.NewStatusHandler(store, &idem.Config{ClientID: func(*http.Request) (string, bool) { return "alice", true }, Logger: quiet})
	if err != nil {
		t.Fatalf("NewStatusHandler: %v", err)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/idempotency-keys/k1", nil))
	if rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") == "" {
		t.Errorf("closed store: %d %v %s, want 503 with Retry-After", rec.Code, rec.Header(), rec.Body)
	}
}

func TestNewStatusHandlerRejectsBadConfig(t *testing.T) {
	t.Parallel()
	store := idemtest.NewMemoryStore()
	for _, cfg := range []*idem.Config{nil, {}, {ClientID: func(*http.Request) (string, bool) { return "", false }, Retention: -1}} {
		if _, err := idem.NewStatusHandler(store, cfg); err == nil {
			t.Errorf("NewStatusHandler(%+v) succeeded, want an error", cfg)
		}
	}
	if _, err := idem.NewStatusHandler(nil, &idem.Config{ClientID: func(*http.Request) (string, bool) { return "", false }}); err == nil {
		t.Error("NewStatusHandler(nil store) succeeded, want an error")
	}
}

// storeOf returns a fresh store of the named kind.
func storeOf(t *testing.T, name string) interface {
	idemstore.Store
	idemstore.KeyReader
} {
	t.Helper()
	return statusStores(t)[name]
}

func equalHeaders(a, b http.Header) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if strings.Join(v, "\n") != strings.Join(b.Values(k), "\n") {
			return false
		}
	}
	return true
}
