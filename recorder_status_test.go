package idem_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemtest"
)

// TestFirstWriteHeaderWins: as with net/http, the first WriteHeader call
// sets the status and later ones are ignored, 200 included. A handler that
// answered 200 and then called WriteHeader(500) (http.Error after the
// answer began, say) ran its operation: its 200 is stored and replayed,
// not a 500 that would release the key and run it again.
func TestFirstWriteHeaderWins(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name   string
		status int
	}{
		{"OK", http.StatusOK},
		{"Created", http.StatusCreated},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			mw, err := idem.New(idemtest.NewMemoryStore(), &idem.Config{
				ClientID: func(*http.Request) (string, bool) { return "client-1", true },
				Logger:   quiet,
			})
			if err != nil {
				t.Fatal(err)
			}
			var runs atomic.Int32
			h := mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				runs.Add(1)
				w.WriteHeader(tt.status)
				w.WriteHeader(http.StatusInternalServerError) // superfluous: ignored
				io.WriteString(w, "done")
			}))
			for _, attempt := range []string{"first request", "retry"} {
				r := httptest.NewRequest(http.MethodPost, "/v1/payments", strings.NewReader(payment))
				r.Header.Set("Content-Type", "application/json")
				r.Header.Set(idem.HeaderKey, `"first-status"`)
				w := httptest.NewRecorder()
				h.ServeHTTP(w, r)
				if w.Code != tt.status || w.Body.String() != "done" {
					t.Errorf("%s: %d %q, want %d %q", attempt, w.Code, w.Body.String(), tt.status, "done")
				}
			}
			if n := runs.Load(); n != 1 {
				t.Errorf("handler ran %d times, want once: the retry replays", n)
			}
		})
	}
}
