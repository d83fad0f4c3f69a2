//go:build unix

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
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/cmd/internal/redistest"
	"github.com/idemkit/idem/idemredis"
)

// BenchmarkProxyRequest sends one request at a time, so that it counts
// the work a request costs, not how fast a loaded machine turns it
// around: through a plain httputil.ReverseProxy ("plain"), and through
// idemproxy on a Redis of its own with a new key each request ("redis-new")
// and with a replay of a completed key ("redis-replay"), in front of an
// upstream that answers at once, on the default route (hold). Each
// reports the CPU time of this process (the client, the proxy and the
// upstream; the same client and upstream for all three) and of the Redis
// server, in µs per request, and the Redis commands per request (those a
// script runs count too). Under callgrind it gives instructions per
// request: run it with -benchtime Nx and 2Nx and take the difference (see
// docs/proxy.md, "Benchmarks"). IDEM_BENCH_REDIS=host:port runs it on
// that Redis, under a prefix of its own, instead of a server it starts:
// callgrind fails on the signal the end of a child process sends.
func BenchmarkProxyRequest(b *testing.B) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
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
	addr := os.Getenv("IDEM_BENCH_REDIS")
	if addr == "" {
		addr = redistest.Start(b)
	}
	rdb := redis.NewClient(&redis.Options{Addr: addr, Protocol: 2})
	b.Cleanup(func() { rdb.Close() })
	store, err := idemredis.New(rdb, &idemredis.Config{Prefix: fmt.Sprintf("bench-%d", time.Now().UnixNano())})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(store.Close)
	if err := store.Migrate(context.Background()); err != nil {
		b.Fatal(err)
	}
	p, err := New(&Config{Upstream: target, Store: store, Identity: id, Transport: transport(),
		Idem: idem.Config{Logger: slog.New(slog.DiscardHandler)}})
	if err != nil {
		b.Fatal(err)
	}
	plain := httputil.NewSingleHostReverseProxy(target)
	plain.Transport = transport()
	base := map[string]string{}
	for name, h := range map[string]http.Handler{"plain": plain, "idemproxy": p} {
		srv := httptest.NewServer(h)
		b.Cleanup(srv.Close)
		base[name] = srv.URL
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	b.Cleanup(client.CloseIdleConnections)
	post := func(b *testing.B, base, key string) {
		req, _ := http.NewRequest("POST", base+"/v1/charges", strings.NewReader(`{"amount":100,"currency":"usd"}`))
		req.Header.Set("Authorization", "Bearer sk_test_bench")
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", key)
		resp, err := client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated {
			b.Fatalf("%s: %d", key, resp.StatusCode)
		}
	}
	redisCPU := func(b *testing.B) (time.Duration, int64) {
		info, err := rdb.Info(context.Background(), "cpu", "stats").Result()
		if err != nil {
			b.Fatal(err)
		}
		var cpu time.Duration
		var cmds int64
		for line := range strings.SplitSeq(info, "\r\n") {
			name, v, _ := strings.Cut(line, ":")
			switch name {
			case "used_cpu_user", "used_cpu_sys":
				s, _ := strconv.ParseFloat(v, 64)
				cpu += time.Duration(s * float64(time.Second))
			case "total_commands_processed":
				cmds, _ = strconv.ParseInt(v, 10, 64)
			}
		}
		return cpu, cmds + 1 // this INFO
	}
	var seq int
	for _, mode := range []string{"plain", "redis-new", "redis-replay"} {
		b.Run(mode, func(b *testing.B) {
			to := base["idemproxy"]
			if mode == "plain" {
				to = base["plain"]
			}
			seq++
			replayKey := fmt.Sprintf("replay-%d", seq)
			post(b, to, replayKey) // warms the connections; the replay's key
			rcpu0, cmds0 := redisCPU(b)
			cpu0 := processCPU(b)
			b.ResetTimer()
			for i := range b.N {
				key := replayKey
				if mode != "redis-replay" {
					key = fmt.Sprintf("new-%d-%d", seq, i)
				}
				post(b, to, key)
			}
			b.StopTimer()
			cpu := processCPU(b) - cpu0
			rcpu, cmds := redisCPU(b)
			n := float64(b.N)
			b.ReportMetric(float64(cpu.Microseconds())/n, "cpu-µs/req")
			b.ReportMetric(float64((rcpu-rcpu0).Microseconds())/n, "redis-cpu-µs/req")
			b.ReportMetric(float64(cmds-cmds0-1)/n, "redis-cmds/req") // less the first INFO
		})
	}
}

// processCPU is the user and system CPU time this process has used.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
