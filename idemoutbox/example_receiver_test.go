package idemoutbox_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"

	"github.com/idemkit/idem/idemoutbox"
)

// A webhook receiver verifies each request's signature and timestamp, then
// deduplicates by webhook-id: delivery is at least once.
func Example_receiver() {
	secret := idemoutbox.NewSecret() // shared with the sender
	var mu sync.Mutex
	seen := map[string]bool{}

	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := idemoutbox.VerifyRequest(secret, r, nil) // 5 min tolerance
		if err != nil {
			http.Error(w, "invalid signature", http.StatusUnauthorized)
			return
		}
		var event struct {
			Type string          `json:"type"`
			Data json.RawMessage `json:"data"`
		}
		if err := json.Unmarshal(body, &event); err != nil {
			http.Error(w, "bad event", http.StatusBadRequest)
			return
		}
		mu.Lock()
		defer mu.Unlock()
		id := r.Header.Get(idemoutbox.HeaderID)
		if seen[id] {
			w.WriteHeader(http.StatusNoContent) // a redelivery: already handled
			return
		}
		seen[id] = true
		fmt.Println("received", event.Type, string(event.Data))
		w.WriteHeader(http.StatusNoContent)
	}))
	defer receiver.Close()

	wh, err := idemoutbox.NewWebhook(&idemoutbox.WebhookConfig{URL: receiver.URL, Secret: secret})
	if err != nil {
		panic(err)
	}
	e := idemoutbox.Event{ID: "evt_1", Type: "payment.succeeded", Payload: json.RawMessage(`{"id":"pay_1"}`)}
	for range 2 { // the second delivery is deduplicated
		if err := wh.Deliver(context.Background(), e); err != nil {
			panic(err)
		}
	}
	// Output: received payment.succeeded {"id":"pay_1"}
}
