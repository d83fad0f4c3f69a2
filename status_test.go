package idem_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemtest"
)

// TestStatusHandlerKeyFromPath checks where the key-status handler finds
// the key: the pattern's "key" wildcard wherever it is in the path, or
// else the path's last segment, under a prefix pattern or with no router;
// a "/" in the key is sent as %2F, and the key may come as an sf-string.
// Each answer is a 200 whose Content-Length is its body's.
func TestStatusHandlerKeyFromPath(t *testing.T) {
	t.Parallel()
	client := func(*http.Request) (string, bool) { return "alice", true }
	store := idemtest.NewMemoryStore()
	mw, err := idem.New(store, &idem.Config{ClientID: client, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	status, err := idem.NewStatusHandler(store, &idem.Config{ClientID: client, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	pay := mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
	}))
	for _, key := range []string{"order-7", "a/b"} {
		r := httptest.NewRequest(http.MethodPost, "/v1/payments", strings.NewReader(`{"amount":1}`))
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set(idem.HeaderKey, strconv.Quote(key))
		w := httptest.NewRecorder()
		pay.ServeHTTP(w, r)
		if w.Code != http.StatusCreated {
			t.Fatalf("POST with key %q: %d", key, w.Code)
		}
	}
	routed := func(pattern string) http.Handler {
		mux := http.NewServeMux()
		mux.Handle(pattern, status)
		return mux
	}
	tests := []struct {
		name    string
		handler http.Handler
		path    string
		key     string
	}{
		{"Wildcard", routed("GET /v1/idempotency-keys/{key}"), "/v1/idempotency-keys/order-7", "order-7"},
		{"WildcardEscapedSlash", routed("GET /v1/idempotency-keys/{key}"), "/v1/idempotency-keys/a%2Fb", "a/b"},
		{"WildcardNotLast", routed("GET /v1/keys/{key}/status"), "/v1/keys/order-7/status", "order-7"},
		{"WildcardString", routed("GET /v1/idempotency-keys/{key}"), "/v1/idempotency-keys/%22order-7%22", "order-7"},
		{"Prefix", routed("GET /v1/idempotency-keys/"), "/v1/idempotency-keys/order-7", "order-7"},
		{"PrefixEscapedSlash", routed("GET /v1/idempotency-keys/"), "/v1/idempotency-keys/a%2Fb", "a/b"},
		{"NoRouter", status, "/v1/idempotency-keys/order-7", "order-7"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			w := httptest.NewRecorder()
			tt.handler.ServeHTTP(w, httptest.NewRequest(http.MethodGet, tt.path, nil))
			var st idem.KeyStatus
			if err := json.Unmarshal(w.Body.Bytes(), &st); w.Code != http.StatusOK || err != nil || st.Key != tt.key || st.State != idem.KeyStateCompleted {
				t.Fatalf("GET %s: %d %s (%v), want 200 for key %q", tt.path, w.Code, w.Body, err, tt.key)
			}
			if cl := w.Header().Get("Content-Length"); cl != strconv.Itoa(w.Body.Len()) {
				t.Errorf("Content-Length %q for a body of %d bytes", cl, w.Body.Len())
			}
			if w.Header().Get("Content-Type") != "application/json" || w.Header().Get("Cache-Control") != "no-store" {
				t.Errorf("header %v, want Content-Type application/json and Cache-Control no-store", w.Header())
			}
		})
	}
}
