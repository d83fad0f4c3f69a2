package proxy

import (
	"context"
	"net/http"
	"strconv"
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

// TestRedisRoundTripsPerKey counts the scripts a request runs on Redis:
// on a hold route a new key costs two (the claim, which saves the
// "forwarded" point of the key it makes, and the completion), a replay
// one.
func TestRedisRoundTripsPerKey(t *testing.T) {
	t.Parallel()
	rdb := redis.NewClient(&redis.Options{Addr: redistest.Start(t)})
	t.Cleanup(func() { rdb.Close() })
	store, err := idemredis.New(rdb, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Close)
	ctx := context.Background()
	if err := store.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	up := newUpstream(t, false)
	base := setupOn(t, store, up, nil) // the default policy: hold
	scripts := func(t *testing.T, key string) int {
		t.Helper()
		if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		if resp := send(t, "POST", base+"/v1/charges", key, `{"amount":1}`); resp.status != http.StatusCreated {
			t.Fatalf("%s: %d %q", key, resp.status, resp.body)
		}
		info, err := rdb.Info(ctx, "commandstats").Result()
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for line := range strings.SplitSeq(info, "\r\n") {
			name, stats, _ := strings.Cut(line, ":")
			if name != "cmdstat_evalsha" && name != "cmdstat_eval" {
				continue
			}
			for f := range strings.SplitSeq(stats, ",") {
				k, v, _ := strings.Cut(f, "=")
				c, _ := strconv.Atoi(v)
				switch k {
				case "calls":
					n += c
				case "failed_calls":
					n -= c // NOSCRIPT, then EVAL
				}
			}
		}
		return n
	}
	scripts(t, "warm-up") // loads the scripts
	if n := scripts(t, "k1"); n != 2 {
		t.Errorf("a new key ran %d scripts; want 2, the claim and the completion", n)
	}
	if n := scripts(t, "k1"); n != 1 {
		t.Errorf("a replay ran %d scripts; want 1, the claim", n)
	}
}
