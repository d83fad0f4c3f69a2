package idemsqlite_test

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemoutbox"
	"github.com/idemkit/idem/idemsqlite"
)

// A handler enqueues an event in its request's transaction; a relay
// delivers it afterwards as a signed webhook. The retry of the request
// replays the response and enqueues nothing more.
func Example_outbox() {
	dir, err := os.MkdirTemp("", "idemsqlite-outbox")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	ctx := context.Background()
	quiet := slog.New(slog.DiscardHandler)
	store, err := idemsqlite.Open(filepath.Join(dir, "app.db"), &idemsqlite.Config{Logger: quiet})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	if err := store.Migrate(ctx); err != nil {
		log.Fatal(err)
	}

	mw, err := idem.New(store, &idem.Config{
		ClientID: func(r *http.Request) (string, bool) { return "alice", true },
		Logger:   quiet,
	})
	if err != nil {
		log.Fatal(err)
	}
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// ... business writes through idemsqlite.TxFromContext ...
		_, err := idemoutbox.Enqueue(r.Context(), store, idemoutbox.EventParams{
			Purpose: "created", Type: "order.created", Payload: []byte(`{"order":7}`),
		})
		if err != nil {
			http.Error(w, "failed", http.StatusInternalServerError) // rolls back
			return
		}
		w.WriteHeader(http.StatusCreated)
	})
	api := httptest.NewServer(mw.Wrap(handler))
	defer api.Close()
	for range 2 {
		req, _ := http.NewRequest(http.MethodPost, api.URL+"/v1/orders", strings.NewReader(`{}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(idem.HeaderKey, `"order-7"`)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			log.Fatal(err)
		}
		res.Body.Close()
		fmt.Println("POST:", res.StatusCode, "replayed:", res.Header.Get(idem.HeaderReplayed) == "true")
	}

	secret := idemoutbox.NewSecret()
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := idemoutbox.VerifyRequest(secret, r, nil)
		fmt.Println("received:", err == nil, strings.Contains(string(body), `"data":{"order":7}`))
		w.WriteHeader(http.StatusNoContent)
	}))
	defer receiver.Close()
	wh, err := idemoutbox.NewWebhook(&idemoutbox.WebhookConfig{URL: receiver.URL, Secret: secret})
	if err != nil {
		log.Fatal(err)
	}
	relay, err := idemoutbox.NewRelay(store, wh, &idemoutbox.RelayConfig{Logger: quiet})
	if err != nil {
		log.Fatal(err)
	}
	n, err := relay.DeliverOnce(ctx) // relay.Run(ctx) loops over this
	fmt.Println("delivered:", n, err)
	// Output:
	// POST: 201 replayed: false
	// POST: 201 replayed: true
	// received: true true
	// delivered: 1 <nil>
}
