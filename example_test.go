package idem_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/idemtest"
)

// A POST handler behind the middleware runs once per key; retries get the
// stored response, and a reused key with another body gets 422.
func Example() {
	var charges atomic.Int64
	charge := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := charges.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"id":"ch_%d"}`, n)
	})
	mw, err := idem.New(idemtest.NewMemoryStore(), &idem.Config{
		ClientID: func(r *http.Request) (string, bool) {
			return r.Header.Get("Authorization"), r.Header.Get("Authorization") != ""
		},
	})
	if err != nil {
		panic(err)
	}
	srv := httptest.NewServer(mw.Wrap(charge))
	defer srv.Close()

	send := func(body string) {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/charges", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer sk_test_alice")
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(idem.HeaderKey, `"order-7-charge"`)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			panic(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		fmt.Printf("%d replayed=%q %s\n", res.StatusCode, res.Header.Get(idem.HeaderReplayed), strings.TrimSpace(string(b)))
	}
	send(`{"amount":4200,"currency":"usd"}`)
	send(`{"currency":"usd","amount":4200}`)
	send(`{"amount":9900,"currency":"usd"}`)
	fmt.Println("charges:", charges.Load())
	// Output:
	// 201 replayed="" {"id":"ch_1"}
	// 201 replayed="true" {"id":"ch_1"}
	// 422 replayed="" {"type":"/problems/idempotency-key-reused","title":"Idempotency-Key is already used","status":422,"detail":"This key was first used with a different request: /amount differs.","code":"idempotency-key-reused","fields":["/amount"]}
	// charges: 1
}

// DeriveKey gives the key to send to another system: stable across retries,
// different per purpose, not revealing the client's key, and itself a valid
// key. A handler's context carries the scope; a test of the handler builds
// one with ContextWithScope.
func ExampleDeriveKey() {
	ctx := idem.ContextWithScope(context.Background(), idemstore.Scope{ClientID: "alice", Key: "order-7"})
	scope, ok := idem.ScopeFromContext(ctx)
	fmt.Println(scope.ClientID, scope.Key, ok)
	charge := idem.DeriveKey(ctx, "charge")
	fmt.Println(charge == idem.DeriveKey(ctx, "charge"), charge == idem.DeriveKey(ctx, "refund"), strings.Contains(charge, "order-7"), len(charge) <= idem.MaxKeyLength)
	// Output:
	// alice order-7 true
	// true false false true
}
