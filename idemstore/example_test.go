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

// A store's view of one key, as the middleware drives it: the first claim
// gets a Lease, and every later claim gets the Record. Any Store must give
// these answers; idemtest.RunStoreTests checks them.
func ExampleStore() {
	var store idemstore.Store = idemtest.NewMemoryStore()
	ctx := context.Background()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	p := idemstore.ClaimParams{
		Scope:  idemstore.Scope{ClientID: "alice", Key: "order-7"},
		Method: "POST", Path: "/v1/payments",
		RequestHash: []byte("the request's fingerprint"),
		Now:         now,
		LockTimeout: idem.LockTimeoutDefault, Retention: idem.RetentionDefault,
	}

	first, err := store.Claim(ctx, p)
	if err != nil {
		fmt.Println(err)
		return
	}
	var lease idemstore.Lease = first.Lease
	var info idemstore.LeaseInfo = lease.Info()
	fmt.Println("first claim: token", info.Token, "taken over", info.TakenOver)

	dup, _ := store.Claim(ctx, p)
	var status idemstore.Status = dup.Record.Status
	fmt.Println("duplicate while it runs:", status == idemstore.StatusInFlight)

	// The handler runs with lease.Context(ctx); then the response is stored.
	_ = lease.Context(ctx)
	err = lease.Complete(ctx, &idemstore.Response{StatusCode: http.StatusCreated, Body: []byte(`{"id":"pay_1"}`)})
	fmt.Println("complete:", err)

	var res idemstore.ClaimResult
	res, _ = store.Claim(ctx, p)
	var rec *idemstore.Record = res.Record
	fmt.Println("retry:", rec.Status == idemstore.StatusCompleted, rec.Response.StatusCode, string(rec.Response.Body))

	_, reports := lease.(idemstore.ConflictReporter)
	fmt.Println("the memory store reports conflicts:", reports)
	// Output:
	// first claim: token 1 taken over false
	// duplicate while it runs: true
	// complete: <nil>
	// retry: true 201 {"id":"pay_1"}
	// the memory store reports conflicts: false
}

// A two-phase lease that outlives the lock timeout is taken over by the
// next claim of the same request; the first holder's Complete then fails
// with ErrLeaseLost, and the middleware answers it 409.
func ExampleLease_takeover() {
	store := idemtest.NewMemoryStore()
	ctx := context.Background()
	start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	p := idemstore.ClaimParams{
		Scope:  idemstore.Scope{ClientID: "alice", Key: "order-7"},
		Method: "POST", Path: "/v1/payments", RequestHash: []byte("fp"),
		TwoPhase: true, Now: start, LockTimeout: 30 * time.Second, Retention: 24 * time.Hour,
	}
	slow, _ := store.Claim(ctx, p)

	p.Now = start.Add(31 * time.Second)
	fmt.Println("lease expired:", idemstore.LeaseExpired(start, p.Now, p.LockTimeout))
	fmt.Println("key past retention:", idemstore.Expired(start, p.Now, p.Retention))
	retry, _ := store.Claim(ctx, p)
	info := retry.Lease.Info()
	fmt.Printf("retry: token %d, taken over %t, row created %s\n", info.Token, info.TakenOver, info.CreatedAt.Format(time.TimeOnly))

	err := slow.Lease.Complete(ctx, &idemstore.Response{StatusCode: http.StatusCreated})
	fmt.Println("slow holder:", errors.Is(err, idemstore.ErrLeaseLost))
	fmt.Println("two-phase:", p.TwoPhase)
	// Output:
	// lease expired: true
	// key past retention: false
	// retry: token 2, taken over true, row created 03:04:05
	// slow holder: true
	// two-phase: true
}

// unreachableStore stands for a store whose database is down. Stores wrap
// such failures with ErrUnavailable; the middleware answers any store
// error 503 and never runs the handler.
type unreachableStore struct{}

func (unreachableStore) Claim(context.Context, idemstore.ClaimParams) (idemstore.ClaimResult, error) {
	return idemstore.ClaimResult{}, fmt.Errorf("mystore: claim: %w", idemstore.ErrUnavailable)
}

func ExampleErrUnavailable() {
	_, err := unreachableStore{}.Claim(context.Background(), idemstore.ClaimParams{})
	fmt.Println(errors.Is(err, idemstore.ErrUnavailable), err)
	// Output: true mystore: claim: idem: store unavailable
}
