package idem_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

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

// TestMismatchDetail checks what a 422 for a reused key tells the client
// about the first request: its method and path when those differ, else the
// media type when that differs, else the fields that differ, else that the
// query string or body does.
func TestMismatchDetail(t *testing.T) {
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
		w.WriteHeader(http.StatusCreated)
	}))
	serve := func(key, target, contentType, body string) resp {
		r := httptest.NewRequest(http.MethodPost, target, strings.NewReader(body))
		r.Header.Set("Content-Type", contentType)
		r.Header.Set(idem.HeaderKey, key)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return resp{status: w.Code, header: w.Header(), body: w.Body.Bytes()}
	}
	const first = `{"amount":100,"currency":"usd"}`
	tests := []struct {
		name         string
		target, body string
		contentType  string
		detail       string
		fields       string
		original     string
	}{
		{"OtherPath", "/v1/refunds?x=1", first, "application/json",
			"This key was first used for POST /v1/payments.", "", "POST /v1/payments"},
		{"OtherMediaType", "/v1/payments?x=1", "amount=100&currency=usd", "application/x-www-form-urlencoded",
			"This key was first used with a JSON body, and this request has a form body (application/x-www-form-urlencoded): the media type differs. A retry must send the first request's media type and body.", "", ""},
		{"OneField", "/v1/payments?x=1", `{"amount":200,"currency":"usd"}`, "application/json",
			"This key was first used with a different request: /amount differs.", "/amount", ""},
		{"TwoFields", "/v1/payments?x=1", `{"amount":200,"currency":"eur"}`, "application/json",
			"This key was first used with a different request: /amount, /currency differ.", "/amount,/currency", ""},
		{"OnlyTheQuery", "/v1/payments?x=2", first, "application/json",
			"This key was first used with a different request: the query string or body differs.", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			key := `"` + tt.name + `"`
			if r := serve(key, "/v1/payments?x=1", "application/json", first); r.status != http.StatusCreated {
				t.Fatalf("first request: status %d, want 201", r.status)
			}
			r := serve(key, tt.target, tt.contentType, tt.body)
			if r.status != http.StatusUnprocessableEntity {
				t.Fatalf("status %d, want 422; body %s", r.status, r.body)
			}
			// A 422 is final: the client must change the request or the
			// key, so there is no Retry-After.
			if ra := r.header.Values("Retry-After"); len(ra) != 0 {
				t.Errorf("Retry-After %q on a 422, want none", ra)
			}
			p := r.problem(t)
			if p.Detail != tt.detail || strings.Join(p.Fields, ",") != tt.fields || p.OriginalRequest != tt.original {
				t.Errorf("detail %q, fields %q, original request %q;\nwant %q, %q, %q",
					p.Detail, p.Fields, p.OriginalRequest, tt.detail, tt.fields, tt.original)
			}
		})
	}
}

// TestInFlightRetryAfter checks the Retry-After of the 409 for a key in
// flight: in two-phase mode what is left of the holder's lease, rounded up
// to a second and at most the lock timeout; 1 in atomic mode.
func TestInFlightRetryAfter(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 12, 7, 6, 0, 0, 0, time.UTC)
	tests := []struct {
		name    string
		mode    idem.Mode
		elapsed time.Duration // on the clock when the second request comes
		want    string
	}{
		{"TwoPhaseWholeSecondsLeft", idem.ModeTwoPhase, 20 * time.Second, "10"},
		{"TwoPhaseRoundsUp", idem.ModeTwoPhase, 20*time.Second + 500*time.Millisecond, "10"},
		{"TwoPhaseJustStarted", idem.ModeTwoPhase, 0, "30"},
		{"TwoPhaseHolderClockAhead", idem.ModeTwoPhase, -5 * time.Second, "30"},
		{"TwoPhaseLastInstant", idem.ModeTwoPhase, 30*time.Second - time.Millisecond, "1"},
		{"Atomic", idem.ModeAtomic, 20 * time.Second, "1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var mu sync.Mutex
			now := start
			mw, err := idem.New(idemtest.NewMemoryStore(), &idem.Config{
				ClientID:    func(*http.Request) (string, bool) { return "client-1", true },
				Logger:      quiet,
				Mode:        tt.mode,
				LockTimeout: 30 * time.Second,
				Now: func() time.Time {
					mu.Lock()
					defer mu.Unlock()
					return now
				},
			})
			if err != nil {
				t.Fatal(err)
			}
			entered, release := make(chan struct{}), make(chan struct{})
			h := mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				io.Copy(io.Discard, r.Body)
				if r.Header.Get("X-First") != "" {
					close(entered)
					<-release
				}
				w.WriteHeader(http.StatusCreated)
			}))
			serve := func(first bool) *httptest.ResponseRecorder {
				r := httptest.NewRequest(http.MethodPost, "/v1/payments", strings.NewReader(`{"amount":100}`))
				r.Header.Set("Content-Type", "application/json")
				r.Header.Set(idem.HeaderKey, `"k"`)
				if first {
					r.Header.Set("X-First", "1")
				}
				w := httptest.NewRecorder()
				h.ServeHTTP(w, r)
				return w
			}
			done := make(chan *httptest.ResponseRecorder, 1)
			go func() { done <- serve(true) }()
			select {
			case <-entered:
			case <-time.After(30 * time.Second):
				t.Fatal("the first request's handler did not start within 30 s")
			}
			mu.Lock()
			now = start.Add(tt.elapsed)
			mu.Unlock()
			second := serve(false)
			close(release)
			if second.Code != http.StatusConflict || second.Header().Get("Retry-After") != tt.want {
				t.Errorf("second request: %d Retry-After %q, want 409 Retry-After %s; body %s", second.Code, second.Header().Get("Retry-After"), tt.want, second.Body)
			}
			select {
			case first := <-done:
				if first.Code != http.StatusCreated {
					t.Errorf("first request: %d, want 201", first.Code)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("the first request did not finish within 30 s of its handler's release")
			}
		})
	}
}
