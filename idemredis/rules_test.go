package idemredis_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"testing"
	"time"

	"github.com/idemkit/idem/idemredis"
	"github.com/idemkit/idem/idemstore"
)

var t0 = time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)

func hash(s string) []byte { h := sha256.Sum256([]byte(s)); return h[:] }

func claimParams(scope idemstore.Scope, body string, now time.Time, lockTimeout, retention time.Duration) idemstore.ClaimParams {
	return idemstore.ClaimParams{Scope: scope, Method: http.MethodPost, Path: "/v1/payments", RequestHash: hash(body),
		TwoPhase: true, Now: now, LockTimeout: lockTimeout, Retention: retention}
}

// TestClaimScriptDecidesAsRules checks that the claim script decides as
// the rules of idemstore/rules.go do, at and around each boundary: for a
// key in each state, a claim at each time, with the same request or
// another, the script's answer (a new key, a takeover, or the record) is
// the one that idemstore.Expired and ClaimParams.CanTakeOver give for the
// record as the store reads it.
func TestClaimScriptDecidesAsRules(t *testing.T) {
	rdb := singleServer(t)
	store, err := idemredis.New(rdb, &idemredis.Config{Prefix: "rules"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	const lock, retention = 30 * time.Second, time.Hour
	setups := map[string]func(l idemstore.Lease){
		"started":   func(idemstore.Lease) {},
		"completed": func(l idemstore.Lease) { must(t, l.Complete(ctx, &idemstore.Response{StatusCode: 201})) },
		"released at a point": func(l idemstore.Lease) {
			must(t, l.(idemstore.RecoveryLease).Checkpoint(ctx, idemstore.Recovery{Point: "created"}))
			must(t, l.Release(ctx))
		},
	}
	offsets := []time.Duration{0, lock - time.Microsecond, lock, lock + time.Microsecond,
		retention - time.Microsecond, retention, retention + time.Microsecond}
	n := 0
	for name, setup := range setups {
		for _, off := range offsets {
			for _, probeLock := range []time.Duration{lock, 2 * lock} {
				for _, body := range []string{"a", "b"} {
					n++
					scope := idemstore.Scope{ClientID: "alice", Key: fmt.Sprintf("k%d", n)}
					res, err := store.Claim(ctx, claimParams(scope, "a", t0, lock, retention))
					if err != nil || res.Lease == nil {
						t.Fatalf("first claim: %+v, %v", res, err)
					}
					setup(res.Lease)
					rec, err := store.GetKey(ctx, scope)
					if err != nil {
						t.Fatal(err)
					}
					p := claimParams(scope, body, t0.Add(off), probeLock, retention)
					want := "record"
					switch {
					case idemstore.Expired(rec.CreatedAt, p.Now, p.Retention):
						want = "new"
					case p.CanTakeOver(rec):
						want = "takeover"
					}
					if (want != "record") != p.MayReplace(rec) {
						t.Fatalf("the rules disagree with themselves for %+v", rec)
					}
					got, err := store.Claim(ctx, p)
					if err != nil {
						t.Fatal(err)
					}
					answer := "record"
					if got.Lease != nil {
						answer = "new"
						if got.Lease.Info().TakenOver {
							answer = "takeover"
						}
					}
					if answer != want {
						t.Errorf("%s key, claim at +%v with lock timeout %v, request %q: the script answers %s, the rules %s",
							name, off, probeLock, body, answer, want)
					}
				}
			}
		}
	}
	t.Logf("%d cases", n)
}

// TestMinReplicasUnmet: a lone server has no replica, so with MinReplicas
// 1 a claim's WAIT comes back short: the claim fails, never a silent
// success, and gives the key back.
func TestMinReplicasUnmet(t *testing.T) {
	rdb := singleServer(t)
	store, err := idemredis.New(rdb, &idemredis.Config{Prefix: "wait", MinReplicas: 1, ReplicaTimeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	scope := idemstore.Scope{ClientID: "alice", Key: "k"}
	res, err := store.Claim(ctx, claimParams(scope, "a", t0, time.Minute, time.Hour))
	if errors.Is(err, idemstore.ErrOutcomeUnknown) || !errors.Is(err, idemstore.ErrUnavailable) || res.Lease != nil {
		t.Fatalf("Claim = %+v, %v; want an error wrapping ErrUnavailable, not ErrOutcomeUnknown (nothing ran)", res, err)
	}
	if _, err := store.GetKey(ctx, scope); !errors.Is(err, idemstore.ErrKeyNotFound) {
		t.Errorf("GetKey after the failed claim = %v; want the key given back", err)
	}
	must(t, store.Migrate(ctx))
	if err := store.Ready(ctx); !errors.Is(err, idemstore.ErrUnavailable) {
		t.Errorf("Ready without the replica MinReplicas needs = %v; want ErrUnavailable", err)
	}
}

// TestClaimAtSavesThePointOfAKeyItMakes: ClaimAt saves its recovery
// point in a key it makes, new or past its retention, as a Checkpoint
// would; a key it takes over keeps the point it had; and with too few
// replicas the key it made goes, point and all.
func TestClaimAtSavesThePointOfAKeyItMakes(t *testing.T) {
	rdb := singleServer(t)
	store, err := idemredis.New(rdb, &idemredis.Config{Prefix: "claimat"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	at := idemstore.Recovery{Point: "forwarded", State: map[string]string{"key": `"k"`, "policy": "hold"}}
	pointAfterTakeover := func(t *testing.T, scope idemstore.Scope, now time.Time) idemstore.Recovery {
		t.Helper()
		res, err := store.ClaimAt(ctx, claimParams(scope, "a", now, time.Minute, time.Hour), idemstore.Recovery{Point: "other"})
		if err != nil || res.Lease == nil || !res.Lease.Info().TakenOver {
			t.Fatalf("claim after the lease: %+v, %v; want a takeover", res, err)
		}
		r, err := res.Lease.(idemstore.RecoveryLease).Recovery(ctx)
		must(t, err)
		return r
	}
	t.Run("NewKey", func(t *testing.T) {
		scope := idemstore.Scope{ClientID: "alice", Key: "new"}
		res, err := store.ClaimAt(ctx, claimParams(scope, "a", t0, time.Minute, time.Hour), at)
		if err != nil || res.Lease == nil || res.Lease.Info().TakenOver {
			t.Fatalf("ClaimAt of a new key = %+v, %v; want a new lease", res, err)
		}
		if got := pointAfterTakeover(t, scope, t0.Add(time.Minute)); got.Point != at.Point || !maps.Equal(got.State, at.State) {
			t.Fatalf("the next holder read %+v; want %+v", got, at)
		}
	})
	t.Run("ExpiredKey", func(t *testing.T) {
		scope := idemstore.Scope{ClientID: "alice", Key: "expired"}
		res, err := store.Claim(ctx, claimParams(scope, "a", t0, time.Minute, time.Hour))
		must(t, err)
		must(t, res.Lease.Complete(ctx, &idemstore.Response{StatusCode: 201}))
		res, err = store.ClaimAt(ctx, claimParams(scope, "a", t0.Add(time.Hour), time.Minute, time.Hour), at)
		if err != nil || res.Lease == nil || res.Lease.Info().TakenOver {
			t.Fatalf("ClaimAt of a key past its retention = %+v, %v; want a new lease", res, err)
		}
		if got := pointAfterTakeover(t, scope, t0.Add(time.Hour+time.Minute)); got.Point != at.Point {
			t.Fatalf("the next holder read %+v; want %+v", got, at)
		}
	})
	t.Run("TakenOverKeepsItsPoint", func(t *testing.T) {
		scope := idemstore.Scope{ClientID: "alice", Key: "taken"}
		res, err := store.Claim(ctx, claimParams(scope, "a", t0, time.Minute, time.Hour))
		must(t, err)
		must(t, res.Lease.(idemstore.RecoveryLease).Checkpoint(ctx, idemstore.Recovery{Point: "not_processed"}))
		res, err = store.ClaimAt(ctx, claimParams(scope, "a", t0.Add(time.Minute), time.Minute, time.Hour), at)
		if err != nil || res.Lease == nil || !res.Lease.Info().TakenOver {
			t.Fatalf("ClaimAt after the lease = %+v, %v; want a takeover", res, err)
		}
		r, err := res.Lease.(idemstore.RecoveryLease).Recovery(ctx)
		if err != nil || r.Point != "not_processed" {
			t.Fatalf("the taking claim read %+v, %v; want the point it had, not_processed", r, err)
		}
	})
	t.Run("TooFewReplicas", func(t *testing.T) {
		short, err := idemredis.New(rdb, &idemredis.Config{Prefix: "claimat", MinReplicas: 1, ReplicaTimeout: 50 * time.Millisecond})
		must(t, err)
		scope := idemstore.Scope{ClientID: "alice", Key: "short"}
		res, err := short.ClaimAt(ctx, claimParams(scope, "a", t0, time.Minute, time.Hour), at)
		if !errors.Is(err, idemstore.ErrUnavailable) || res.Lease != nil {
			t.Fatalf("ClaimAt without the replica = %+v, %v; want an error wrapping ErrUnavailable", res, err)
		}
		if _, err := store.GetKey(ctx, scope); !errors.Is(err, idemstore.ErrKeyNotFound) {
			t.Errorf("GetKey after the failed claim = %v; want the key given back, point and all", err)
		}
	})
}

// TestScopesDoNotCollide: a client or key holding the name's separator,
// braces or SCAN's wildcards names its own key, and listing one client's
// keys lists no other's.
func TestScopesDoNotCollide(t *testing.T) {
	rdb := singleServer(t)
	store, err := idemredis.New(rdb, &idemredis.Config{Prefix: "esc"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	scopes := []idemstore.Scope{{ClientID: "a:b", Key: "c"}, {ClientID: "a", Key: "b:c"}, {ClientID: "a}", Key: "{b"},
		{ClientID: "a*", Key: "c"}, {ClientID: "ab", Key: "c"}, {ClientID: "a%3Ab", Key: "c"}}
	for i, s := range scopes {
		res, err := store.Claim(ctx, claimParams(s, "a", t0.Add(time.Duration(i)*time.Second), time.Minute, time.Hour))
		if err != nil || res.Lease == nil {
			t.Fatalf("claim of %+v: %+v, %v; want a new key", s, res, err)
		}
	}
	recs, err := store.ListKeys(ctx, idemstore.ListKeysParams{ClientID: "a*"})
	if err != nil || len(recs) != 1 || recs[0].Scope != scopes[3] {
		t.Errorf("ListKeys of client a* = %v, %v; want its one key", recs, err)
	}
	recs, err = store.ListKeys(ctx, idemstore.ListKeysParams{})
	if err != nil || len(recs) != len(scopes) {
		t.Fatalf("ListKeys = %d keys, %v; want %d", len(recs), err, len(scopes))
	}
	for i, r := range recs {
		if r.Scope != scopes[i] {
			t.Errorf("key %d is %+v, want %+v", i, r.Scope, scopes[i])
		}
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
