//go:build unix

package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/idemkit/idem/cmd/internal/redistest"
)

// TestStaleHolderFencedOnCluster: on Redis Cluster (MinReplicas 1), an
// idemproxy paused (SIGSTOP) while its forward is at the upstream loses
// its key: another instance takes it over once the lease it judges by ran
// out, forwards it again (a retry route) and stores the upstream's second
// answer. When the upstream then answers the first forward and the paused
// proxy resumes (SIGCONT), its completion is refused by the key's fencing
// token and nonce (it logs that another request completed the key), and
// the key keeps the taker's answer, which every later retry gets,
// replayed. The paused proxy's client still gets the answer of its own
// forward, which streamed to it before the completion was tried: a true
// answer, and on a retry route both forwards reached the upstream.
func TestStaleHolderFencedOnCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a six-node cluster")
	}
	t.Parallel()
	var mu sync.Mutex
	charges := 0
	arrived, release := make(chan struct{}, 4), make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		mu.Lock()
		charges++
		n := charges
		mu.Unlock()
		arrived <- struct{}{}
		if n == 1 {
			<-release // the first forward is answered only after the takeover
		}
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"id":"refund_%d"}`, n)
	}))
	t.Cleanup(up.Close)
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	t.Cleanup(unblock)

	// No node is killed: Redis's default node timeout, so that a node a
	// loaded machine starves for a few seconds is not failed over; and a
	// replica that acknowledges late is late, not missing.
	cluster := redistest.StartCluster(t, 15*time.Second)
	db := "redis-cluster://" + cluster.Seeds() + "?min_replicas=1&replica_timeout=30s&prefix=stale"
	route := []string{"-upstream", up.URL, "-db", db, "-route", "POST /v1/refunds retry"}
	binary := idemproxyBinary(t)
	// The holder judges its own lease long; the taker judges a lease over
	// after 12 s, and gives its own forward 10 s, ample for an upstream
	// that answers it at once.
	holderLog := &syncBuffer{}
	holder, holderCmd := proxyProcessLog(t, binary, holderLog, append(route, "-upstream-timeout", "1h", "-lock-timeout", "2h")...)
	taker, _ := proxyProcess(t, binary, append(route, "-upstream-timeout", "10s", "-lock-timeout", "12s")...)

	type answer struct {
		status   int
		replayed string
		body     string
	}
	first := make(chan answer, 1)
	go func() {
		status, h, body := postRefund(t, holder)
		first <- answer{status, h.Get("Idempotent-Replayed"), body}
	}()
	select {
	case <-arrived:
	case <-time.After(30 * time.Second):
		t.Fatal("the first forward did not reach the upstream in 30 s")
	}
	if err := holderCmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	resumed := false
	t.Cleanup(func() {
		if !resumed {
			holderCmd.Process.Signal(syscall.SIGCONT)
		}
	})

	deadline := time.Now().Add(30 * time.Second)
	var status int
	var body string
	for {
		status, _, body = postRefund(t, taker)
		if status != http.StatusConflict {
			break // the paused holder's lease is over, as the taker judges it
		}
		if time.Now().After(deadline) {
			t.Fatal("the key was still in flight after 30 s")
		}
		time.Sleep(20 * time.Millisecond) // a poll's pause
	}
	if status != http.StatusCreated || body != `{"id":"refund_2"}` {
		t.Fatalf("the taker's forward: %d %q, want 201 refund_2", status, body)
	}

	unblock() // the upstream answers the paused holder's forward
	if err := holderCmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	resumed = true
	var a answer
	select {
	case a = <-first:
	case <-time.After(30 * time.Second):
		t.Fatal("the resumed holder did not answer in 30 s")
	}
	if a.status != http.StatusCreated || a.body != `{"id":"refund_1"}` {
		t.Fatalf("the resumed holder answered %d %q; want its own forward's answer, streamed", a.status, a.body)
	}
	redistest.Poll(t, "the resumed holder to log its refused completion", func() bool {
		return strings.Contains(holderLog.String(), "another request completed the key first")
	})
	for _, addr := range []string{holder, taker} {
		if status, h, body := postRefund(t, addr); status != http.StatusCreated || body != `{"id":"refund_2"}` || h.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("retry through %s: %d %q, want the taker's answer replayed", addr, status, body)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if charges != 2 {
		t.Fatalf("the upstream was sent the key %d times, want 2 (the paused forward and the taker's)", charges)
	}
	t.Logf("paused holder's completion refused; the key keeps the taker's answer; upstream sent the key %d times", charges)
}

// proxyProcessLog is proxyProcess with the proxy's log written to log.
func proxyProcessLog(t *testing.T, binary string, log io.Writer, args ...string) (string, *exec.Cmd) {
	t.Helper()
	cmd := exec.Command(binary, append([]string{"-listen", "127.0.0.1:0", "-admin-addr", "", "-client-header", "X-Client-Id"}, args...)...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	lines := bufio.NewScanner(out)
	for lines.Scan() {
		if a, ok := strings.CutPrefix(lines.Text(), "idemproxy: listening on "); ok {
			addr, _, _ := strings.Cut(a, ",")
			go io.Copy(io.Discard, out)
			return addr, cmd
		}
	}
	t.Fatal("idemproxy printed no address")
	return "", nil
}

// syncBuffer is a buffer safe for concurrent use.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
