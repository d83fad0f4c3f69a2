package idemwebhook_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/idemwebhook"
)

// A Stripe endpoint: each delivery is verified, and each event runs its
// handler once, however often Stripe delivers it. A database store
// (idempg, idemsqlite) would commit the handler's writes with the record
// of the event; the memory store keeps the record alone.
func Example_stripe() {
	const secret = "whsec_example0123456789abcdef" // from the Stripe dashboard
	verifier, err := idemwebhook.NewStripe([]string{secret}, nil)
	if err != nil {
		log.Fatal(err)
	}
	quiet := slog.New(slog.DiscardHandler)
	rc, err := idemwebhook.New(idemtest.NewMemoryStore(), &idemwebhook.Config{
		Endpoint: "stripe",
		Verifier: verifier,
		// Stripe retries for up to 3 days: keep event ids longer.
		Idem: &idem.Config{Retention: 96 * time.Hour, Logger: quiet},
	})
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("POST /webhooks/stripe", rc.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ev, _ := idemwebhook.EventFromContext(r.Context())
		fmt.Println("handling", ev.Type, "of", ev.Object)
		w.WriteHeader(http.StatusOK)
	})))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	body := `{"id":"evt_1","object":"event","created":1767225600,"type":"payment_intent.succeeded","pending_webhooks":1,"data":{"object":{"id":"pi_1","object":"payment_intent"}}}`
	deliver := func(body string) {
		// What Stripe sends: t and the HMAC-SHA256 of "t.body" in hex.
		t := strconv.FormatInt(time.Now().Unix(), 10)
		m := hmac.New(sha256.New, []byte(secret))
		m.Write([]byte(t + "." + body))
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/webhooks/stripe", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json; charset=utf-8")
		req.Header.Set("Stripe-Signature", "t="+t+",v1="+hex.EncodeToString(m.Sum(nil)))
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			log.Fatal(err)
		}
		res.Body.Close()
		fmt.Println(res.StatusCode, "replayed:", res.Header.Get(idem.HeaderReplayed) == "true")
	}
	deliver(body)
	deliver(strings.Replace(body, `"pending_webhooks":1`, `"pending_webhooks":2`, 1)) // a redelivery
	deliver(strings.Replace(body, "pi_1", "pi_2", 1))                                 // forged: the signature is valid, the secret leaked
	// Output:
	// handling payment_intent.succeeded of pi_1
	// 200 replayed: false
	// 200 replayed: true
	// 422 replayed: false
}
