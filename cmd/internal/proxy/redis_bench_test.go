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

// BenchmarkProxyStores compares, in one run, requests through a plain
// httputil.ReverseProxy and through idemproxy on a single Redis, on a
// Redis Cluster (MinReplicas 0, and 1: "cluster-wait1") and on
// PostgreSQL, each in front of the same upstream (at each of
// upstreamCosts a request), from 8 client goroutines per CPU: a new key each request, and
// a replay of a completed key, which never reaches the upstream. Each
// reports req/s and the p50 and p99 latency in µs; divide req/s by
// plain's for the ratios.
//
// The route is the proxy's default, the hold policy: a new key costs a
// claim, the "forwarded" recovery point and a completion, three store
// round trips; a replay costs one claim. The Redis servers are the
// benchmark's own, without persistence; PostgreSQL is the shared server,
// a database of the benchmark's own.
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
	// Both proxies keep as many idle connections to the upstream as the
	// benchmark has clients, as a deployment would (the default, 2, makes
	// both open a connection for most requests).
	transport := func() http.RoundTripper {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.MaxIdleConnsPerHost = 64
		t.DisableCompression = true
		return t
	}
	proxyOn := func(b *testing.B, store idemstore.Store) http.Handler {
		p, err := New(&Config{Upstream: target, Store: store, Identity: id, Transport: transport(),
			Idem: idem.Config{Logger: slog.New(slog.DiscardHandler)}})
		if err != nil {
			b.Fatal(err)
		}
		return p
	}
	redisStore := func(b *testing.B, rdb redis.UniversalClient, minReplicas int) idemstore.Store {
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
	var cluster *redistest.Cluster
	top := b // the cluster serves two targets
	clusterClient := func() redis.UniversalClient {
		if cluster == nil {
			cluster = redistest.StartCluster(top, 5*time.Second)
		}
		return redis.NewClusterClient(&redis.ClusterOptions{Addrs: strings.Split(cluster.Seeds(), ",")})
	}
	targets := []struct {
		name    string
		handler func(b *testing.B) http.Handler
	}{
		{"plain", func(*testing.B) http.Handler {
			rp := httputil.NewSingleHostReverseProxy(target)
			rp.Transport = transport()
			return rp
		}},
		{"redis", func(b *testing.B) http.Handler {
			return proxyOn(b, redisStore(b, redis.NewClient(&redis.Options{Addr: redistest.Start(b)}), 0))
		}},
		{"cluster", func(b *testing.B) http.Handler { return proxyOn(b, redisStore(b, clusterClient(), 0)) }},
		{"cluster-wait1", func(b *testing.B) http.Handler { return proxyOn(b, redisStore(b, clusterClient(), 1)) }},
		{"postgres", func(b *testing.B) http.Handler {
			s, err := idempg.New(pgtest.NewPool(b), &idempg.Config{Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				b.Fatal(err)
			}
			if err := s.Migrate(context.Background()); err != nil {
				b.Fatal(err)
			}
			return proxyOn(b, s)
		}},
	}
	var seq atomic.Int64
	for _, tg := range targets {
		b.Run(tg.name, func(b *testing.B) {
			srv := httptest.NewServer(tg.handler(b))
			b.Cleanup(srv.Close)
			for _, c := range upstreamCosts {
				for _, mode := range []string{"new", "replay"} {
					b.Run(fmt.Sprintf("upstream=%v/%s", c, mode), func(b *testing.B) {
						cost.Store(int64(c))
						benchPosts(b, srv.URL, mode, &seq)
					})
				}
			}
		})
	}
	if n := executions.Load(); n == 0 {
		b.Fatal("the upstream executed nothing")
	}
}

// benchPosts posts b.N requests to base from 8 goroutines per CPU, each a
// new key (mode "new") or a replay of one of 64 keys completed first
// ("replay"), and reports req/s and the p50 and p99 latency.
func benchPosts(b *testing.B, base, mode string, seq *atomic.Int64) {
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}}
	defer client.CloseIdleConnections()
	post := func(key string) {
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
	const replayKeys = 64
	run := seq.Add(1)
	if mode == "replay" {
		for i := range replayKeys {
			post(fmt.Sprintf("r%d-%d", run, i))
		}
	}
	var mu sync.Mutex
	var lat []time.Duration
	b.SetParallelism(8)
	b.ResetTimer()
	began := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		var mine []time.Duration
		for i := 0; pb.Next(); i++ {
			key := fmt.Sprintf("n%d-%d", run, seq.Add(1))
			if mode == "replay" {
				key = fmt.Sprintf("r%d-%d", run, i%replayKeys)
			}
			t0 := time.Now()
			post(key)
			mine = append(mine, time.Since(t0))
		}
		mu.Lock()
		lat = append(lat, mine...)
		mu.Unlock()
	})
	elapsed := time.Since(began)
	b.StopTimer()
	slices.Sort(lat)
	if len(lat) > 0 {
		b.ReportMetric(float64(len(lat))/elapsed.Seconds(), "req/s")
		b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
		b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
	}
}
