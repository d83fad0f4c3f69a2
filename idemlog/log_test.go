package idemlog_test

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemlog"
	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/internal/keyspec"
)

// logBuffer is a concurrency-safe buffer of JSON log lines.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// lines returns the "http request" lines.
func (b *logBuffer) lines(t *testing.T) []map[string]any {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(b.buf.String()), "\n") {
		if l == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("log line %q: %v", l, err)
		}
		if m["msg"] == "http request" {
			out = append(out, m)
		}
	}
	return out
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func TestNew(t *testing.T) {
	t.Parallel()
	logs := &logBuffer{}
	logger := slog.New(slog.NewJSONHandler(logs, nil))
	clientID := func(r *http.Request) (string, bool) {
		if r.Header.Get("Authorization") == "Bearer sk_secret_alice" {
			return "alice", true
		}
		return "", false
	}
	mw, err := idem.New(idemtest.NewMemoryStore(), &idem.Config{ClientID: clientID, Logger: logger})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	mux := http.NewServeMux()
	mux.Handle("POST /v1/payments", mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if id, ok := idemlog.RequestIDFromContext(r.Context()); !ok || id == "" {
			t.Error("the handler sees no request id")
		}
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, `{"card":"4242424242424242"}`)
	})))
	mux.HandleFunc("GET /panic", func(http.ResponseWriter, *http.Request) { panic("boom") })
	h := idemlog.New(&idemlog.Config{Logger: logger})(mux)

	const key = "order-secret-key-1"
	do := func(method, path, body, requestID string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(method, path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer sk_secret_alice")
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(idem.HeaderKey, `"`+key+`"`)
		if requestID != "" {
			req.Header.Set(idemlog.HeaderRequestID, requestID)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	hexID := regexp.MustCompile(`^[0-9a-f]{32}$`)
	for _, tt := range []struct {
		name, method, path, body, requestID string
		wantID                              string // "" for a generated one
		wantStatus                          int
		wantOutcome, wantRoute              string
	}{
		{"Executed", "POST", "/v1/payments", `{"amount":1}`, "req-abc.123", "req-abc.123", 201, "executed", "POST /v1/payments"},
		{"Replayed", "POST", "/v1/payments", `{"amount":1}`, "", "", 201, "replayed", "POST /v1/payments"},
		{"Mismatch", "POST", "/v1/payments", `{"amount":2}`, "has space", "", 422, "mismatch", "POST /v1/payments"},
		{"ControlCharacterID", "POST", "/v1/payments", `{"amount":1}`, "a\tb", "", 201, "replayed", "POST /v1/payments"},
		{"TooLongID", "POST", "/v1/payments", `{"amount":1}`, strings.Repeat("x", idemlog.MaxRequestIDLength+1), "", 201, "replayed", "POST /v1/payments"},
		{"Unmatched", "GET", "/v1/nothing/" + key, "", "", "", 404, "", "unmatched"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			before := len(logs.lines(t))
			rec := do(tt.method, tt.path, tt.body, tt.requestID)
			if rec.Code != tt.wantStatus {
				t.Fatalf("status %d, want %d", rec.Code, tt.wantStatus)
			}
			lines := logs.lines(t)
			if len(lines) != before+1 {
				t.Fatalf("%d request lines, want one more than %d", len(lines), before)
			}
			l := lines[len(lines)-1]
			id, _ := l["request_id"].(string)
			if tt.wantID != "" && id != tt.wantID || tt.wantID == "" && !hexID.MatchString(id) {
				t.Errorf("request_id %q, want %q or a generated one", id, tt.wantID)
			}
			if got := rec.Header().Get(idemlog.HeaderRequestID); got != id {
				t.Errorf("response X-Request-Id %q, want the logged %q", got, id)
			}
			if l["route"] != tt.wantRoute || l["status"] != float64(tt.wantStatus) || l["method"] != tt.method {
				t.Errorf("line %v, want route %q status %d", l, tt.wantRoute, tt.wantStatus)
			}
			if out, _ := l["outcome"].(string); out != tt.wantOutcome {
				t.Errorf("outcome %q, want %q", out, tt.wantOutcome)
			}
			if tt.wantOutcome != "" && (l["client"] != "alice" || l["key_digest"] != keyspec.Digest(key)) {
				t.Errorf("client %v key_digest %v, want alice and %s", l["client"], l["key_digest"], keyspec.Digest(key))
			}
			if _, ok := l["duration_ms"].(float64); !ok {
				t.Errorf("no duration_ms in %v", l)
			}
		})
	}
	t.Run("PanicIsLoggedAs500", func(t *testing.T) {
		defer func() {
			if recover() == nil {
				t.Error("the panic did not reach the server")
			}
			lines := logs.lines(t)
			if l := lines[len(lines)-1]; l["route"] != "GET /panic" || l["status"] != float64(500) {
				t.Errorf("line %v, want GET /panic with status 500", l)
			}
		}()
		do("GET", "/panic", "", "")
	})
	all := logs.String()
	for _, secret := range []string{key, "sk_secret_alice", "4242424242424242", `amount`} {
		if strings.Contains(all, secret) {
			t.Errorf("the log contains %q:\n%s", secret, all)
		}
	}
}

func TestNewKeepsFlushing(t *testing.T) {
	t.Parallel()
	h := idemlog.New(&idemlog.Config{Logger: slog.New(slog.DiscardHandler)})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f, ok := w.(http.Flusher)
		if !ok {
			t.Error("the wrapped writer is not an http.Flusher")
			return
		}
		io.WriteString(w, "part")
		f.Flush()
	}))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
	if !rec.Flushed {
		t.Error("Flush did not reach the server's writer")
	}
}
