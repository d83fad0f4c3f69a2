package proxy

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/cmd/internal/redistest"
	"github.com/idemkit/idem/idemredis"
	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/internal/race"
)

// TestRedisFailover measures what a failover costs idemproxy on Redis
// Cluster: a storm of requests, each retried with its key until it gets a
// final answer, through three proxies (each with its own cluster client)
// in front of one upstream that does not honour keys and counts its
// executions per key, while each primary in turn is killed (SIGKILL), its
// replica promoted by the cluster, and the killed node started again
// (empty, it rejoins as the new primary's replica). Then every key answered 201 is
// sent once more.
//
// An answer is acknowledged when the store reported its completion done
// (the test wraps the store's leases to see Complete's result). The proxy
// streams the upstream's answer to the client before it completes the key
// (idem.StreamResponse), so a client may get a 201 whose completion then
// failed, because the primary died under it or too few replicas
// acknowledged it: its retry gets the held outcome-unknown problem, which
// is true, or, when the completion's answer was lost but it had landed,
// the same answer replayed; the test counts these apart.
//
// With MinReplicas 1 (every claim, checkpoint and completion waits for
// the replica) no key is executed twice upstream and no acknowledged
// answer is lost; the test fails otherwise. With MinReplicas 0 it
// reports how many were (a claim or completion that reached only the
// killed primary is lost with it, and the retry runs the key again), the
// measured cost of that setting.
func TestRedisFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a six-node cluster and kills a primary")
	}
	for _, n := range []int{0, 1} {
		t.Run(fmt.Sprintf("MinReplicas%d", n), func(t *testing.T) {
			if n == 0 && race.Enabled {
				t.Skip("a measurement, which asserts little; the race detector makes it slow")
			}
			failoverStorm(t, n)
		})
	}
}

// failoverFigures are what a storm measured.
type failoverFigures struct {
	keys, acked, held, unanswered int
	twice, ackedLost              int   // keys executed twice upstream; acknowledged answers not replayed
	streamedUnstored              int   // 201s whose completion failed; their retry is held
	streamedReplayed              int   // of those, completions that had landed though their answer was lost
	streamedRerun                 int   // of those, keys whose claim the failover lost: the retry ran again (MinReplicas 0 only)
	unavailable, inFlight         int64 // 503 and 409 answers along the way
	promotions                    []time.Duration
}

// completions records, per key, whether a completion of it was stored.
type completions struct{ m sync.Map }

// store wraps s so that its leases record their completions.
func (c *completions) store(s *idemredis.Store) idemstore.Store { return &recordingStore{s, c} }

func (c *completions) stored(key string) bool { _, ok := c.m.Load(key); return ok }

type recordingStore struct {
	*idemredis.Store
	c *completions
}

func (s *recordingStore) Claim(ctx context.Context, p idemstore.ClaimParams) (idemstore.ClaimResult, error) {
	return s.ClaimAt(ctx, p, idemstore.Recovery{})
}

// ClaimAt is the proxy's claim on hold routes (see keyStore); without it,
// the embedded store's would hand out leases that record nothing.
func (s *recordingStore) ClaimAt(ctx context.Context, p idemstore.ClaimParams, at idemstore.Recovery) (idemstore.ClaimResult, error) {
	res, err := s.Store.ClaimAt(ctx, p, at)
	if res.Lease != nil {
		res.Lease = &recordingLease{res.Lease.(idemstore.RecoveryLease), p.Scope.Key, s.c}
	}
	return res, err
}

type recordingLease struct {
	idemstore.RecoveryLease
	key string
	c   *completions
}

func (l *recordingLease) Complete(ctx context.Context, resp *idemstore.Response) error {
	err := l.RecoveryLease.Complete(ctx, resp)
	if err == nil {
		l.c.m.Store(l.key, true)
	}
	return err
}

// quietRedis drops go-redis's own log lines (its pool's failed dials to
// the killed primary).
type quietRedis struct{}

func (quietRedis) Printf(context.Context, string, ...any) {}

var quietOnce sync.Once

