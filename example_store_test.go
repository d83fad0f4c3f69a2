package idem_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemtest"
)

// A store's view of one key, as the middleware drives it: the first claim
// gets a Lease, and every later claim gets the Record. Any Store must give
// these answers; idemtest.RunStoreTests checks them.
func ExampleStore() {
	var store idem.Store = idemtest.NewMemoryStore()
	ctx := context.Background()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	p := idem.ClaimParams{
		Scope:  idem.Scope{ClientID: "alice", Key: "order-7"},
		Method: "POST", Path: "/v1/payments",
		RequestHash: []byte("the request's fingerprint"),
		Mode:        idem.ModeAtomic, Now: now,
		LockTimeout: idem.LockTimeoutDefault, Retention: idem.RetentionDefault,
	}

	first, err := store.Claim(ctx, p)
	if err != nil {
		fmt.Println(err)
		return
	}
	var lease idem.Lease = first.Lease
	var info idem.LeaseInfo = lease.Info()
	fmt.Println("first claim: token", info.Token, "taken over", info.TakenOver)

	dup, _ := store.Claim(ctx, p)
	var status idem.Status = dup.Record.Status
	fmt.Println("duplicate while it runs:", status == idem.StatusInFlight)

	// The handler runs with lease.Context(ctx); then the response is stored.
	_ = lease.Context(ctx)
	err = lease.Complete(ctx, &idem.Response{StatusCode: http.StatusCreated, Body: []byte(`{"id":"pay_1"}`)})
	fmt.Println("complete:", err)

	var res idem.ClaimResult
	res, _ = store.Claim(ctx, p)
	var rec *idem.Record = res.Record
	fmt.Println("retry:", rec.Status == idem.StatusCompleted, rec.Response.StatusCode, string(rec.Response.Body))

	_, reports := lease.(idem.ConflictReporter)
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
	p := idem.ClaimParams{
		Scope:  idem.Scope{ClientID: "alice", Key: "order-7"},
		Method: "POST", Path: "/v1/payments", RequestHash: []byte("fp"),
		Mode: idem.ModeTwoPhase, Now: start, LockTimeout: 30 * time.Second, Retention: 24 * time.Hour,
	}
	slow, _ := store.Claim(ctx, p)

	p.Now = start.Add(31 * time.Second)
	fmt.Println("lease expired:", idem.LeaseExpired(start, p.Now, p.LockTimeout))
	fmt.Println("key past retention:", idem.Expired(start, p.Now, p.Retention))
	retry, _ := store.Claim(ctx, p)
	info := retry.Lease.Info()
	fmt.Printf("retry: token %d, taken over %t, row created %s\n", info.Token, info.TakenOver, info.CreatedAt.Format(time.TimeOnly))

	err := slow.Lease.Complete(ctx, &idem.Response{StatusCode: http.StatusCreated})
	fmt.Println("slow holder:", errors.Is(err, idem.ErrLeaseLost))
	var mode idem.Mode = p.Mode
	fmt.Println("mode:", mode.String())
	// Output:
	// lease expired: true
	// key past retention: false
	// retry: token 2, taken over true, row created 03:04:05
	// slow holder: true
	// mode: two-phase
}

// unreachableStore stands for a store whose database is down. Stores wrap
// such failures with ErrUnavailable; the middleware answers any store
// error 503 and never runs the handler.
type unreachableStore struct{}

func (unreachableStore) Claim(context.Context, idem.ClaimParams) (idem.ClaimResult, error) {
	return idem.ClaimResult{}, fmt.Errorf("mystore: claim: %w", idem.ErrUnavailable)
}

func ExampleErrUnavailable() {
	_, err := unreachableStore{}.Claim(context.Background(), idem.ClaimParams{})
	fmt.Println(errors.Is(err, idem.ErrUnavailable), err)
	// Output: true mystore: claim: idem: store unavailable
}
