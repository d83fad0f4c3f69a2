package idem_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemtest"
)

// TestBodyLimit checks that Config.MaxBodyBytes is the largest body
// accepted, whether the request declares its length or not: a body of
// exactly the limit runs the handler, one byte more is refused with 413
// before any store work.
func TestBodyLimit(t *testing.T) {
	t.Parallel()
	const limit = 32
	body := func(n int) string { return `{"pad":"` + strings.Repeat("x", n-len(`{"pad":""}`)) + `"}` }
	tests := []struct {
		name     string
		size     int
		declared bool // the request declares its length
		status   int
	}{
		{"AtTheLimitDeclared", limit, true, http.StatusCreated},
		{"AtTheLimitUndeclared", limit, false, http.StatusCreated},
		{"OverTheLimitDeclared", limit + 1, true, http.StatusRequestEntityTooLarge},
		{"OverTheLimitUndeclared", limit + 1, false, http.StatusRequestEntityTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			mw, err := idem.New(idemtest.NewMemoryStore(), &idem.Config{
				ClientID:     func(*http.Request) (string, bool) { return "alice", true },
				Logger:       quiet,
				MaxBodyBytes: limit,
			})
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			h := mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				b, _ := io.ReadAll(r.Body)
				got = append(got, string(b))
				w.WriteHeader(http.StatusCreated)
			}))
			sent := body(tt.size)
			r := httptest.NewRequest(http.MethodPost, "/v1/payments", strings.NewReader(sent))
			if !tt.declared {
				r.ContentLength = -1
			}
			r.Header.Set("Content-Type", "application/json")
			r.Header.Set(idem.HeaderKey, `"k"`)
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if w.Code != tt.status {
				t.Fatalf("a body of %d bytes: %d %s, want %d", len(sent), w.Code, w.Body, tt.status)
			}
			if tt.status != http.StatusCreated {
				p := resp{status: w.Code, header: w.Header(), body: w.Body.Bytes()}.problem(t)
				if p.Code != string(idem.ProblemBodyTooLarge) || !strings.Contains(p.Detail, "32 bytes") || len(got) != 0 {
					t.Errorf("problem %+v after %d runs, want %s naming the limit, and no run", p, len(got), idem.ProblemBodyTooLarge)
				}
			} else if len(got) != 1 || got[0] != sent {
				t.Errorf("the handler read %q, want %q once", got, sent)
			}
		})
	}
}
