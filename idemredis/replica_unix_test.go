//go:build unix

package idemredis_test

import (
	"context"
	"errors"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/idemkit/idem/idemredis"
	"github.com/idemkit/idem/idemstore"
	"github.com/redis/go-redis/v9"
)

// TestMinReplicasWithReplica: a primary with one replica. While the
// replica follows, claims and completions with MinReplicas 1 succeed;
// once it stops (SIGSTOP), a completion is stored on the primary but
// reported as an unknown outcome, Release then frees nothing, and a new
// claim fails and gives its key back.
func TestMinReplicasWithReplica(t *testing.T) {
	needRedis(t)
	primary := startServer(t, t.TempDir())
	_, replica := startServerProcess(t, t.TempDir(), "--replicaof", "127.0.0.1", primary[strings.LastIndex(primary, ":")+1:])
	rdb := redis.NewClient(&redis.Options{Addr: primary})
	t.Cleanup(func() { rdb.Close() })
	ctx := context.Background()
	poll(t, "the replica to sync", func() bool {
		info, err := rdb.Info(ctx, "replication").Result()
		return err == nil && strings.Contains(info, "connected_slaves:1") && strings.Contains(info, "state=online")
	})
	store, err := idemredis.New(rdb, &idemredis.Config{Prefix: "replica", MinReplicas: 1, ReplicaTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	claim := func(key string) (idemstore.ClaimResult, error) {
		return store.Claim(ctx, claimParams(idemstore.Scope{ClientID: "alice", Key: key}, "a", t0, time.Minute, time.Hour))
	}
	must(t, store.Migrate(ctx))
	must(t, store.Ready(ctx))
	res, err := claim("k1")
	if err != nil || res.Lease == nil {
		t.Fatalf("claim with a replica following = %+v, %v; want a lease", res, err)
	}
	res2, err := claim("k2")
	if err != nil || res2.Lease == nil {
		t.Fatalf("claim with a replica following = %+v, %v; want a lease", res2, err)
	}
	must(t, res2.Lease.Complete(ctx, &idemstore.Response{StatusCode: 201}))

	must(t, replica.Signal(syscall.SIGSTOP))
	t.Cleanup(func() { _ = replica.Signal(syscall.SIGCONT) })
	err = res.Lease.Complete(ctx, &idemstore.Response{StatusCode: 201, Body: []byte("done")})
	if !errors.Is(err, idemstore.ErrOutcomeUnknown) || !errors.Is(err, idemstore.ErrUnavailable) {
		t.Fatalf("Complete with the replica stopped = %v; want an unknown outcome", err)
	}
	must(t, res.Lease.Release(ctx))
	rec, err := store.GetKey(ctx, idemstore.Scope{ClientID: "alice", Key: "k1"})
	if err != nil || rec.Status != idemstore.StatusCompleted || string(rec.Response.Body) != "done" {
		t.Errorf("key after the unknown completion and a Release = %+v, %v; want it completed on the primary", rec, err)
	}
	if res, err := claim("k3"); !errors.Is(err, idemstore.ErrOutcomeUnknown) || res.Lease != nil {
		t.Errorf("claim with the replica stopped = %+v, %v; want an unknown outcome", res, err)
	}
	if _, err := store.GetKey(ctx, idemstore.Scope{ClientID: "alice", Key: "k3"}); !errors.Is(err, idemstore.ErrKeyNotFound) {
		t.Errorf("key of the failed claim: %v; want it given back", err)
	}
}
