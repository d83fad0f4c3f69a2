package idem_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/idemtest"
)

// A payment in three phases. Each phase's writes commit with the recovery
// point it returns, so a retry resumes at the last point and never runs a
// committed phase again. The charge times out the first time: the client
// gets 503 with Retry-After, and its retry with the same key resumes at
// "payment_created", charging under the same derived key, which lets the
// card processor do the charge once whether or not the first call got
// through.
func ExamplePhases() {
	var chargeKeys []string
	timeouts := 1 // the card processor's first answer is lost
	payment := idem.Phases{
		idemstore.RecoveryStarted: func(ctx context.Context, w http.ResponseWriter, st idem.State) (string, error) {
			fmt.Println("create payment")
			st["payment_id"] = "pay_1" // and insert it, in the store's transaction
			return "payment_created", nil
		},
		"payment_created": func(ctx context.Context, w http.ResponseWriter, st idem.State) (string, error) {
			chargeKeys = append(chargeKeys, idem.DeriveKey(ctx, "charge"))
			if timeouts > 0 {
				timeouts--
				fmt.Println("charge: timeout")
				return "", errors.New("card processor: timeout") // outcome unknown
			}
			fmt.Println("charge: ok")
			st["charge_id"] = "ch_1"
			return "charged", nil
		},
		"charged": func(ctx context.Context, w http.ResponseWriter, st idem.State) (string, error) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusCreated)
			fmt.Fprintf(w, `{"id":%q,"charge":%q}`, st["payment_id"], st["charge_id"])
			return idemstore.RecoveryFinished, nil
		},
	}

	mw, err := idem.New(idemtest.NewMemoryStore(), &idem.Config{
		ClientID: func(*http.Request) (string, bool) { return "alice", true },
		Mode:     idem.ModeTwoPhase, // phases need a lease that keeps recovery points
		Logger:   slog.New(slog.DiscardHandler),
	})
	if err != nil {
		panic(err)
	}
	h := mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		payment.Run(r.Context(), w) // on an error, Run has answered 503
	}))

	for range 2 {
		req := httptest.NewRequest(http.MethodPost, "/v1/payments", strings.NewReader(`{"amount":4200}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(idem.HeaderKey, `"order-7"`)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code == http.StatusServiceUnavailable {
			var p idem.Problem
			json.Unmarshal(w.Body.Bytes(), &p)
			fmt.Println(w.Code, p.Code, "Retry-After:", w.Header().Get("Retry-After"))
			continue
		}
		fmt.Println(w.Code, w.Body)
	}
	fmt.Println("same charge key:", chargeKeys[0] == chargeKeys[1])
	// Output:
	// create payment
	// charge: timeout
	// 503 operation-unfinished Retry-After: 1
	// charge: ok
	// 201 {"id":"pay_1","charge":"ch_1"}
	// same charge key: true
}
