package bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime/pprof"
	"slices"
	"strings"
	"testing"
)

// TestLabeledCarriesVariant checks that a variant's handler runs under the
// profiler label that splits a CPU profile of the run by variant.
func TestLabeledCarriesVariant(t *testing.T) {
	var got string
	var ok bool
	h := labeled(Atomic, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, ok = pprof.Label(r.Context(), "variant")
		w.WriteHeader(http.StatusNoContent)
	}))
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/v1/payments", nil))
	if !ok || got != Atomic {
		t.Fatalf("label variant = %q (set %t), want %q", got, ok, Atomic)
	}
	if w.Code != http.StatusNoContent {
		t.Fatalf("status %d, want the handler's 204", w.Code)
	}
}

// TestFailedAnswersAreReported: a request that gets another status than
// its variant expects is counted, and what the first one got (the status
// and the start of the body) reaches the table and the JSON report, so
// that a run whose requests fail says why.
func TestFailedAnswersAreReported(t *testing.T) {
	problem := `{"type":"about:blank","title":"Service Unavailable",
"detail":"the idempotency store is unavailable"}`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(http.StatusServiceUnavailable)
		io.WriteString(w, problem)
	}))
	defer srv.Close()
	cfg := Config{Requests: 3, Concurrency: 1}
	n := 0
	got := measure(context.Background(), srv.Client(), srv.URL, cfg, func() string { n++; return fmt.Sprint("k", n) }, http.StatusCreated)
	want := `503 {"type":"about:blank","title":"Service Unavailable", "detail":"the idempotency store is unavailable"}`
	if got.n != 3 || got.errors != 3 || got.firstError != want {
		t.Fatalf("tally: %d requests, %d errors, first %q; want 3, 3 and %q", got.n, got.errors, got.firstError, want)
	}

	results := []Result{{Variant: Bare, Requests: 3, Errors: 3, FirstError: got.firstError, Ratio: 1}}
	var table bytes.Buffer
	WriteTable(&table, results)
	if line := "bare: 3 errors; the first got: " + want; !strings.Contains(table.String(), line) {
		t.Errorf("table:\n%s\nwant a line %q", table.String(), line)
	}
	if rep := NewReport(results); rep.Variants[Bare].FirstError != want {
		t.Errorf("report first_error = %q, want %q", rep.Variants[Bare].FirstError, want)
	}
}

// TestTableColumnsLineUp: a long variant name widens the name column
// instead of pushing its row's figures out of their columns.
func TestTableColumnsLineUp(t *testing.T) {
	results := []Result{
		{Variant: Bare, Requests: 100, PerSecond: 3000, Ratio: 1, RatioTx: 1.2},
		{Variant: Floor2RTRead, Requests: 100, PerSecond: 2000, Ratio: 0.67, RatioTx: 0.8},
		{Variant: AtomicPgBouncer, Requests: 100, PerSecond: 1000, Ratio: 0.33, RatioTx: 0.4},
	}
	var table bytes.Buffer
	WriteTable(&table, results)
	lines := strings.Split(strings.TrimSuffix(table.String(), "\n"), "\n")
	if len(lines) != 1+len(results) {
		t.Fatalf("table:\n%s\nwant a header and %d rows", table.String(), len(results))
	}
	for _, line := range lines[1:] {
		if len(line) != len(lines[0]) {
			t.Errorf("table:\n%s\nrow %q is %d characters wide, the header %d", table.String(), line, len(line), len(lines[0]))
		}
	}
}

// TestRoundOrder holds the rounds' orders to their promise: with three
// variants, each two rounds run each variant right after each other one
// exactly once, counting the step from one round into the next.
func TestRoundOrder(t *testing.T) {
	vs := []string{Bare, Atomic, Floor2RTRead}
	var seq []string
	for round := 1; round <= 4; round++ {
		seq = append(seq, roundOrder(vs, round)...)
	}
	after := map[[2]string]int{}
	for i := 1; i < len(seq); i++ {
		after[[2]string{seq[i-1], seq[i]}]++
	}
	// Twelve runs make eleven steps: the first variant of round 1 has no
	// predecessor, so one pair (the last of round 4 before the first of
	// round 1, which a fifth round would add) is counted once.
	for _, a := range vs {
		for _, b := range vs {
			if a == b {
				if n := after[[2]string{a, b}]; n != 0 {
					t.Errorf("%s ran right after itself %d times", a, n)
				}
				continue
			}
			want := 2
			if a == seq[len(seq)-1] && b == seq[0] {
				want = 1
			}
			if n := after[[2]string{a, b}]; n != want {
				t.Errorf("%s ran right after %s %d times, want %d (order %v)", b, a, n, want, seq)
			}
		}
	}
	if got := roundOrder(vs, 1); !slices.Equal(got, vs) {
		t.Errorf("round 1 ran %v, want the order given %v", got, vs)
	}
	if got, want := roundOrder(vs, 2), []string{Bare, Floor2RTRead, Atomic}; !slices.Equal(got, want) {
		t.Errorf("round 2 ran %v, want %v", got, want)
	}
	two := []string{Atomic, Replay}
	if got := roundOrder(two, 2); !slices.Equal(got, two) {
		t.Errorf("two variants in round 2 ran %v, want %v", got, two)
	}
}
