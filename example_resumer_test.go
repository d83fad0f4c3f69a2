package idem_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/idemtest"
)

// A client whose payment stopped halfway went away. The Resumer, given
// the same store, operations and clock as the middleware, finishes the
// payment from its recovery point; when the client comes back with the
// key, it gets the stored answer. A service calls Run, which passes every
// Interval; this example calls RunOnce and moves the clock by hand.
func ExampleResumer() {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	clock := func() time.Time { return now }
	timeouts := 2 // the card processor is down for a while
	payment := idem.Phases{
		idemstore.RecoveryStarted: func(ctx context.Context, w http.ResponseWriter, st idem.State) (string, error) {
			st["payment_id"] = "pay_1"
			return "payment_created", nil
		},
		"payment_created": func(ctx context.Context, w http.ResponseWriter, st idem.State) (string, error) {
			if timeouts > 0 {
				timeouts--
				return "", errors.New("card processor: timeout")
			}
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusCreated)
			fmt.Fprintf(w, `{"id":%q,"charge":"ch_1"}`, st["payment_id"])
			return idemstore.RecoveryFinished, nil
		},
	}
	store := idemtest.NewMemoryStore()
	quiet := slog.New(slog.DiscardHandler)
	mw, err := idem.New(store, &idem.Config{
		ClientID: func(*http.Request) (string, bool) { return "alice", true },
		Mode:     idem.ModeTwoPhase, Logger: quiet, Now: clock,
	})
	if err != nil {
		panic(err)
	}
	h := mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		payment.Run(r.Context(), w)
	}))
	post := func() {
		req := httptest.NewRequest(http.MethodPost, "/v1/payments", strings.NewReader(`{"amount":4200}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(idem.HeaderKey, `"order-7"`)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code != http.StatusCreated {
			fmt.Println("client:", w.Code)
			return
		}
		fmt.Printf("client: %d replayed=%q %s\n", w.Code, w.Header().Get(idem.HeaderReplayed), w.Body)
	}

	resumer, err := idem.NewResumer(store, &idem.Config{ // method and path, as the middleware stores them
		Logger: quiet, Now: clock, Resume: idem.ResumeOpts{Operations: map[string]idem.Phases{"POST /v1/payments": payment}},
	})
	if err != nil {
		panic(err)
	}
	pass := func() {
		res, err := resumer.RunOnce(context.Background())
		fmt.Printf("pass: completed %d, failed %d, oldest unfinished %v, err %v\n", res.Completed, res.Failed, res.Oldest, err)
	}

	post() // the charge times out, and the client goes away
	now = now.Add(idem.ResumeIntervalDefault)
	pass() // the card processor is still down
	now = now.Add(idem.ResumeIntervalDefault)
	pass()
	post() // the client comes back
	// Output:
	// client: 503
	// pass: completed 0, failed 1, oldest unfinished 10s, err <nil>
	// pass: completed 1, failed 0, oldest unfinished 0s, err <nil>
	// client: 201 replayed="true" {"id":"pay_1","charge":"ch_1"}
}
