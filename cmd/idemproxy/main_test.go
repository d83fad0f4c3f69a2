package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/cmd/internal/mysqltest"
	"github.com/idemkit/idem/cmd/internal/redistest"
	"github.com/idemkit/idem/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// envOf is an environment for run.
func envOf(kv map[string]string) func(string) (string, bool) {
	return func(name string) (string, bool) {
		v, ok := kv[name]
		return v, ok
	}
}

func TestFlags(t *testing.T) {
	t.Parallel()
	t.Run("Help", func(t *testing.T) {
		var stderr strings.Builder
		err := run(context.Background(), []string{"-h"}, io.Discard, &stderr,
			envOf(map[string]string{"IDEMPROXY_SECRET": "s3cret-s3cret-s3cret", "IDEMPROXY_DB": "postgres://u:pa55word@db/keys"}))
		if !errors.Is(err, flag.ErrHelp) {
			t.Fatalf("err %v, want flag.ErrHelp", err)
		}
		if strings.Contains(stderr.String(), "s3cret") || strings.Contains(stderr.String(), "pa55word") {
			t.Errorf("-h printed a secret from the environment:\n%s", stderr.String())
		}
		for _, want := range []string{"Usage: idemproxy", "-route", "IDEMPROXY_ROUTES", "IDEMPROXY_SECRET", "-client-header", "-outcome-unknown", "-admin-addr", "-db",
			"-probe-url", "IDEMPROXY_PROBE_URL", "-probe-timeout", "IDEMPROXY_PROBE_TIMEOUT", "probe [PROBE-URL]"} {
			if !strings.Contains(stderr.String(), want) {
				t.Errorf("-h does not mention %s", want)
			}
		}
	})
	bad := []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{"NoUpstream", nil, nil, "-upstream is required"},
		{"RelativeUpstream", []string{"-upstream", "/x", "-secret", strings.Repeat("s", 16)}, nil, "absolute http"},
		{"NoSecret", []string{"-upstream", "http://127.0.0.1:1"}, nil, "-secret"},
		{"ShortSecret", []string{"-upstream", "http://127.0.0.1:1"}, map[string]string{"IDEMPROXY_SECRET": "short"}, "at least 16 bytes"},
		{"BadRoute", []string{"-upstream", "http://127.0.0.1:1", "-client-header", "X-Client"}, map[string]string{"IDEMPROXY_ROUTES": "GET /v1/*"}, "idempotent by definition"},
		{"BadEnvDuration", []string{"-upstream", "http://127.0.0.1:1"}, map[string]string{"IDEMPROXY_UPSTREAM_TIMEOUT": "soon"}, "IDEMPROXY_UPSTREAM_TIMEOUT"},
		{"ProbeByDefault", []string{"-upstream", "http://127.0.0.1:1", "-client-header", "X-Client", "-db", "sqlite:" + filepath.Join(t.TempDir(), "k.db"), "-outcome-unknown", "probe"}, nil, "no default policy"},
		{"ProbeWithoutURL", []string{"-upstream", "http://127.0.0.1:1", "-client-header", "X-Client", "-db", "sqlite:" + filepath.Join(t.TempDir(), "k.db"), "-route", "POST /v1/refunds probe"}, nil, "status URL"},
		{"BadProbeURL", []string{"-upstream", "http://127.0.0.1:1", "-client-header", "X-Client", "-db", "sqlite:" + filepath.Join(t.TempDir(), "k.db")}, map[string]string{"IDEMPROXY_PROBE_URL": "/v1/requests"}, "{key}"},
		{"ProbeLeaseTooShort", []string{"-upstream", "http://127.0.0.1:1", "-client-header", "X-Client", "-db", "sqlite:" + filepath.Join(t.TempDir(), "k.db"), "-route", "POST /v1/refunds probe /s/{key}", "-probe-timeout", "40s"}, nil, "probe timeout"},
		{"LeaseShorterThanForward", []string{"-upstream", "http://127.0.0.1:1", "-client-header", "X-Client", "-db", "sqlite:" + filepath.Join(t.TempDir(), "k.db"), "-upstream-timeout", "1m", "-lock-timeout", "30s"}, nil, "lock timeout"},
	}
	for _, c := range bad {
		t.Run(c.name, func(t *testing.T) {
			err := run(context.Background(), c.args, io.Discard, io.Discard, envOf(c.env))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err %v, want one mentioning %q", err, c.want)
			}
		})
	}
}

