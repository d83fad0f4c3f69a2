package idemtest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idemkit/idem/idemstore"
)

// concurrentTakeovers: claims of the same request that find the same
// started key with an expired lease all at once elect exactly one new
// holder, at the next token; the others see the key in flight, and the
// old holder is fenced off. A store that checks only that the lease has
// expired, not that the row is still the one it read (the token it saw),
// hands the key to several claimants, and each then runs the handler.
func (s suite) concurrentTakeovers(t *testing.T) {
	t.Parallel()
	store := s.h.NewStore(t)
	scope := newScope("alice")
	old := s.mustLease(t, store, s.params(scope, "a", epoch))
	at := epoch.Add(lockTimeout + time.Second)

	const n = 16
	type answer struct {
		res idemstore.ClaimResult
		err error
	}
	answers := make(chan answer, n)
	start := make(chan struct{})
	for range n {
		go func() {
			<-start
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			res, err := store.Claim(ctx, s.params(scope, "a", at))
			answers <- answer{res, err}
		}()
	}
	close(start)
	var owners []idemstore.Lease
	started := 0
	deadline := time.NewTimer(30 * time.Second)
	defer deadline.Stop()
	for i := range n {
		select {
		case a := <-answers:
			switch {
			case a.err != nil:
				t.Errorf("concurrent takeover failed: %v", a.err)
			case a.res.Lease != nil:
				owners = append(owners, a.res.Lease)
			case a.res.Record != nil && a.res.Record.Status == idemstore.StatusInFlight:
				started++
			default:
				t.Errorf("concurrent takeover answered %+v; want a lease or the key in flight", a.res)
			}
		case <-deadline.C:
			t.Fatalf("%d of %d concurrent takeovers had not answered after 30s", n-i, n)
		}
	}
	if len(owners) != 1 || started != n-1 {
		tokens := make([]int64, 0, len(owners))
		for _, l := range owners {
			tokens = append(tokens, l.Info().Token)
			_ = l.Release(context.Background())
		}
		t.Fatalf("%d owners (tokens %v) and %d in-flight answers of %d concurrent takeovers of one expired lease; want 1 and %d", len(owners), tokens, started, n, n-1)
	}
	taken := owners[0]
	if info := taken.Info(); !info.TakenOver || info.Token != 2 {
		t.Errorf("the new holder's Info() = %+v, want taken over with token 2", info)
	}
	if err := old.Complete(context.Background(), sampleResponse(`{"holder":"old"}`)); !errors.Is(err, idemstore.ErrLeaseLost) {
		t.Errorf("the old holder's Complete = %v, want ErrLeaseLost", err)
	}
	complete(t, taken, sampleResponse(`{"holder":"new"}`))
	rec := s.mustRecord(t, store, s.params(scope, "a", at.Add(time.Second)))
	if string(rec.Response.Body) != `{"holder":"new"}` || rec.Token != 2 {
		t.Errorf("stored %q token %d, want the new holder's response and token 2", rec.Response.Body, rec.Token)
	}
}
