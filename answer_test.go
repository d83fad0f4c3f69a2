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

// TestReplayHeaders checks the fields of a replayed response: the stored
// ones, Idempotent-Replayed and a Content-Length of the stored body, each
// a slice of its own, and no Content-Length where the status allows no body.
func TestReplayHeaders(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		status int
		body   string
	}{
		{"Created", http.StatusCreated, `{"id":"pay_1"}`},
		{"NoContent", http.StatusNoContent, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			mw, err := idem.New(idemtest.NewMemoryStore(), &idem.Config{
				ClientID: func(*http.Request) (string, bool) { return "client-1", true },
				Logger:   quiet,
			})
			if err != nil {
				t.Fatal(err)
			}
			h := mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				io.Copy(io.Discard, r.Body)
				w.Header().Set("Content-Type", "application/json")
				w.Header().Set("Location", "/v1/payments/pay_1")
				w.WriteHeader(tc.status)
				io.WriteString(w, tc.body)
			}))
			serve := func() *httptest.ResponseRecorder {
				r := httptest.NewRequest(http.MethodPost, "/v1/payments", strings.NewReader(`{"amount":100}`))
				r.Header.Set("Content-Type", "application/json")
				r.Header.Set(idem.HeaderKey, `"k"`)
				w := httptest.NewRecorder()
				h.ServeHTTP(w, r)
				return w
			}
			first, again := serve(), serve()
			if again.Code != tc.status || again.Body.String() != tc.body {
				t.Fatalf("replay = %d %q, want %d %q", again.Code, again.Body, tc.status, tc.body)
			}
			got := again.Header()
			if got.Get(idem.HeaderReplayed) != "true" || first.Header().Get(idem.HeaderReplayed) != "" {
				t.Errorf("%s = %q on the replay and %q on the first answer, want true and none", idem.HeaderReplayed, got.Get(idem.HeaderReplayed), first.Header().Get(idem.HeaderReplayed))
			}
			wantLength := []string{"14"}
			if tc.body == "" {
				wantLength = nil
			}
			if l := got.Values("Content-Length"); strings.Join(l, ",") != strings.Join(wantLength, ",") {
				t.Errorf("Content-Length = %q, want %q", l, wantLength)
			}
			if got.Get("Location") != "/v1/payments/pay_1" || got.Get("Content-Type") != "application/json" {
				t.Errorf("stored fields not replayed: %v", got)
			}
			// Each field's values are a slice of their own: appending to one
			// leaves the others as they were.
			before := map[string]string{}
			for name, values := range got {
				before[name] = strings.Join(values, ",")
			}
			for name := range got {
				got[name] = append(got[name], "extra")
			}
			for name, values := range got {
				if want := before[name] + ",extra"; strings.Join(values, ",") != want {
					t.Errorf("%s = %q after appending to every field, want %q", name, values, want)
				}
			}
		})
	}
}