// started runs the proxy and returns its address and its admin address.
func started(t *testing.T, args []string, env map[string]string) (addr, admin string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	out, w := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, args, w, io.Discard, envOf(env))
		w.Close()
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	})
	lines := bufio.NewScanner(out)
	for (addr == "" || admin == "") && lines.Scan() {
		line := lines.Text()
		if a, ok := strings.CutPrefix(line, "idemproxy: listening on "); ok {
			addr, _, _ = strings.Cut(a, ",")
		}
		if a, ok := strings.CutPrefix(line, "idemproxy: admin on "); ok {
			admin, _, _ = strings.Cut(a, " ")
		}
	}
	if addr == "" || admin == "" {
		select {
		case err := <-done:
			done <- err
			t.Fatalf("the proxy did not start: %v", err)
		default:
			t.Fatal("the proxy printed no addresses")
		}
	}
	go io.Copy(io.Discard, out)
	return addr, admin
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestRun starts idemproxy from flags and environment on each store, in
// front of a counting upstream: a retry is a replay, and the admin listener
// serves readiness and metrics. On Redis, whose keys expire by themselves,
// no purge runs.
func TestRun(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"sqlite", "postgres", "mysql", "redis"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			var calls atomic.Int64
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				n := calls.Add(1)
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusCreated)
				fmt.Fprintf(w, `{"id":"obj_%d"}`, n)
			}))
			t.Cleanup(up.Close)
			db := testDB(t, kind)
			addr, admin := started(t,
				[]string{"-listen", "127.0.0.1:0", "-admin-addr", "127.0.0.1:0", "-route", "POST /v1/*"},
				map[string]string{"IDEMPROXY_UPSTREAM": up.URL, "IDEMPROXY_DB": db, "IDEMPROXY_SECRET": strings.Repeat("k", 32)})

			var bodies []string
			for i := range 2 {
				req, _ := http.NewRequest("POST", addr+"/v1/things", strings.NewReader(`{"name":"a"}`))
				req.Header.Set("Authorization", "Bearer tok")
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Idempotency-Key", "run-1")
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusCreated || (i == 1 && resp.Header.Get("Idempotent-Replayed") != "true") {
					t.Fatalf("request %d: %d %v %s", i, resp.StatusCode, resp.Header, b)
				}
				bodies = append(bodies, string(b))
			}
			if bodies[0] != bodies[1] || calls.Load() != 1 {
				t.Fatalf("bodies %q, upstream calls %d; want one call and a replay", bodies, calls.Load())
			}
			if status, body := get(t, admin+"/readyz"); status != http.StatusOK {
				t.Fatalf("readyz: %d %q", status, body)
			}
			if kind == "redis" {
				_, metrics := get(t, admin+"/metrics")
				if strings.Contains(metrics, `idem_purge_runs_total{outcome="ok"} 1`) || !strings.Contains(metrics, `idem_requests_total{result="replayed"} 1`) {
					t.Errorf("/metrics on Redis: want a replay and no purge:\n%s", grepLines(metrics, "idem"))
				}
				return
			}
			// The purge (idem.Purger) runs at once, takes the purge lock and
			// reports to the same metrics.
			deadline := time.Now().Add(30 * time.Second)
			for _, metrics := get(t, admin+"/metrics"); !strings.Contains(metrics, `idem_purge_runs_total{outcome="ok"} 1`); _, metrics = get(t, admin+"/metrics") {
				if time.Now().After(deadline) {
					t.Fatalf("no purge run in 30 s:\n%s", grepLines(metrics, "purge"))
				}
				time.Sleep(10 * time.Millisecond) // a poll's pause
			}
			_, metrics := get(t, admin+"/metrics")
			for _, want := range []string{
				"idem_purge_leader 1",
				`idemproxy_forwards_total{result="answered",route="POST /v1/* hold"} 1`,
				`idem_requests_total{result="replayed"} 1`,
				`idem_requests_total{result="executed"} 1`,
			} {
				if !strings.Contains(metrics, want) {
					t.Errorf("/metrics lacks %s:\n%s", want, grepLines(metrics, "idem"))
				}
			}
		})
	}
}

