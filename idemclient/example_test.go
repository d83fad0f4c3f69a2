package idemclient_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"sync"
	"time"

	"github.com/idemkit/idem/idemclient"
)

// The server executes the first attempt but the connection drops before the
// answer arrives. The client retries with the same key and body, and the
// server replays the stored response instead of charging twice.
func Example() {
	var (
		mu         sync.Mutex
		executions int
		stored     = map[string]string{} // idempotency key -> stored response
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.ReadAll(r.Body)
		key := r.Header.Get(idemclient.HeaderKey)
		mu.Lock()
		defer mu.Unlock()
		if resp, ok := stored[key]; ok {
			w.Header().Set(idemclient.HeaderReplayed, "true")
			w.WriteHeader(http.StatusCreated)
			io.WriteString(w, resp)
			return
		}
		executions++
		stored[key] = `{"id":"pay_1","amount":100}`
		conn, _, _ := w.(http.Hijacker).Hijack() // the answer is lost
		conn.Close()
	}))
	defer srv.Close()

	client, err := idemclient.New(&idemclient.Config{BaseDelay: time.Millisecond, MaxDelay: 10 * time.Millisecond})
	if err != nil {
		log.Fatal(err)
	}
	resp, err := client.Post(context.Background(), srv.URL+"/v1/payments", "application/json",
		[]byte(`{"amount":100,"currency":"usd","customer":"cus_1"}`))
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)

	fmt.Println("status:", resp.Status)
	fmt.Println("attempts:", idemclient.Attempts(resp))
	fmt.Println("replayed:", idemclient.Replayed(resp))
	fmt.Println("executions:", executions)
	fmt.Println("body:", string(body))
	// Output:
	// status: 201 Created
	// attempts: 2
	// replayed: true
	// executions: 1
	// body: {"id":"pay_1","amount":100}
}

// A plain http.Client gets the same behaviour from Client.Transport. A 422
// comes back as a response; CheckResponse turns it into a *KeyReusedError.
func ExampleCheckResponse() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(http.StatusUnprocessableEntity)
		io.WriteString(w, `{"title":"Idempotency-Key is already used","detail":"amount differs from the first request"}`)
	}))
	defer srv.Close()

	client, err := idemclient.New(nil)
	if err != nil {
		log.Fatal(err)
	}
	hc := &http.Client{Transport: client.Transport()}
	ctx := idemclient.WithKey(context.Background(), "order-42")
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, nil)
	resp, err := hc.Do(req)
	if err != nil {
		log.Fatal(err)
	}
	err = idemclient.CheckResponse(resp)
	fmt.Println(err)
	fmt.Println("attempts:", idemclient.Attempts(resp))
	// Output:
	// idemclient: idempotency key reused with a different request (status 422): amount differs from the first request
	// attempts: 1
}
