package idem_test

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemtest"
)

func TestBuiltInPoliciesReleaseNotProcessedStatuses(t *testing.T) {
	released := []int{400, 401, 403, 404, 408, 413, 415, 429}
	stored := []int{200, 201, 202, 302, 402, 409, 410, 422}
	for _, status := range released {
		if got := idem.DefaultOutcomePolicy(status); got != idem.OutcomeRelease {
			t.Errorf("DefaultOutcomePolicy(%d) = %v, want release", status, got)
		}
		if got := idem.StoreServerErrorsPolicy(status); got != idem.OutcomeRelease {
			t.Errorf("StoreServerErrorsPolicy(%d) = %v, want release", status, got)
		}
	}
	for _, status := range stored {
		if got := idem.DefaultOutcomePolicy(status); got != idem.OutcomeStore {
			t.Errorf("DefaultOutcomePolicy(%d) = %v, want store", status, got)
		}
	}
	for _, status := range []int{http.StatusInternalServerError, http.StatusBadGateway, http.StatusServiceUnavailable} {
		if got := idem.DefaultOutcomePolicy(status); got != idem.OutcomeRelease {
			t.Errorf("DefaultOutcomePolicy(%d) = %v, want release", status, got)
		}
		if got := idem.StoreServerErrorsPolicy(status); got != idem.OutcomeStore {
			t.Errorf("StoreServerErrorsPolicy(%d) = %v, want store", status, got)
		}
	}
}

// A key sent where none is required is honoured all the same: the retry
// is replayed and the handler runs once; without a key the request passes
// through, and runs each time.
func TestOptionalKeyIsHonoured(t *testing.T) {
	var runs atomic.Int32
	mw, err := idem.New(idemtest.NewMemoryStore(), &idem.Config{Require: idem.RequireNone, Logger: slog.New(slog.DiscardHandler),
		ClientID: func(*http.Request) (string, bool) { return "client-1", true }})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"run":%d}`, runs.Add(1))
	})))
	defer srv.Close()
	send := func(key string) (int, string, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(`{"amount":1}`))
		req.Header.Set("Content-Type", "application/json")
		if key != "" {
			req.Header.Set(idem.HeaderKey, key)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b), res.Header.Get(idem.HeaderReplayed)
	}
	_, first, _ := send(`"opt-1"`)
	status, again, replayed := send(`"opt-1"`)
	if status != http.StatusCreated || again != first || replayed != "true" {
		t.Fatalf("the same optional key again: %d %s (replayed %q), want the replay of %s", status, again, replayed, first)
	}
	if _, body, replayed := send(""); replayed != "" || body != `{"run":2}` {
		t.Fatalf("without a key: %s (replayed %q), want the handler's second run", body, replayed)
	}
	if n := runs.Load(); n != 2 {
		t.Errorf("handler ran %d times, want 2", n)
	}
}