// grepLines returns the lines of s that contain sub.
func grepLines(s, sub string) string {
	var out []string
	for _, line := range strings.Split(s, "\n") {
		if strings.Contains(line, sub) && !strings.HasPrefix(line, "#") {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}

// TestHoldAndRelease: on a hold route, a forward whose outcome is unknown
// (the upstream's gateway answers 502) holds the key; retries get the same
// problem and nothing is forwarded, until "idemproxy release" frees it.
func TestHoldAndRelease(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"sqlite", "postgres", "mysql", "redis"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			var calls atomic.Int64
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if calls.Add(1) == 1 {
					http.Error(w, "upstream connect error", http.StatusBadGateway)
					return
				}
				w.WriteHeader(http.StatusCreated)
				io.WriteString(w, `{"id":"refund_1"}`)
			}))
			t.Cleanup(up.Close)
			addr, db := refundProxy(t, kind, up.URL, "POST /v1/refunds hold")
			post := func() (int, string) {
				status, _, body := postRefund(t, addr)
				return status, body
			}
			for range 3 {
				if status, body := post(); status != http.StatusBadGateway || !strings.Contains(body, `"code":"outcome-unknown"`) {
					t.Fatalf("%d %q, want the held 502", status, body)
				}
			}
			if n := calls.Load(); n != 1 {
				t.Fatalf("upstream called %d times while the key was held, want 1", n)
			}
			held, err := command("held", "-db", db)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(held, "header:acme") || !strings.Contains(held, "refund-1") || !strings.Contains(held, "1 held key") {
				t.Fatalf("held printed:\n%s", held)
			}
			if err := releaseRefund(db, "header:other"); err == nil {
				t.Fatal("release of another client's key succeeded")
			}
			if err := releaseRefund(db, "header:acme"); err != nil {
				t.Fatal(err)
			}
			if status, body := post(); status != http.StatusCreated || body != `{"id":"refund_1"}` {
				t.Fatalf("after release: %d %q, want the upstream's answer", status, body)
			}
			if err := releaseRefund(db, "header:acme"); err == nil {
				t.Fatal("release freed a key that holds a real response")
			}
		})
	}
}

// testDB returns the database URL of a store kind ("sqlite", "postgres",
// "mysql" or "redis") for one test.
func testDB(t *testing.T, kind string) string {
	t.Helper()
	switch kind {
	case "postgres":
		return pgtest.NewDatabase(t)
	case "mysql":
		return mysqltest.NewDatabase(t)
	case "redis":
		return "redis://" + redistest.Start(t) + "/0"
	}
	return "sqlite:" + filepath.Join(t.TempDir(), "keys.db")
}

// refundProxy starts idemproxy on a new store of kind, in front of
// upstream, with route for the refunds; it returns the proxy's address and
// the store's URL.
func refundProxy(t *testing.T, kind, upstream, route string) (addr, db string) {
	t.Helper()
	db = testDB(t, kind)
	addr, _ = started(t, []string{"-listen", "127.0.0.1:0", "-admin-addr", "127.0.0.1:0", "-upstream", upstream, "-db", db,
		"-client-header", "X-Client-Id", "-route", route}, nil)
	return addr, db
}

// command runs an idemproxy operator command and returns what it printed.
func command(args ...string) (string, error) {
	var out strings.Builder
	err := run(context.Background(), args, &out, io.Discard, envOf(nil))
	return out.String(), err
}

// releaseRefund runs "idemproxy release" for the key of postRefund, as
// client.
func releaseRefund(db, client string) error {
	_, err := command("release", "-db", db, "-client-id", client, "-key", "refund-1")
	return err
}

// postRefund sends the request that the outcome-unknown tests retry:
// client acme's refund with the key refund-1.
func postRefund(t *testing.T, addr string) (int, http.Header, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", addr+"/v1/refunds", strings.NewReader(`{"charge":"ch_1"}`))
	req.Header.Set("X-Client-Id", "acme")
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", "refund-1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}
