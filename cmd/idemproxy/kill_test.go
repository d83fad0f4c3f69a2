package main

import (
	"bufio"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// idemproxyBinary builds idemproxy into a directory removed when the test
// ends; the build cache makes every build after the first quick.
func idemproxyBinary(t *testing.T) string {
	t.Helper()
	binary := filepath.Join(t.TempDir(), "idemproxy")
	if out, err := exec.Command("go", "build", "-o", binary, "github.com/idemkit/idem/cmd/idemproxy").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return binary
}

// proxyProcess starts idemproxy as a process of its own and returns its
// address and the process, which the test kills or which dies with it.
func proxyProcess(t *testing.T, binary string, args ...string) (string, *exec.Cmd) {
	t.Helper()
	cmd := exec.Command(binary, append([]string{"-listen", "127.0.0.1:0", "-admin-addr", "", "-client-header", "X-Client-Id"}, args...)...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = io.Discard
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

// TestHoldAfterSIGKILL: idemproxy is killed (SIGKILL) while its forward of
// a hold route's key is at the upstream, which charged and has not
// answered. Another instance on the same key store takes the key over once
// its lease ran out: the retry gets the held outcome-unknown problem, and
// the upstream, which does not honour keys, is never sent the key again.
func TestHoldAfterSIGKILL(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"sqlite", "postgres", "mysql", "redis"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			var mu sync.Mutex
			charges := 0
			arrived, release := make(chan struct{}, 4), make(chan struct{})
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				io.Copy(io.Discard, r.Body)
				mu.Lock()
				charges++
				mu.Unlock()
				arrived <- struct{}{}
				select {
				case <-release:
				case <-r.Context().Done():
				}
				w.WriteHeader(http.StatusCreated)
				io.WriteString(w, `{"id":"refund_1"}`)
			}))
			t.Cleanup(up.Close)
			t.Cleanup(func() { close(release) })
			db := testDB(t, kind)
			args := []string{"-upstream", up.URL, "-db", db, "-route", "POST /v1/refunds hold", "-upstream-timeout", "5s", "-lock-timeout", "6s"}
			binary := idemproxyBinary(t)
			first, victim := proxyProcess(t, binary, args...)
			second, _ := proxyProcess(t, binary, args...)

			sent := make(chan struct{})
			go func() {
				defer close(sent)
				req, _ := http.NewRequest("POST", first+"/v1/refunds", strings.NewReader(`{"charge":"ch_1"}`))
				req.Header.Set("X-Client-Id", "acme")
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Idempotency-Key", "refund-1")
				if resp, err := http.DefaultClient.Do(req); err == nil {
					resp.Body.Close()
				}
			}()
			select {
			case <-arrived:
			case <-time.After(30 * time.Second):
				t.Fatal("the first request did not reach the upstream in 30 s")
			}
			victim.Process.Kill()
			victim.Wait()
			<-sent

			deadline := time.Now().Add(30 * time.Second)
			var status int
			var body string
			for {
				status, _, body = postRefund(t, second)
				if status != http.StatusConflict {
					break // the killed instance's lease ran out
				}
				if time.Now().After(deadline) {
					t.Fatal("the key was still in flight after 30 s")
				}
				time.Sleep(20 * time.Millisecond) // a poll's pause
			}
			if status != http.StatusBadGateway || !strings.Contains(body, `"code":"outcome-unknown"`) || !strings.Contains(body, "The key is held") {
				t.Fatalf("retry after the kill: %d %q, want the held 502", status, body)
			}
			if again, _, b := postRefund(t, second); again != status || b != body {
				t.Fatalf("second retry: %d %q, want the held problem again", again, b)
			}
			mu.Lock()
			defer mu.Unlock()
			if charges != 1 {
				t.Fatalf("the upstream was sent the key %d times, want once", charges)
			}
			t.Logf("retry after SIGKILL got %d outcome-unknown (held); upstream sent the key %d time", status, charges)
		})
	}
}
