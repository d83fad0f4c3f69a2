package proxy

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/race"
)

// TestLargeResponseStreams sends a 20 MiB upstream response through the
// proxy. It is not parallel, so that the allocation figure is this
// request's: the proxy, the upstream and the client together allocate less
// than 5 MiB for it, so the body was never buffered whole. A retry gets the
// not-retained problem, and the upstream ran once.
func TestLargeResponseStreams(t *testing.T) {
	const size = 20 << 20
	var calls atomic.Int64
	up := largeUpstream(t, size, func(*http.Request) { calls.Add(1) })
	target, _ := url.Parse(up.URL)
	id, _ := CredentialIdentity([]byte(testSecret))
	p, err := New(&Config{Upstream: target, Store: newStore(t, "sqlite"), Identity: id})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)

	postKey(t, srv.URL, "export-warm") // warm connections and pools first
	calls.Store(0)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	resp := postKey(t, srv.URL, "export-2")
	runtime.ReadMemStats(&after)
	allocated := after.TotalAlloc - before.TotalAlloc
	t.Logf("20 MiB response through the proxy: %d bytes received, %.2f MiB allocated in the process, %d mallocs",
		resp.n, float64(allocated)/(1<<20), after.Mallocs-before.Mallocs)
	if resp.status != http.StatusCreated || resp.n != size {
		t.Fatalf("got %d with %d bytes, want 201 with %d", resp.status, resp.n, size)
	}
	limit := uint64(5 << 20)
	if race.Enabled {
		limit *= 2
	}
	if allocated >= limit {
		t.Fatalf("allocated %d bytes for a %d-byte response, more than %d: it was buffered", allocated, size, limit)
	}

	retry := postKey(t, srv.URL, "export-2")
	var prob struct {
		idem.Problem
		OriginalStatus int    `json:"original_status"`
		Location       string `json:"location"`
	}
	if err := json.Unmarshal(retry.head, &prob); err != nil {
		t.Fatal(err)
	}
	if retry.status != http.StatusCreated || prob.Code != string(idem.ProblemResponseNotRetained) || prob.OriginalStatus != 201 || prob.Location != "/v1/exports/exp_1" {
		t.Fatalf("retry: %d %+v, want the not-retained problem", retry.status, prob)
	}
	if c := calls.Load(); c != 1 {
		t.Fatalf("upstream called %d times for the key, want 1", c)
	}
}

// streamed is a response whose body was read to the end and counted, with
// only its first bytes kept.
type streamed struct {
	status int
	n      int64
	head   []byte
}

func postKey(t *testing.T, base, key string) streamed {
	t.Helper()
	req, _ := http.NewRequest("POST", base+"/v1/exports", strings.NewReader(`{"all":true}`))
	req.Header.Set("Authorization", "Bearer sk_test_alice")
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	head := make([]byte, 4096)
	k, _ := io.ReadFull(resp.Body, head)
	rest, err := io.Copy(io.Discard, resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return streamed{status: resp.StatusCode, n: int64(k) + rest, head: head[:k]}
}

// TestBodyBreaksOff: the upstream sends its status and half its body, then
// resets. The client's body is cut short; the key keeps the status, so a
// retry gets the not-retained problem and nothing is forwarded again, under
// both policies.
func TestBodyBreaksOff(t *testing.T) {
	t.Parallel()
	for _, policy := range []Policy{PolicyRetry, PolicyHold} {
		t.Run(string(policy), func(t *testing.T) {
			t.Parallel()
			var calls atomic.Int64
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				calls.Add(1)
				io.Copy(io.Discard, r.Body)
				w.Header().Set("Content-Length", "100000")
				w.Header().Set("Location", "/v1/reports/rep_1")
				w.WriteHeader(http.StatusCreated)
				w.Write(make([]byte, 50000))
				http.NewResponseController(w).Flush()
				resetConnection(w)
			}))
			t.Cleanup(up.Close)
			target, _ := url.Parse(up.URL)
			id, _ := CredentialIdentity([]byte(testSecret))
			p, err := New(&Config{Upstream: target, Store: newStore(t, "sqlite"), Identity: id, DefaultPolicy: policy, Idem: idem.Config{Logger: discard()}})
			if err != nil {
				t.Fatal(err)
			}
			srv := httptest.NewServer(p)
			t.Cleanup(srv.Close)
			req, _ := http.NewRequest("POST", srv.URL+"/v1/exports", strings.NewReader(`{"all":true}`))
			req.Header.Set("Authorization", "Bearer sk_test_alice")
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Idempotency-Key", "report-1")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			_, err = io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusCreated || err == nil {
				t.Fatalf("first: %d, read error %v; want 201 and a body cut short", resp.StatusCode, err)
			}
			retry := postKey(t, srv.URL, "report-1")
			if retry.status != http.StatusCreated || !strings.Contains(string(retry.head), string(idem.ProblemResponseNotRetained)) || !strings.Contains(string(retry.head), "/v1/reports/rep_1") {
				t.Fatalf("retry: %d %q", retry.status, retry.head)
			}
			if c := calls.Load(); c != 1 {
				t.Fatalf("upstream called %d times, want 1", c)
			}
		})
	}
}

// largeUpstream answers every request with a 201 of size bytes, sent in
// 64 KiB writes, after it counted the request with count.
func largeUpstream(t *testing.T, size int, count func(*http.Request)) *httptest.Server {
	t.Helper()
	chunk := []byte(strings.Repeat("0123456789abcdef", 4096)) // 64 KiB
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		count(r)
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Length", strconv.Itoa(size))
		w.Header().Set("Location", "/v1/exports/exp_1")
		w.WriteHeader(http.StatusCreated)
		for sent := 0; sent < size; sent += len(chunk) {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	}))
	t.Cleanup(up.Close)
	return up
}
