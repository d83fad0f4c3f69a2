package proxy

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/cmd/internal/redistest"
	"github.com/idemkit/idem/idempg"
	"github.com/idemkit/idem/idemredis"
	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/internal/pgtest"
)

// upstreamCosts are the works of the benchmarks' upstream per request: a
// wait, as for a service that calls its database (2 ms) or a payment
// processor (20 ms) on another host, with no CPU of the machine the proxy
// runs on.
var upstreamCosts = []time.Duration{2 * time.Millisecond, 20 * time.Millisecond}

// BenchmarkProxyStores compares requests through a plain
// httputil.ReverseProxy and through idemproxy on a single Redis
// ("redis"), on a Redis Cluster with MinReplicas 0 ("cluster") and 1
// ("cluster-wait1"), and on PostgreSQL ("postgres"), each in front of the
// same upstream, at each of upstreamCosts: a new key each request, and a
// replay of a completed key, which never reaches the upstream. The
// targets take turns: each iteration sends a batch of 256 requests, from
// 16 goroutines, to each target in turn, so that all of them see the same
// load of the machine; run it with a fixed count, -benchtime 20x. Each
// reports, per target, req/s, its ratio to plain's (TARGET-x), and the
// p50 and p99 latency in µs.
//
// The route is the proxy's default, the hold policy: a new key costs a
// claim, the "forwarded" recovery point and a completion, three store
// round trips on PostgreSQL and two on Redis, whose claim saves the point
// (idemredis.Store.ClaimAt); a replay costs one claim. The client, both
// proxies and the upstream are this one process, on GOMAXPROCS cores
// shared with the Redis servers: the CPU a proxy spends slows the client
// and the upstream too. BenchmarkProxyRequest counts that CPU. The Redis servers are the
// benchmark's own, without persistence; PostgreSQL is the shared server,
// a database of the benchmark's own. Both proxies keep 64 idle
// connections to the upstream.
func BenchmarkProxyStores(b *testing.B) {
	var executions, cost atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		executions.Add(1)
		time.Sleep(time.Duration(cost.Load()))
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, `{"id":"ch_1","object":"charge","amount":100,"currency":"usd","status":"succeeded"}`)
	}))
	b.Cleanup(up.Close)
	target, _ := url.Parse(up.URL)
	id, err := CredentialIdentity([]byte(testSecret))
	if err != nil {
		b.Fatal(err)
	}
	transport := func() http.RoundTripper {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.MaxIdleConnsPerHost = 64
		t.DisableCompression = true
		return t
	}
	proxyOn := func(store idemstore.Store) http.Handler {
		p, err := New(&Config{Upstream: target, Store: store, Identity: id, Transport: transport(),
			Idem: idem.Config{Logger: slog.New(slog.DiscardHandler)}})
		if err != nil {
			b.Fatal(err)
		}
		return p
	}
	redisStore := func(rdb redis.UniversalClient, minReplicas int) idemstore.Store {
		b.Cleanup(func() { rdb.Close() })
		s, err := idemredis.New(rdb, &idemredis.Config{MinReplicas: minReplicas})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(s.Close)
		if err := s.Migrate(context.Background()); err != nil {
			b.Fatal(err)
		}
		return s
	}
	cluster := redistest.StartCluster(b, 5*time.Second)
	clusterClient := func() redis.UniversalClient {
		return redis.NewClusterClient(&redis.ClusterOptions{Addrs: strings.Split(cluster.Seeds(), ",")})
	}
	pg, err := idempg.New(pgtest.NewPool(b), &idempg.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	if err := pg.Migrate(context.Background()); err != nil {
		b.Fatal(err)
	}
	plain := httputil.NewSingleHostReverseProxy(target)
	plain.Transport = transport()
	targets := []struct {
		name    string
		handler http.Handler
	}{
		{"plain", plain},
		{"redis", proxyOn(redisStore(redis.NewClient(&redis.Options{Addr: redistest.Start(b)}), 0))},
		{"cluster", proxyOn(redisStore(clusterClient(), 0))},
		{"cluster-wait1", proxyOn(redisStore(clusterClient(), 1))},
		{"postgres", proxyOn(pg)},
	}
	bases := make([]string, len(targets))
	for i, tg := range targets {
		srv := httptest.NewServer(tg.handler)
		b.Cleanup(srv.Close)
		bases[i] = srv.URL
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}}
	b.Cleanup(client.CloseIdleConnections)
	var seq atomic.Int64
	post := func(b *testing.B, base, key string) {
		req, _ := http.NewRequest("POST", base+"/v1/charges", strings.NewReader(`{"amount":100,"currency":"usd"}`))
		req.Header.Set("Authorization", "Bearer sk_test_bench")
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", key)
		resp, err := client.Do(req)
		if err != nil {
			b.Error(err)
			return
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated {
			b.Errorf("%s: %d", key, resp.StatusCode)
		}
	}
	const batch, goroutines, replayKeys = 256, 16, 64
	for _, c := range upstreamCosts {
		for _, mode := range []string{"new", "replay"} {
			b.Run(fmt.Sprintf("upstream=%v/%s", c, mode), func(b *testing.B) {
				cost.Store(int64(c))
				run := seq.Add(1)
				if mode == "replay" {
					for _, base := range bases {
						for i := range replayKeys {
							post(b, base, fmt.Sprintf("r%d-%d", run, i))
						}
					}
				}
				spent := make([]time.Duration, len(targets))
				lat := make([][]time.Duration, len(targets))
				b.ResetTimer()
				for range b.N {
					for t, base := range bases {
						var next atomic.Int64
						var mu sync.Mutex
						var wg sync.WaitGroup
						began := time.Now()
						for range goroutines {
							wg.Add(1)
							go func() {
								defer wg.Done()
								var mine []time.Duration
								for i := next.Add(1); i <= batch; i = next.Add(1) {
									key := fmt.Sprintf("n%d-%d", run, seq.Add(1))
									if mode == "replay" {
										key = fmt.Sprintf("r%d-%d", run, i%replayKeys)
									}
									t0 := time.Now()
									post(b, base, key)
									mine = append(mine, time.Since(t0))
								}
								mu.Lock()
								lat[t] = append(lat[t], mine...)
								mu.Unlock()
							}()
						}
						wg.Wait()
						spent[t] += time.Since(began)
					}
				}
				b.StopTimer()
				plainRate := float64(b.N*batch) / spent[0].Seconds()
				for t, tg := range targets {
					rate := float64(b.N*batch) / spent[t].Seconds()
					slices.Sort(lat[t])
					b.ReportMetric(rate, tg.name+"-req/s")
					if t > 0 {
						b.ReportMetric(rate/plainRate, tg.name+"-x")
					}
					b.ReportMetric(float64(lat[t][len(lat[t])/2].Microseconds()), tg.name+"-p50-µs")
					b.ReportMetric(float64(lat[t][len(lat[t])*99/100].Microseconds()), tg.name+"-p99-µs")
				}
			})
		}
	}
	if executions.Load() == 0 {
		b.Fatal("the upstream executed nothing")
	}
}
