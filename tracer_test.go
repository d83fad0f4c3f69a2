package idem_test

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/internal/reqlog"
)

func TestOriginalTraceID(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ tc, want string }{
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "4bf92f3577b34da6a3ce929d0e0e4736"},
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00", "4bf92f3577b34da6a3ce929d0e0e4736"},
		{"", ""},
		{"00-00000000000000000000000000000000-00f067aa0ba902b7-01", ""}, // the invalid all-zero id
		{"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", ""}, // upper case is not a traceparent
		{"00-4bf92f3577b34da6a3ce929d0e0e473-600f067aa0ba902b7-01", ""},
		{"00-4bf92f3577b34da6a3ce929d0e0e4736", ""},
		{"00-4bf92f3577b34da6a3ce929d0e0e47<6-00f067aa0ba902b7-01", ""},
	} {
		if got := idem.OriginalTraceID(tt.tc); got != tt.want {
			t.Errorf("OriginalTraceID(%q) = %q, want %q", tt.tc, got, tt.want)
		}
	}
}

// spanRecorder is a Tracer that keeps every span it starts and how each
// ended, in the order they started. Its TraceContext is traceContext.
type spanRecorder struct {
	mu           sync.Mutex
	spans        []*keptSpan
	traceContext string
}

type keptSpan struct {
	rec   *spanRecorder
	start idem.SpanStart
	ends  []idem.SpanEnd
}

func (r *spanRecorder) Start(ctx context.Context, s idem.SpanStart) (context.Context, idem.Span) {
	r.mu.Lock()
	defer r.mu.Unlock()
	span := &keptSpan{rec: r, start: s}
	r.spans = append(r.spans, span)
	return ctx, span
}

func (r *spanRecorder) TraceContext(context.Context) string { return r.traceContext }

func (s *keptSpan) End(e idem.SpanEnd) {
	s.rec.mu.Lock()
	defer s.rec.mu.Unlock()
	s.ends = append(s.ends, e)
}

// take returns the spans recorded since the last call.
func (r *spanRecorder) take() []*keptSpan {
	r.mu.Lock()
	defer r.mu.Unlock()
	spans := r.spans
	r.spans = nil
	return spans
}

// check reports every span not ended exactly once, and returns the spans'
// steps and attempts, as "idem.run/1", and their ends.
func (r *spanRecorder) check(t *testing.T) (steps []string, ends []idem.SpanEnd) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range r.spans {
		step := fmt.Sprintf("%s/%d", s.start.Step, s.start.Attempt)
		if len(s.ends) != 1 {
			t.Errorf("span %s ended %d times, want once", step, len(s.ends))
			s.ends = append(s.ends, idem.SpanEnd{})
		}
		steps, ends = append(steps, step), append(ends, s.ends[0])
	}
	return steps, ends
}

