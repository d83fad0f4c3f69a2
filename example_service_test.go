package idem_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemtest"
)

// The shortest complete service: one Config, and from it the middleware,
// the purger, the resumer and the key-status handler. A real service
// uses idempg or idemsqlite where this uses the memory store.
func Example_service() {
	store := idemtest.NewMemoryStore()
	cfg := &idem.Config{
		ClientID:  func(r *http.Request) (string, bool) { return r.Header.Get("X-Client"), true },
		Mode:      idem.ModeTwoPhase,
		Retention: 24 * time.Hour, // declared once: the purger deletes nothing younger
		Resume:    idem.ResumeOpts{Operations: map[string]idem.Phases{"POST /v1/payments": {}}},
	}
	mw, err := idem.New(store, cfg)
	if err != nil {
		panic(err)
	}
	purger, err := idem.NewPurger(store, cfg)
	if err != nil {
		panic(err)
	}
	resumer, err := idem.NewResumer(store, cfg)
	if err != nil {
		panic(err)
	}
	status, err := idem.NewStatusHandler(store, cfg)
	if err != nil {
		panic(err)
	}
	mux := http.NewServeMux()
	mux.Handle("POST /v1/payments", mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, `{"id":"pay_1"}`)
	})))
	mux.Handle("GET /v1/idempotency-keys/{key}", status)
	srv := httptest.NewServer(mux)
	defer srv.Close()
	ctx, stop := context.WithCancel(context.Background())
	go purger.Run(ctx)
	go resumer.Run(ctx)
	defer stop()

	for range 2 {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/payments", strings.NewReader(`{"amount":100}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", "k1")
		req.Header.Set("X-Client", "alice")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			panic(err)
		}
		res.Body.Close()
		fmt.Println(res.StatusCode, "replayed:", res.Header.Get("Idempotent-Replayed") == "true")
	}
	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/v1/idempotency-keys/k1", nil)
	req.Header.Set("X-Client", "alice")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		panic(err)
	}
	res.Body.Close()
	fmt.Println("status handler:", res.StatusCode)
	// Output:
	// 201 replayed: false
	// 201 replayed: true
	// status handler: 200
}
