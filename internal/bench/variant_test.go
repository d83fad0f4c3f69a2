package bench

import (
	"net/http"
	"net/http/httptest"
	"runtime/pprof"
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
