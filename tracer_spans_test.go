package idem_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemtest"
)

// TestEverySpanEndsOnce: each span the middleware starts for a request is
// ended once, and the claim's span ends with the token of the lease it
// obtained, or none when the key existed.
func TestEverySpanEndsOnce(t *testing.T) {
	t.Parallel()
	for _, mode := range []idem.Mode{idem.ModeAtomic, idem.ModeTwoPhase} {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			tracer := &spanRecorder{}
			mw, err := idem.New(idemtest.NewMemoryStore(), &idem.Config{
				ClientID: func(*http.Request) (string, bool) { return "client-1", true },
				Logger:   quiet,
				Mode:     mode,
				Tracer:   tracer,
			})
			if err != nil {
				t.Fatal(err)
			}
			h := mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(http.StatusCreated)
			}))
			post := func() int {
				r := httptest.NewRequest(http.MethodPost, "/v1/payments", strings.NewReader(payment))
				r.Header.Set("Content-Type", "application/json")
				r.Header.Set(idem.HeaderKey, `"spans"`)
				w := httptest.NewRecorder()
				h.ServeHTTP(w, r)
				return w.Code
			}
			for _, tt := range []struct {
				name       string
				claimToken bool // the claim obtained a lease
			}{
				{"FirstRequest", true},
				{"Replay", false},
			} {
				if code := post(); code != http.StatusCreated {
					t.Fatalf("%s: status %d, want 201", tt.name, code)
				}
				claims := 0
				for _, sp := range tracer.take() {
					if sp.start.Step == idem.StepClaim {
						claims++
					}
					if len(sp.ends) != 1 {
						t.Errorf("%s: span %s ended %d times, want once", tt.name, sp.start.Step, len(sp.ends))
						continue
					}
					if sp.start.Step != idem.StepClaim {
						continue
					}
					if end := sp.ends[0]; end.Err != nil || (end.Token > 0) != tt.claimToken {
						t.Errorf("%s: claim span ended with %+v; want no error and a token: %v", tt.name, end, tt.claimToken)
					}
				}
				if claims != 1 {
					t.Errorf("%s: %d claim spans, want 1", tt.name, claims)
				}
			}
		})
	}
}
