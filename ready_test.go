package idem_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemstore"
)

// deadlineReadier answers at once, and keeps the deadline of the context
// it was asked with.
type deadlineReadier struct {
	deadline time.Time
	ok       bool
}

func (d *deadlineReadier) Ready(ctx context.Context) error {
	d.deadline, d.ok = ctx.Deadline()
	return ctx.Err()
}

// stuckReadier answers only when its context ends, as a database that
// accepts the connection and never replies.
type stuckReadier struct{}

func (stuckReadier) Ready(ctx context.Context) error {
	<-ctx.Done()
	return ctx.Err()
}

// outdatedReadier has a schema older than the build's.
type outdatedReadier struct{}

func (outdatedReadier) Ready(context.Context) error {
	return &idemstore.SchemaVersionError{Have: 2, Want: 3}
}

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

// TestReadyHandlerTimeout: the store has ReadyTimeout to answer, 2 s when
// the Config leaves it zero. The deadline is read from the context the
// store gets, bounded by the clock before and after the call, so the test
// does not depend on the machine's speed.
func TestReadyHandlerTimeout(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		set, want time.Duration
	}{
		"Default": {0, idem.ReadyTimeoutDefault},
		"Set":     {5 * time.Second, 5 * time.Second},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			store := &deadlineReadier{}
			h, err := idem.NewReadyHandler(store, &idem.Config{ReadyTimeout: tc.set, Logger: quiet})
			if err != nil {
				t.Fatalf("NewReadyHandler: %v", err)
			}
			before := time.Now()
			code, p := readyz(t, h)
			after := time.Now()
			if code != http.StatusOK {
				t.Fatalf("ready store: %d %+v, want 200", code, p)
			}
			if !store.ok || store.deadline.Before(before.Add(tc.want)) || store.deadline.After(after.Add(tc.want)) {
				t.Errorf("store asked with deadline %v (set %v) between %v and %v; want %v after the request",
					store.deadline, store.ok, before, after, tc.want)
			}
		})
	}
	t.Run("Stuck", func(t *testing.T) {
		t.Parallel()
		h, err := idem.NewReadyHandler(stuckReadier{}, &idem.Config{ReadyTimeout: time.Millisecond, Logger: quiet})
		if err != nil {
			t.Fatalf("NewReadyHandler: %v", err)
		}
		if code, p := readyz(t, h); code != http.StatusServiceUnavailable || p.Code != string(idem.ProblemUnavailable) || !strings.Contains(p.Detail, "within 1ms") {
			t.Errorf("stuck store: %d %+v, want 503 naming the deadline", code, p)
		}
	})
	t.Run("SchemaBehind", func(t *testing.T) {
		t.Parallel()
		h, err := idem.NewReadyHandler(outdatedReadier{}, &idem.Config{Logger: quiet})
		if err != nil {
			t.Fatalf("NewReadyHandler: %v", err)
		}
		if code, p := readyz(t, h); code != http.StatusServiceUnavailable || !strings.Contains(p.Detail, "version 2 and this build needs version 3") {
			t.Errorf("schema behind: %d %+v, want 503 naming both versions", code, p)
		}
	})
}