func failoverStorm(t *testing.T, minReplicas int) {
	quietOnce.Do(func() { redis.SetLogger(quietRedis{}) })
	var done completions
	cluster := redistest.StartCluster(t, time.Second)

	var mu sync.Mutex
	executions := map[string]int{}
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		key := r.Header.Get("Idempotency-Key")
		mu.Lock()
		executions[key]++
		n := executions[key]
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"key":%q,"execution":%d}`, key, n)
	}))
	t.Cleanup(up.Close)
	target, _ := url.Parse(up.URL)
	id, err := CredentialIdentity([]byte(testSecret))
	if err != nil {
		t.Fatal(err)
	}
	var proxies []string
	for range 3 {
		rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: strings.Split(cluster.Seeds(), ",")})
		t.Cleanup(func() { rdb.Close() })
		store, err := idemredis.New(rdb, &idemredis.Config{Prefix: "failover", MinReplicas: minReplicas, ReplicaTimeout: 500 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(store.Close)
		if err := store.Migrate(context.Background()); err != nil {
			t.Fatal(err)
		}
		p, err := New(&Config{Upstream: target, Store: done.store(store), Identity: id, UpstreamTimeout: time.Second,
			Idem: idem.Config{Logger: slog.New(slog.DiscardHandler), LockTimeout: 2 * time.Second}})
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(p)
		t.Cleanup(srv.Close)
		proxies = append(proxies, srv.URL)
	}

	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	t.Cleanup(client.CloseIdleConnections)
	var unavailable, inFlight atomic.Int64
	// send posts key's request to a proxy and returns the status, the
	// body and whether it was a replay; status 0 is a transport error.
	send := func(i int, key string) (int, string, bool) {
		req, _ := http.NewRequest("POST", proxies[i%len(proxies)]+"/v1/charges", strings.NewReader(`{"amount":100,"key":"`+key+`"}`))
		req.Header.Set("Authorization", "Bearer sk_test_failover")
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", key)
		resp, err := client.Do(req)
		if err != nil {
			return 0, "", false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), resp.Header.Get("Idempotent-Replayed") == "true"
	}
	// final sends key until it gets a final answer (not 409, 503 or a
	// transport error), for 60 s at most; "" when it got none.
	final := func(start int, key string) (int, string) {
		deadline := time.Now().Add(60 * time.Second)
		for i := start; time.Now().Before(deadline); i++ {
			status, body, _ := send(i, key)
			switch status {
			case http.StatusConflict:
				inFlight.Add(1)
			case http.StatusServiceUnavailable, 0:
				unavailable.Add(1)
			default:
				return status, body
			}
			time.Sleep(20 * time.Millisecond) // a retry's pause
		}
		return 0, ""
	}

	type answer struct {
		status int
		body   string
	}
	var amu sync.Mutex
	answers := map[string]answer{}
	var stop atomic.Bool
	var wg sync.WaitGroup
	const workers = 12
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; !stop.Load(); n++ {
				key := fmt.Sprintf("w%d-%d", w, n)
				status, body := final(w+n, key)
				amu.Lock()
				answers[key] = answer{status, body}
				amu.Unlock()
			}
		}()
	}
	// Each of the three first primaries in turn is killed, its replica
	// promoted, and the node started again.
	var promotions []time.Duration
	for _, victim := range cluster.Nodes[:3] {
		replica := cluster.ReplicaOf(victim)
		time.Sleep(1500 * time.Millisecond) // the storm runs before the kill
		killed := time.Now()
		victim.Kill()
		redistest.Poll(t, "the replica of the killed primary to be promoted", replica.IsPrimary)
		promotions = append(promotions, time.Since(killed).Round(10*time.Millisecond))
		victim.Start() // empty, it rejoins as a replica
		redistest.Poll(t, "the restarted node to follow the new primary", func() bool {
			out, err := replica.TryCli("info", "replication")
			return err == nil && strings.Contains(out, "connected_slaves:1") && strings.Contains(out, "state=online")
		})
	}
	time.Sleep(time.Second) // the storm runs on after the failover
	stop.Store(true)
	wg.Wait()

	f := failoverFigures{keys: len(answers), promotions: promotions}
	for key, a := range answers {
		switch {
		case a.status == http.StatusCreated && !done.stored(key):
			// Streamed, then its completion failed: its retry is held, or,
			// when the completion's outcome was unknown and it had in fact
			// landed, gets the same answer replayed.
			f.streamedUnstored++
			status, body := final(0, key)
			switch {
			case status == http.StatusBadGateway && strings.Contains(body, "The key is held"):
			case status == http.StatusCreated && body == a.body:
				f.streamedReplayed++
			case minReplicas == 0 && status == http.StatusCreated:
				// The claim had reached only the killed primary, so the
				// promoted replica never saw it: the completion found no
				// claim and the retry claimed the key afresh and ran it
				// again. That is what MinReplicas 0 costs, counted below.
				f.streamedRerun++
			default:
				t.Errorf("key %s answered 201 %q but not stored; sent again: %d %q, want it held or replayed", key, a.body, status, body)
			}
		case a.status == http.StatusCreated:
			f.acked++
			// An acknowledged answer must replay as it was.
			if status, body := final(0, key); status != http.StatusCreated || body != a.body {
				f.ackedLost++
				t.Logf("acknowledged %s %q; sent again: %d %q", key, a.body, status, body)
			}
		case a.status == http.StatusBadGateway && strings.Contains(a.body, "The key is held"):
			f.held++
		case a.status == 0:
			f.unanswered++
		default:
			t.Errorf("key %s: unexpected answer %d %q", key, a.status, a.body)
		}
	}
	mu.Lock()
	for key, n := range executions {
		if n > 1 {
			f.twice++
			t.Logf("key %s executed %d times upstream", key, n)
		}
	}
	mu.Unlock()
	f.unavailable, f.inFlight = unavailable.Load(), inFlight.Load()
	t.Logf("failover with MinReplicas %d: %d keys through 3 proxies: %d answered 201 and stored, %d answered 201 but not stored (streamed, then the completion failed; %d of them replayed, having landed; %d run again, their claim lost), "+
		"%d held (outcome unknown), %d unanswered; %d executed twice upstream, %d acknowledged answers lost; %d answers 503 and %d answers 409 along the way; 3 primaries killed in turn, each replica promoted after %v",
		minReplicas, f.keys, f.acked, f.streamedUnstored, f.streamedReplayed, f.streamedRerun, f.held, f.unanswered, f.twice, f.ackedLost, f.unavailable, f.inFlight, f.promotions)
	if f.unanswered > 0 {
		t.Errorf("%d keys got no final answer in 60 s", f.unanswered)
	}
	if minReplicas > 0 && (f.twice > 0 || f.ackedLost > 0) {
		t.Errorf("with MinReplicas %d: %d keys executed twice, %d acknowledged answers lost; want none", minReplicas, f.twice, f.ackedLost)
	}
}
