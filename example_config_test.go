package idem_test

import (
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemtest"
)

// Every field of Config, with its default spelled out. Only ClientID is
// required; a nil field or zero value takes the default.
func ExampleConfig() {
	cfg := &idem.Config{
		ClientID: func(r *http.Request) (string, bool) {
			return r.Header.Get("X-Client"), r.Header.Get("X-Client") != ""
		},
		Require:            idem.RequireNonIdempotent, // or idem.RequireNone
		Mode:               idem.ModeAtomic,           // or idem.ModeTwoPhase
		LockTimeout:        idem.LockTimeoutDefault,
		Retention:          idem.RetentionDefault,
		MaxBodyBytes:       idem.MaxBodyBytesDefault,
		ExcludeFields:      []string{"/client_timestamp"},
		ReplayHeaders:      []string{"X-Request-Id"},
		Outcome:            idem.DefaultOutcomePolicy, // or idem.StoreServerErrorsPolicy
		MaxConflictRetries: idem.MaxConflictRetriesDefault,
		StoreTimeout:       idem.StoreTimeoutDefault,
		ProblemTypeBase:    idem.ProblemTypeBaseDefault,
		Logger:             slog.Default(),
		Metrics:            nil, // see package idemprom
		Now:                time.Now,
	}
	var mw *idem.Middleware
	mw, err := idem.New(idemtest.NewMemoryStore(), cfg)
	fmt.Println(mw != nil, err)

	cfg.MaxConflictRetries = idem.NoConflictRetries // a conflict answers 503 instead of a rerun
	_, err = idem.New(idemtest.NewMemoryStore(), cfg)
	fmt.Println(err)

	cfg.Retention = time.Second
	_, err = idem.New(idemtest.NewMemoryStore(), cfg)
	fmt.Println(err)
	// Output:
	// true <nil>
	// <nil>
	// idem: Config.Retention (1s) must be longer than Config.LockTimeout (30s), or the purge could delete keys in flight
}

// A policy of one's own: store 409 Conflict answers of the business (they
// are results), release the statuses that say the request was not
// processed, and store everything else as the default policy does.
func ExampleOutcomePolicy() {
	var policy idem.OutcomePolicy = func(status int) idem.Outcome {
		if idem.NotProcessed(status) {
			return idem.OutcomeRelease
		}
		return idem.DefaultOutcomePolicy(status)
	}
	for _, status := range []int{201, 409, 422, 429, 500} {
		fmt.Println(status, policy(status) == idem.OutcomeStore, idem.StoreServerErrorsPolicy(status) == idem.OutcomeStore)
	}
	// Output:
	// 201 true true
	// 409 true true
	// 422 true true
	// 429 false false
	// 500 false true
}

// A route may need a key, or merely honour one.
func ExampleRequirePolicy() {
	post, _ := http.NewRequest(http.MethodPost, "/v1/payments", nil)
	var require idem.RequirePolicy = idem.RequireNonIdempotent
	fmt.Println(require(post), idem.RequireNone(post))
	// Output: true false
}
