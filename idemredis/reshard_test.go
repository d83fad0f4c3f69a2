package idemredis_test

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/idemredis"
	"github.com/idemkit/idem/idemstore"
)

// TestClusterReshardLosesNothing moves 1500 of the cluster's slots from
// one primary to another (redis-cli --cluster reshard) while workers claim,
// complete and replay keys, old and new, with MinReplicas 0 (go-redis
// follows the redirections) and 1 (the store follows them, see
// Store.run): no call fails, every completed key replays its own
// response, and none is lost.
func TestClusterReshardLosesNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a six-node cluster")
	}
	for _, n := range []int{0, 1} {
		t.Run(fmt.Sprintf("MinReplicas%d", n), func(t *testing.T) { reshardStorm(t, n) })
	}
}

func reshardStorm(t *testing.T, minReplicas int) {
	rdb, addrs := cluster(t)
	// A replica that a loaded machine delays acknowledges late, not never.
	store, err := idemredis.New(rdb, &idemredis.Config{Prefix: "reshard", MinReplicas: minReplicas, ReplicaTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Close)
	ctx := context.Background()
	const lock, retention = time.Minute, time.Hour
	scope := func(i int) idemstore.Scope { return idemstore.Scope{ClientID: "alice", Key: fmt.Sprintf("k%d", i)} }
	body := func(i int) string { return fmt.Sprintf(`{"n":%d}`, i) }
	// put claims key i and completes it, or checks its replay.
	put := func(i int) error {
		p := claimParams(scope(i), body(i), t0, lock, retention)
		res, err := store.Claim(ctx, p)
		if err != nil {
			return err
		}
		if res.Lease != nil {
			return res.Lease.Complete(ctx, &idemstore.Response{StatusCode: 201, Body: []byte(body(i))})
		}
		if res.Record.Status != idemstore.StatusCompleted || string(res.Record.Response.Body) != body(i) {
			return fmt.Errorf("key %d: %q %q, want its completed response", i, res.Record.Status, res.Record.Response.Body)
		}
		return nil
	}
	const before = 3000
	for i := range before {
		if err := put(i); err != nil {
			t.Fatal(err)
		}
	}

	id := func(addr string) string {
		out, err := exec.Command("redis-cli", "-h", "127.0.0.1", "-p", strings.Split(addr, ":")[1], "cluster", "myid").Output()
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(out))
	}
	// redis-cli --cluster create made the first three nodes the primaries.
	from, to := id(addrs[0]), id(addrs[1])
	reshard := exec.Command("redis-cli", "--cluster", "reshard", addrs[0], "--cluster-from", from, "--cluster-to", to,
		"--cluster-slots", "1500", "--cluster-yes", "--cluster-pipeline", "10")
	var next atomic.Int64
	next.Store(before)
	var stop atomic.Bool
	var wg sync.WaitGroup
	errs := make(chan error, 100)
	var done atomic.Int64
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; !stop.Load(); n++ {
				// Half new keys, half replays of old ones.
				i := n * 7919 % before
				if n%2 == 0 {
					i = int(next.Add(1))
				}
				if err := put(i); err != nil {
					select {
					case errs <- fmt.Errorf("key %d: %w", i, err):
					default:
					}
				}
				done.Add(1)
			}
		}()
	}
	out, err := reshard.CombinedOutput()
	stop.Store(true)
	wg.Wait()
	close(errs)
	if err != nil {
		t.Fatalf("reshard: %v\n%s", err, out)
	}
	t.Logf("moved 1500 slots during %d operations", done.Load())
	for err := range errs {
		t.Error(err)
	}
	// Every key drawn was claimed (and any failure reported above); the
	// new ones are numbered from before+1.
	last := int(next.Load())
	for i := range last + 1 {
		if i == before {
			continue
		}
		rec, err := store.GetKey(ctx, scope(i))
		if err != nil || rec.Status != idemstore.StatusCompleted || string(rec.Response.Body) != body(i) {
			t.Errorf("key %d after the reshard: %+v, %v; want its completed response", i, rec, err)
		}
	}
}
