package idemtest_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/idemtest"
)

// A handler's test puts the middleware on a MemoryStore and inspects what
// it stored.
func ExampleMemoryStore() {
	store := idemtest.NewMemoryStore()
	mw, err := idem.New(store, &idem.Config{
		ClientID: func(r *http.Request) (string, bool) { return "alice", true },
	})
	if err != nil {
		panic(err)
	}
	handler := mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
		fmt.Fprint(w, `{"id":"pay_1"}`)
	}))

	req := httptest.NewRequest(http.MethodPost, "/v1/payments", strings.NewReader(`{"amount":4200}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(idem.HeaderKey, "order-7")
	rec := httptest.NewRecorder()
	handler.ServeHTTP(rec, req)

	stored, ok := store.Get(idemstore.Scope{ClientID: "alice", Key: "order-7"})
	fmt.Println(rec.Code, ok, stored.Status, stored.Response.StatusCode, string(stored.Response.Body))
	fmt.Println("keys:", store.Len())
	// Output:
	// 201 true completed 201 {"id":"pay_1"}
	// keys: 1
}

// A store of one's own runs the conformance suite from its tests. Harness
// says how to make a fresh store and, for a transactional store, how to
// write and count business rows through a lease's transaction.
func ExampleRunStoreTests() {
	testMemoryStore := func(t *testing.T) {
		idemtest.RunStoreTests(t, idemtest.Harness{
			NewStore: func(t *testing.T) idemstore.Store { return idemtest.NewMemoryStore() },
			// Write and Count are nil: the memory store has no transactions,
			// and the suite skips the atomicity tests.
			Write: nil,
			Count: nil,
		})
	}
	_ = testMemoryStore
}
