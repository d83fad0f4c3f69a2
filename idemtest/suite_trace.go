package idemtest

import (
	"context"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemstore"
)

// The conformance cases about the trace context stored with a key
// ([idemstore.ClaimParams.TraceContext]): it comes back with the key, so
// that a replay, a 409 or a resume can point to the trace that ran it.

// Trace contexts of the suite's claims: W3C traceparent values.
const (
	traceFirst    = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	traceTakeover = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
)

func (s suite) storesTraceContext(t *testing.T) {
	t.Parallel()
	store := s.h.NewStore(t)
	scope := newScope("alice")
	p := s.params(scope, "a", epoch)
	p.TraceContext = traceFirst
	l := s.mustLease(t, store, p)
	if s.mode == idem.ModeTwoPhase {
		// A two-phase claim is committed: a duplicate sees its holder's.
		if rec := s.mustRecord(t, store, s.params(scope, "a", epoch.Add(time.Second))); rec.TraceContext != traceFirst {
			t.Errorf("key in flight: TraceContext = %q, want the holder's %q", rec.TraceContext, traceFirst)
		}
	}
	complete(t, l, sampleResponse(`{"id":"pay_1"}`))
	if rec := s.mustRecord(t, store, s.params(scope, "a", epoch.Add(time.Hour))); rec.TraceContext != traceFirst {
		t.Errorf("completed key: TraceContext = %q, want the claim's %q", rec.TraceContext, traceFirst)
	}
	if rec := s.mustRecord(t, store, s.params(scope, "b", epoch.Add(time.Hour))); rec.TraceContext != traceFirst {
		t.Errorf("key reused with another request: TraceContext = %q, want the first request's %q", rec.TraceContext, traceFirst)
	}

	none := newScope("alice")
	complete(t, s.mustLease(t, store, s.params(none, "a", epoch)), sampleResponse(`{}`))
	if rec := s.mustRecord(t, store, s.params(none, "a", epoch.Add(time.Hour))); rec.TraceContext != "" {
		t.Errorf("key claimed without a trace context: TraceContext = %q, want empty", rec.TraceContext)
	}
}

// takeoverReplacesTraceContext checks that a takeover stores the trace
// context of the request that took the key over, which is the one that
// runs it, and that the resumer's listing returns the holder's.
func (s suite) takeoverReplacesTraceContext(t *testing.T) {
	t.Parallel()
	store := s.h.NewStore(t)
	scope := newScope("alice")
	p := s.params(scope, "a", epoch)
	p.TraceContext = traceFirst
	l := s.mustLease(t, store, p)
	if rl, ok := l.(idemstore.RecoveryLease); ok {
		checkpoint(t, rl, "created", idem.State{"id": "pay_1"})
		if rs, ok := store.(idemstore.RecoveryStore); ok {
			now := epoch.Add(lockTimeout + time.Second)
			keys, err := rs.Unfinished(context.Background(), idemstore.UnfinishedParams{Now: now, LockTimeout: lockTimeout, Retention: retention, Limit: 100})
			if err != nil {
				t.Fatalf("Unfinished: %v", err)
			}
			found := false
			for _, k := range keys {
				if k.Scope == scope {
					found = true
					if k.TraceContext != traceFirst {
						t.Errorf("listed key: TraceContext = %q, want the holder's %q", k.TraceContext, traceFirst)
					}
				}
			}
			if !found {
				t.Errorf("Unfinished = %d keys without the abandoned one", len(keys))
			}
		}
	}
	q := s.params(scope, "a", epoch.Add(lockTimeout+2*time.Second))
	q.TraceContext = traceTakeover
	taken := s.mustLease(t, store, q)
	if !taken.Info().TakenOver {
		t.Fatalf("Info() = %+v, want a takeover", taken.Info())
	}
	complete(t, taken, sampleResponse(`{"holder":"new"}`))
	if rec := s.mustRecord(t, store, s.params(scope, "a", epoch.Add(time.Hour))); rec.TraceContext != traceTakeover {
		t.Errorf("after a takeover: TraceContext = %q, want the new holder's %q", rec.TraceContext, traceTakeover)
	}
}
