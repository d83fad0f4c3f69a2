package proxy

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem/cmd/internal/redistest"
	"github.com/idemkit/idem/idemredis"
	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/internal/check"
)

// Every test that runs on each of storeKinds runs on Redis too: a server
// of the test's own.
func init() { storeKinds = append(storeKinds, "redis") }

// newRedisStore returns a migrated idemredis store on a redis-server of
// the test's own.
func newRedisStore(t *testing.T) idemstore.Store {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: redistest.Start(t)})
	t.Cleanup(func() { rdb.Close() })
	s, err := idemredis.New(rdb, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return s
}

// TestCheckPassesThroughProxyOnCluster runs idem check through the proxy on
// a Redis Cluster (three primaries with a replica each, MinReplicas 1), in
// front of an upstream with no idempotency: every check passes, and the
// upstream executed each key once.
func TestCheckPassesThroughProxyOnCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a six-node cluster")
	}
	t.Parallel()
	cluster := redistest.StartCluster(t, 5*time.Second)
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: strings.Split(cluster.Seeds(), ",")})
	t.Cleanup(func() { rdb.Close() })
	store, err := idemredis.New(rdb, &idemredis.Config{MinReplicas: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Close)
	if err := store.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	up := newUpstream(t, false)
	report := runCheck(t, setupOn(t, store, up, nil)+"/v1/charges")
	for _, r := range report.Results {
		if r.Outcome != check.Pass {
			t.Errorf("check %s: %s (%s)", r.Name, r.Outcome, r.Summary)
		}
	}
	if !report.Passed() {
		t.Fatal("idem check failed through the proxy on the cluster")
	}
	if most, keys := up.maxChargesPerClientKey(); most != 1 || keys < 5 {
		t.Fatalf("upstream charged up to %d times for one client's key, over %d keys; want exactly once each", most, keys)
	}
}