// TestRequestResultIsNoted checks what a request came to, as its span and
// its request log line say: the final result, never a rerun after a
// transaction conflict, which is counted in addition; and that each span
// ends once, the claim's with the token of the lease it obtained.
func TestRequestResultIsNoted(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		traced    bool
		conflict  bool // every run's transaction reports a conflict
		steps     string
		wantCount map[idem.Result]int
	}{
		{"Executed", true, false, "idem.request/0 idem.claim/0 idem.run/0 idem.complete/0",
			map[idem.Result]int{idem.ResultExecuted: 1}},
		{"Rerun", true, true, "idem.request/0 idem.claim/0 idem.run/0 idem.release/0 idem.claim/0 idem.run/1 idem.complete/1",
			map[idem.Result]int{idem.ResultExecuted: 1, idem.ResultConflictRerun: 1}},
		{"NotTraced", false, false, "", map[idem.Result]int{idem.ResultExecuted: 1}},
		{"RerunNotTraced", false, true, "", map[idem.Result]int{idem.ResultExecuted: 1, idem.ResultConflictRerun: 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			store := &faultyStore{inner: idemtest.NewMemoryStore(), conflict: tt.conflict}
			metrics := &countingMetrics{counts: map[idem.Result]int{}}
			tracer := &spanRecorder{}
			cfg := &idem.Config{
				ClientID:           func(*http.Request) (string, bool) { return "client-1", true },
				Logger:             quiet,
				Metrics:            metrics,
				MaxConflictRetries: 1,
			}
			if tt.traced {
				cfg.Tracer = tracer
			}
			mw, err := idem.New(store, cfg)
			if err != nil {
				t.Fatal(err)
			}
			// A third run (there are at most two) ends the request's
			// context, which ends the middleware's reruns: the test then
			// fails instead of hanging.
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			runs := 0
			h := mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if runs++; runs > 2 {
					cancel()
				}
				w.WriteHeader(http.StatusCreated)
			}))
			info := &reqlog.Info{}
			r := httptest.NewRequestWithContext(reqlog.NewContext(ctx, info), http.MethodPost, "/v1/payments", strings.NewReader(`{"amount":1}`))
			r.Header.Set("Content-Type", "application/json")
			r.Header.Set(idem.HeaderKey, `"k"`)
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if w.Code != http.StatusCreated || runs > 2 {
				t.Fatalf("status %d after %d runs, want 201 after at most 2", w.Code, runs)
			}
			if client, digest, result := info.Notes(); client != "client-1" || digest == "" || result != string(idem.ResultExecuted) {
				t.Errorf("log line notes client %q, key digest %q, result %q; want client-1, a digest, executed", client, digest, result)
			}
			metrics.mu.Lock()
			if !maps.Equal(metrics.counts, tt.wantCount) {
				t.Errorf("metrics counted %v, want %v", metrics.counts, tt.wantCount)
			}
			metrics.mu.Unlock()
			steps, ends := tracer.check(t)
			if got := strings.Join(steps, " "); got != tt.steps {
				t.Fatalf("spans %q, want %q", got, tt.steps)
			}
			if !tt.traced {
				return
			}
			if ends[0].Result != idem.ResultExecuted {
				t.Errorf("the request's span ended with result %q, want executed", ends[0].Result)
			}
			_, digest, _ := info.Notes()
			for i, span := range tracer.spans {
				if span.start.KeyDigest != digest {
					t.Errorf("span %s has key digest %q, want the log line's %q", steps[i], span.start.KeyDigest, digest)
				}
			}
			for i, step := range steps {
				if strings.HasPrefix(step, "idem.claim/") && (ends[i].Token == 0 || ends[i].Token != tracer.spans[i+1].start.Token) {
					t.Errorf("claim span %d ended with token %d, the run after it holds %d", i, ends[i].Token, tracer.spans[i+1].start.Token)
				}
			}
		})
	}
}

// TestTraceContextStoredWithKey checks that the request's trace context is
// stored with its key when it is at most 512 bytes long, and not when it
// is longer: the replay's span links to it, or to nothing.
func TestTraceContextStoredWithKey(t *testing.T) {
	t.Parallel()
	for _, n := range []int{55, 512, 513} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			t.Parallel()
			tracer := &spanRecorder{traceContext: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}
			tracer.traceContext += strings.Repeat("x", n-len(tracer.traceContext))
			mw, err := idem.New(idemtest.NewMemoryStore(), &idem.Config{
				ClientID: func(*http.Request) (string, bool) { return "client-1", true },
				Logger:   quiet,
				Tracer:   tracer,
			})
			if err != nil {
				t.Fatal(err)
			}
			h := mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(http.StatusCreated)
			}))
			for range 2 {
				r := httptest.NewRequest(http.MethodPost, "/v1/payments", strings.NewReader(`{"amount":1}`))
				r.Header.Set("Content-Type", "application/json")
				r.Header.Set(idem.HeaderKey, `"k"`)
				h.ServeHTTP(httptest.NewRecorder(), r)
			}
			want := tracer.traceContext
			if n > 512 {
				want = ""
			}
			steps, _ := tracer.check(t)
			var links []string
			for i, step := range steps {
				if strings.HasPrefix(step, string(idem.StepReplay)+"/") {
					links = append(links, tracer.spans[i].start.Link)
				}
			}
			if len(links) != 1 || links[0] != want {
				var lengths []int
				for _, l := range links {
					lengths = append(lengths, len(l))
				}
				t.Errorf("replay spans linked to trace contexts of %v bytes, want one of %d bytes, the request's, or none", lengths, len(want))
			}
		})
	}
}
