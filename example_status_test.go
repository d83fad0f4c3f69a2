package idem_test

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemtest"
)

// A client that lost the answer to a payment asks what became of its key,
// without sending the payment again. The key-status handler shares the
// middleware's store, client identity, retention and clock, and answers
// only about the calling client's keys: another client's key reads as
// unknown.
func ExampleNewStatusHandler() {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	clock := func() time.Time { return now }
	client := func(r *http.Request) (string, bool) {
		return r.Header.Get("X-Client"), r.Header.Get("X-Client") != ""
	}
	store := idemtest.NewMemoryStore()
	quiet := slog.New(slog.DiscardHandler)
	mw, err := idem.New(store, &idem.Config{ClientID: client, Logger: quiet, Now: clock})
	if err != nil {
		panic(err)
	}
	status, err := idem.NewStatusHandler(store, &idem.Config{ClientID: client, Logger: quiet, Now: clock})
	if err != nil {
		panic(err)
	}
	mux := http.NewServeMux()
	mux.Handle("POST /v1/payments", mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Location", "/v1/payments/pay_1")
		w.WriteHeader(http.StatusCreated)
	})))
	mux.Handle("GET /v1/idempotency-keys/{key}", status)

	pay := httptest.NewRequest(http.MethodPost, "/v1/payments", strings.NewReader(`{"amount":4200}`))
	pay.Header.Set("X-Client", "alice")
	pay.Header.Set("Content-Type", "application/json")
	pay.Header.Set(idem.HeaderKey, `"order-7"`)
	mux.ServeHTTP(httptest.NewRecorder(), pay) // the answer is lost on the way

	now = now.Add(time.Minute)
	ask := func(who, key string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodGet, "/v1/idempotency-keys/"+key, nil)
		req.Header.Set("X-Client", who)
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, req)
		return w
	}
	w := ask("alice", "order-7")
	fmt.Print(w.Code, " ", w.Body)
	for _, q := range [][2]string{{"bob", "order-7"}, {"alice", "order-8"}} {
		w := ask(q[0], q[1])
		var p idem.Problem
		json.Unmarshal(w.Body.Bytes(), &p)
		fmt.Println(w.Code, q[0], q[1], p.Code)
	}
	// Output:
	// 200 {"key":"order-7","state":"completed","method":"POST","path":"/v1/payments","created":"2026-01-02T03:04:05Z","expires":"2026-01-03T03:04:05Z","response_status":201,"link":"/v1/payments/pay_1"}
	// 404 bob order-7 idempotency-key-not-found
	// 404 alice order-8 idempotency-key-not-found
}
