package idemsqlite_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemsqlite"
)

func readyz(t *testing.T, h http.Handler) (int, idem.Problem) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
	var p idem.Problem
	if rec.Code != http.StatusOK {
		if ct := rec.Header().Get("Content-Type"); ct != idem.ProblemContentType {
			t.Fatalf("%d answer has Content-Type %q, want a problem", rec.Code, ct)
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil {
			t.Fatalf("decode problem: %v", err)
		}
	}
	return rec.Code, p
}

func TestReadyHandler(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store, err := idemsqlite.Open(filepath.Join(t.TempDir(), "idem.db"), &idemsqlite.Config{Logger: quiet})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	h, err := idem.NewReadyHandler(store, &idem.Config{Logger: quiet})
	if err != nil {
		t.Fatalf("NewReadyHandler: %v", err)
	}
	if code, p := readyz(t, h); code != http.StatusServiceUnavailable || p.Code != string(idem.ProblemUnavailable) || !strings.Contains(p.Detail, "schema is at version 0") {
		t.Errorf("unmigrated: %d %+v, want 503 naming the schema version", code, p)
	}
	if err := store.Migrate(ctx); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	if code, p := readyz(t, h); code != http.StatusOK {
		t.Errorf("migrated: %d %+v, want 200", code, p)
	}
	store.Close()
	if code, p := readyz(t, h); code != http.StatusServiceUnavailable || !strings.Contains(p.Detail, "did not answer") {
		t.Errorf("closed: %d %+v, want 503", code, p)
	}
}

// stuckReadier answers only when its context ends, as a database that
// accepts the connection and never replies.
type stuckReadier struct{}

func (stuckReadier) Ready(ctx context.Context) error {
	<-ctx.Done()
	return ctx.Err()
}

func TestReadyHandlerTimesOut(t *testing.T) {
	t.Parallel()
	h, err := idem.NewReadyHandler(stuckReadier{}, &idem.Config{ReadyTimeout: time.Millisecond, Logger: quiet})
	if err != nil {
		t.Fatalf("NewReadyHandler: %v", err)
	}
	if code, p := readyz(t, h); code != http.StatusServiceUnavailable || !strings.Contains(p.Detail, "within 1ms") {
		t.Errorf("stuck store: %d %+v, want 503 naming the deadline", code, p)
	}
}
