package idemstore_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/idemtest"
)

// A store decides with CanTakeOver whether a claim takes over the key it
// found: only a two-phase lease past the lock timeout, claimed again by the
// same request.
func ExampleClaimParams_CanTakeOver() {
	locked := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	rec := &idemstore.Record{Status: idemstore.StatusInFlight, LockedAt: locked, RequestHash: []byte("fp")}
	p := idemstore.ClaimParams{
		TwoPhase: true, RequestHash: []byte("fp"),
		Now: locked.Add(10 * time.Second), LockTimeout: 30 * time.Second,
	}
	fmt.Println("within the lock timeout:", p.CanTakeOver(rec))
	p.Now = locked.Add(30 * time.Second)
	fmt.Println("at the lock timeout:", p.CanTakeOver(rec))
	p.RequestHash = []byte("another request")
	fmt.Println("another request:", p.CanTakeOver(rec))
	// Output:
	// within the lock timeout: false
	// at the lock timeout: true
	// another request: false
}

// Once a lease is completed or released, every store answers a second
// Complete or Release with an error wrapping ErrLeaseEnded.
func ExampleErrLeaseEnded() {
	store := idemtest.NewMemoryStore()
	ctx := context.Background()
	res, _ := store.Claim(ctx, idemstore.ClaimParams{
		Scope: idemstore.Scope{ClientID: "alice", Key: "order-7"}, Method: "POST", Path: "/v1/payments",
		RequestHash: []byte("fp"), Now: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
		LockTimeout: idem.LockTimeoutDefault, Retention: idem.RetentionDefault,
	})
	fmt.Println("complete:", res.Lease.Complete(ctx, &idemstore.Response{StatusCode: http.StatusCreated}))
	err := res.Lease.Release(ctx)
	fmt.Println("release after complete:", errors.Is(err, idemstore.ErrLeaseEnded))
	// Output:
	// complete: <nil>
	// release after complete: true
}

// Every store's Purge checks its parameters with Validate, then fills in
// the default batch size with WithDefaults.
func ExamplePurgeParams() {
	retention := 24 * time.Hour
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	p := idemstore.PurgeParams{Before: now.Add(-retention)}
	fmt.Println(p.Validate(), p.WithDefaults().BatchSize == idemstore.PurgeBatchSizeDefault)
	fmt.Println(idemstore.PurgeParams{Before: p.Before, BatchSize: -1}.Validate())

	store := idemtest.NewMemoryStore()
	n, err := store.Purge(context.Background(), p)
	fmt.Println(n, err)
	// Output:
	// <nil> true
	// idem: PurgeParams.BatchSize must not be negative
	// 0 <nil>
}
