package idem_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/idemtest"
)

// TestRecordWithoutFingerprintIsReplayed pins the rule for a key stored
// without a request fingerprint, which idem never writes but other code
// may (keys imported from an earlier system): nothing can be compared but
// the key, so the key alone stands for the request, and a completed key's
// response is replayed, never a 422, never a second run. A completed key
// with a fingerprint is replayed only to the same request.
func TestRecordWithoutFingerprintIsReplayed(t *testing.T) {
	t.Parallel()
	store := idemtest.NewMemoryStore()
	ctx := context.Background()
	for key, hash := range map[string][]byte{"imported": nil, "fingerprinted": []byte("another request's hash")} {
		res, err := store.Claim(ctx, idemstore.ClaimParams{
			Scope:  idemstore.Scope{ClientID: "client-1", Key: key},
			Method: http.MethodPost, Path: "/v1/payments", RequestHash: hash,
			Now: time.Now(), LockTimeout: time.Minute, Retention: 24 * time.Hour,
		})
		if err != nil || res.Lease == nil {
			t.Fatalf("Claim(%s) = %+v, %v", key, res, err)
		}
		if err := res.Lease.Complete(ctx, &idemstore.Response{StatusCode: http.StatusCreated, Body: []byte(`{"id":"pay_imported"}`)}); err != nil {
			t.Fatalf("Complete(%s): %v", key, err)
		}
	}
	mw, err := idem.New(store, &idem.Config{
		ClientID: func(*http.Request) (string, bool) { return "client-1", true },
		Logger:   quiet,
	})
	if err != nil {
		t.Fatal(err)
	}
	runs := 0
	h := mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs++
		w.WriteHeader(http.StatusCreated)
	}))
	post := func(key string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodPost, "/v1/payments", strings.NewReader(`{"amount":100}`))
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set(idem.HeaderKey, key)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	if w := post("imported"); w.Code != http.StatusCreated || w.Header().Get(idem.HeaderReplayed) != "true" || w.Body.String() != `{"id":"pay_imported"}` {
		t.Errorf("key stored without a fingerprint: %d %s (replayed %q); want its stored 201, replayed", w.Code, w.Body, w.Header().Get(idem.HeaderReplayed))
	}
	if w := post("fingerprinted"); w.Code != http.StatusUnprocessableEntity {
		t.Errorf("key stored with another request's fingerprint: %d %s; want 422", w.Code, w.Body)
	}
	if runs != 0 {
		t.Errorf("the handler ran %d times; want never", runs)
	}
}
