package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// TestProbeFromFlags: on a probe route, a forward whose outcome is unknown
// (the upstream's gateway answers 502 after the upstream recorded the
// refund) leaves the key unknown; the retry asks the status URL from
// IDEMPROXY_PROBE_URL with the client's identity header, and replays what
// it answers. /metrics counts the probe.
func TestProbeFromFlags(t *testing.T) {
	t.Parallel()
	var calls, probes atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			probes.Add(1)
			if r.URL.Path != "/v1/requests/refund-1" || r.Header.Get("X-Client-Id") != "acme" || calls.Load() == 0 {
				w.Header().Set("Idempotency-Key-Status", "not-received")
				http.NotFound(w, r)
				return
			}
			w.Header().Set("Idempotency-Key-Status", "completed")
			w.WriteHeader(http.StatusCreated)
			io.WriteString(w, `{"id":"refund_1"}`)
			return
		}
		calls.Add(1)
		http.Error(w, "upstream connect error", http.StatusBadGateway)
	}))
	t.Cleanup(up.Close)
	addr, admin := started(t,
		[]string{"-listen", "127.0.0.1:0", "-admin-addr", "127.0.0.1:0", "-upstream", up.URL, "-db", testDB(t, "sqlite"),
			"-client-header", "X-Client-Id", "-route", "POST /v1/refunds probe"},
		map[string]string{"IDEMPROXY_PROBE_URL": "/v1/requests/{key}"})
	post := func() (int, http.Header, string) { return postRefund(t, addr) }
	if status, _, body := post(); status != http.StatusBadGateway || !strings.Contains(body, `"code":"outcome-unknown"`) {
		t.Fatalf("first: %d %q, want the 502 problem", status, body)
	}
	for i := range 2 {
		if status, h, body := post(); status != http.StatusCreated || h.Get("Idempotent-Replayed") != "true" || body != `{"id":"refund_1"}` {
			t.Fatalf("retry %d: %d %v %q, want the status URL's answer, replayed", i, status, h, body)
		}
	}
	if c, p := calls.Load(), probes.Load(); c != 1 || p != 1 {
		t.Fatalf("upstream saw %d forwards and %d probes, want 1 and 1", c, p)
	}
	_, metrics := get(t, admin+"/metrics")
	for _, want := range []string{
		`idemproxy_probes_total{result="completed",route="POST /v1/refunds probe"} 1`,
		`idemproxy_forwards_total{result="outcome_unknown",route="POST /v1/refunds probe"} 1`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s:\n%s", want, grepLines(metrics, "idemproxy"))
		}
	}
}

// TestProbeHeldAndRelease: a probe route's key whose status URL cannot
// answer stays unknown; "idemproxy held" lists it under the probe policy,
// and "idemproxy release" frees it, so that the next retry is forwarded.
func TestProbeHeldAndRelease(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"sqlite", "postgres", "mysql", "redis"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			var calls, probes atomic.Int64
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method == http.MethodGet {
					probes.Add(1)
					http.Error(w, "status store down", http.StatusServiceUnavailable)
					return
				}
				if calls.Add(1) == 1 {
					http.Error(w, "upstream connect error", http.StatusBadGateway)
					return
				}
				w.WriteHeader(http.StatusCreated)
				io.WriteString(w, `{"id":"refund_1"}`)
			}))
			t.Cleanup(up.Close)
			addr, db := refundProxy(t, kind, up.URL, "POST /v1/refunds probe /v1/requests/{key}")
			post := func() (int, string) {
				status, _, body := postRefund(t, addr)
				return status, body
			}
			for range 3 {
				if status, body := post(); status != http.StatusBadGateway || !strings.Contains(body, `"code":"outcome-unknown"`) {
					t.Fatalf("%d %q, want the 502 problem", status, body)
				}
			}
			if c, p := calls.Load(), probes.Load(); c != 1 || p != 2 {
				t.Fatalf("upstream saw %d forwards and %d probes, want 1 and 2", c, p)
			}
			held, err := command("held", "-db", db)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(held, "refund-1") || !strings.Contains(held, " probe ") || !strings.Contains(held, "1 held key") {
				t.Fatalf("held printed:\n%s", held)
			}
			if err := releaseRefund(db, "header:acme"); err != nil {
				t.Fatal(err)
			}
			if status, body := post(); status != http.StatusCreated || body != `{"id":"refund_1"}` {
				t.Fatalf("after release: %d %q, want the upstream's answer", status, body)
			}
			if c, p := calls.Load(), probes.Load(); c != 2 || p != 2 {
				t.Fatalf("upstream saw %d forwards and %d probes, want 2 and 2: the released key's retry is forwarded unprobed", c, p)
			}
			if err := releaseRefund(db, "header:acme"); err == nil {
				t.Fatal("release freed a key that holds a real response")
			}
		})
	}
}
