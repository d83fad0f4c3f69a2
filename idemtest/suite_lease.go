package idemtest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idemkit/idem/idemstore"
)

// The conformance cases about leases: business writes that commit or roll
// back with the key, and what an ended lease answers.

func (s suite) needTx(t *testing.T) {
	t.Helper()
	if s.h.Write == nil || s.h.Count == nil {
		t.Skip("the store has no transactions (Harness.Write and Harness.Count are nil)")
	}
}

func (s suite) commitsWrites(t *testing.T) {
	s.needTx(t)
	t.Parallel()
	store := s.h.NewStore(t)
	scope := newScope("alice")
	l := s.mustLease(t, store, s.params(scope, "a", epoch))
	if err := s.h.Write(l.Context(context.Background()), store, scope.Key); err != nil {
		t.Fatalf("business write: %v", err)
	}
	complete(t, l, sampleResponse("{}"))
	if n := s.h.Count(t, store, scope.Key); n != 1 {
		t.Errorf("%d business rows after Complete, want 1", n)
	}
}

func (s suite) releaseRollsBack(t *testing.T) {
	s.needTx(t)
	t.Parallel()
	store := s.h.NewStore(t)
	scope := newScope("alice")
	l := s.mustLease(t, store, s.params(scope, "a", epoch))
	if err := s.h.Write(l.Context(context.Background()), store, scope.Key); err != nil {
		t.Fatalf("business write: %v", err)
	}
	release(t, l)
	if n := s.h.Count(t, store, scope.Key); n != 0 {
		t.Errorf("%d business rows after Release, want 0", n)
	}
	// The key is free again and the retry's write commits once.
	l = s.mustLease(t, store, s.params(scope, "a", epoch.Add(time.Second)))
	if err := s.h.Write(l.Context(context.Background()), store, scope.Key); err != nil {
		t.Fatalf("business write: %v", err)
	}
	complete(t, l, sampleResponse("{}"))
	if n := s.h.Count(t, store, scope.Key); n != 1 {
		t.Errorf("%d business rows after the retry, want 1", n)
	}
}

func (s suite) staleHolderWritesRollBack(t *testing.T) {
	s.needTx(t)
	t.Parallel()
	store := s.h.NewStore(t)
	scope := newScope("alice")
	old := s.mustLease(t, store, s.params(scope, "a", epoch))
	taken := s.mustLease(t, store, s.params(scope, "a", epoch.Add(lockTimeout+time.Second)))

	// The new holder finishes first; the stale holder, waking up, writes and
	// tries to commit: the fence must roll its writes back.
	if err := s.h.Write(taken.Context(context.Background()), store, scope.Key+"-new"); err != nil {
		t.Fatalf("new holder's write: %v", err)
	}
	complete(t, taken, sampleResponse(`{"holder":"new"}`))
	if err := s.h.Write(old.Context(context.Background()), store, scope.Key+"-old"); err != nil {
		t.Fatalf("stale holder's write: %v", err)
	}
	if err := old.Complete(context.Background(), sampleResponse(`{"holder":"old"}`)); !errors.Is(err, idemstore.ErrLeaseLost) {
		t.Errorf("stale holder's Complete = %v, want ErrLeaseLost", err)
	}
	if n := s.h.Count(t, store, scope.Key+"-old"); n != 0 {
		t.Errorf("%d rows from the stale holder, want 0", n)
	}
	if n := s.h.Count(t, store, scope.Key+"-new"); n != 1 {
		t.Errorf("%d rows from the new holder, want 1", n)
	}
}

// wantEnded checks that err, from a call on an ended lease, wraps
// idemstore.ErrLeaseEnded.
func wantEnded(t testing.TB, call string, err error) {
	t.Helper()
	if !errors.Is(err, idemstore.ErrLeaseEnded) {
		t.Errorf("%s on an ended lease = %v, want an error wrapping idemstore.ErrLeaseEnded", call, err)
	}
}

func (s suite) completedLeaseHasEnded(t *testing.T) {
	t.Parallel()
	store := s.h.NewStore(t)
	scope := newScope("alice")
	l := s.mustLease(t, store, s.params(scope, "a", epoch))
	complete(t, l, sampleResponse(`{"call":"first"}`))
	wantEnded(t, "a second Complete", l.Complete(context.Background(), sampleResponse(`{"call":"second"}`)))
	wantEnded(t, "Release after Complete", l.Release(context.Background()))
	rec := s.mustRecord(t, store, s.params(scope, "a", epoch.Add(time.Second)))
	if rec.Status != idemstore.StatusCompleted || string(rec.Response.Body) != `{"call":"first"}` {
		t.Errorf("record = %q %q, want the first response, completed", rec.Status, rec.Response.Body)
	}
}

func (s suite) releasedLeaseHasEnded(t *testing.T) {
	t.Parallel()
	store := s.h.NewStore(t)
	scope := newScope("alice")
	l := s.mustLease(t, store, s.params(scope, "a", epoch))
	release(t, l)
	wantEnded(t, "a second Release", l.Release(context.Background()))
	wantEnded(t, "Complete after Release", l.Complete(context.Background(), sampleResponse(`{"holder":"old"}`)))
	// The ended lease touches nothing of the key's next holder.
	next := s.mustLease(t, store, s.params(scope, "a", epoch.Add(time.Second)))
	wantEnded(t, "a third Release", l.Release(context.Background()))
	if rec := s.mustRecord(t, store, s.params(scope, "a", epoch.Add(2*time.Second))); rec.Status != idemstore.StatusInFlight {
		t.Errorf("the next holder's key is %q, want started", rec.Status)
	}
	complete(t, next, sampleResponse(`{"holder":"next"}`))
	if rec := s.mustRecord(t, store, s.params(scope, "a", epoch.Add(3*time.Second))); string(rec.Response.Body) != `{"holder":"next"}` {
		t.Errorf("stored %q, want the next holder's response", rec.Response.Body)
	}
}

func (s suite) lostLeaseHasEnded(t *testing.T) {
	t.Parallel()
	store := s.h.NewStore(t)
	scope := newScope("alice")
	old := s.mustLease(t, store, s.params(scope, "a", epoch))
	taken := s.mustLease(t, store, s.params(scope, "a", epoch.Add(lockTimeout+time.Second)))
	if err := old.Complete(context.Background(), sampleResponse(`{"holder":"old"}`)); !errors.Is(err, idemstore.ErrLeaseLost) {
		t.Fatalf("stale holder's Complete = %v, want ErrLeaseLost", err)
	}
	wantEnded(t, "Release after a lost Complete", old.Release(context.Background()))
	if rec := s.mustRecord(t, store, s.params(scope, "a", epoch.Add(lockTimeout+2*time.Second))); rec.Status != idemstore.StatusInFlight || rec.Token != 2 {
		t.Errorf("after the stale holder's calls: status %q token %d, want started with token 2", rec.Status, rec.Token)
	}
	complete(t, taken, sampleResponse("{}"))
}

func (s suite) noWritesAfterEnd(t *testing.T) {
	s.needTx(t)
	t.Parallel()
	store := s.h.NewStore(t)
	scope := newScope("alice")
	l := s.mustLease(t, store, s.params(scope, "a", epoch))
	ctx := l.Context(context.Background())
	complete(t, l, sampleResponse("{}"))
	wantEnded(t, "a business write", s.h.Write(ctx, store, scope.Key))
	if n := s.h.Count(t, store, scope.Key); n != 0 {
		t.Errorf("%d business rows written after the lease ended, want 0", n)
	}
}
