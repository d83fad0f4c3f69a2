package idemredis_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idemkit/idem/idemredis"
	"github.com/idemkit/idem/idemstore"
)

// TestScanAndDeleteKeyIf: ScanKeys reads each key with its recovery point
// and state, and DeleteKeyIf deletes a key only if its check passes on the
// key as read and no claim changed the key in between.
func TestScanAndDeleteKeyIf(t *testing.T) {
	rdb := singleServer(t)
	store, err := idemredis.New(rdb, &idemredis.Config{Prefix: "scan"})
	must(t, err)
	ctx := context.Background()
	const lock, retention = time.Minute, time.Hour
	a := idemstore.Scope{ClientID: "alice", Key: "a"}
	b := idemstore.Scope{ClientID: "bob", Key: "b"}
	res, err := store.Claim(ctx, claimParams(a, "x", t0, lock, retention))
	must(t, err)
	must(t, res.Lease.(idemstore.RecoveryLease).Checkpoint(ctx, idemstore.Recovery{Point: "forwarded", State: map[string]string{"policy": "hold"}}))
	must(t, res.Lease.Release(ctx))
	res, err = store.Claim(ctx, claimParams(b, "y", t0, lock, retention))
	must(t, err)
	must(t, res.Lease.Complete(ctx, &idemstore.Response{StatusCode: 502, Body: []byte("held")}))

	got := map[string]idemredis.Key{}
	must(t, store.ScanKeys(ctx, "", func(k idemredis.Key) { got[k.Scope.Key] = k }))
	if k := got["a"]; len(got) != 2 || k.Status != idemstore.StatusInFlight || !k.LockedAt.IsZero() || k.Recovery.Point != "forwarded" || k.Recovery.State["policy"] != "hold" {
		t.Fatalf("ScanKeys: %+v; want a started at its point with no holder", got)
	}
	if k := got["b"]; k.Status != idemstore.StatusCompleted || k.Response == nil || string(k.Response.Body) != "held" || k.Recovery.Point != idemstore.RecoveryStarted {
		t.Fatalf("ScanKeys: b = %+v; want it completed with its body", k)
	}
	n := 0
	must(t, store.ScanKeys(ctx, "bob", func(idemredis.Key) { n++ }))
	if n != 1 {
		t.Errorf("ScanKeys of bob: %d keys, want 1", n)
	}

	no := errors.New("not this one")
	if _, err := store.DeleteKeyIf(ctx, b, func(idemredis.Key) error { return no }); !errors.Is(err, no) {
		t.Fatalf("DeleteKeyIf with a failing check = %v", err)
	}
	// A claim between the read and the delete takes the key over: it is kept.
	_, err = store.DeleteKeyIf(ctx, a, func(idemredis.Key) error {
		res, err := store.Claim(ctx, claimParams(a, "x", t0.Add(time.Second), lock, retention))
		if err != nil || res.Lease == nil || !res.Lease.Info().TakenOver {
			t.Errorf("takeover in between: %+v, %v", res, err)
		}
		return nil
	})
	if !errors.Is(err, idemstore.ErrKeyChanged) {
		t.Fatalf("DeleteKeyIf of a key taken over in between = %v; want ErrKeyChanged", err)
	}
	if _, err := store.GetKey(ctx, a); err != nil {
		t.Fatalf("key taken over: %v; want it kept", err)
	}
	k, err := store.DeleteKeyIf(ctx, b, func(idemredis.Key) error { return nil })
	if err != nil || k.Status != idemstore.StatusCompleted {
		t.Fatalf("DeleteKeyIf = %+v, %v", k, err)
	}
	if _, err := store.GetKey(ctx, b); !errors.Is(err, idemstore.ErrKeyNotFound) {
		t.Fatalf("deleted key: %v", err)
	}
	if _, err := store.DeleteKeyIf(ctx, b, func(idemredis.Key) error { return nil }); !errors.Is(err, idemstore.ErrKeyNotFound) {
		t.Fatalf("DeleteKeyIf of no key = %v; want ErrKeyNotFound", err)
	}
}
