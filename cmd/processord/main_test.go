package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// output collects what Run writes and hands over the listening address.
type output struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	base chan string
}

var listenRE = regexp.MustCompile(`listening on (http://\S+)`)

func (o *output) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.buf.Write(p)
	if m := listenRE.FindSubmatch(p); m != nil {
		o.base <- string(m[1])
	}
	return len(p), nil
}

func (o *output) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.String()
}

// start runs processord in-process and returns its base URL and stderr.
func start(t *testing.T, args ...string) (string, *output) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	stdout, stderr := &output{base: make(chan string, 1)}, &output{}
	done := make(chan error, 1)
	args = append([]string{"-addr", "127.0.0.1:0", "-db", filepath.Join(t.TempDir(), "proc.db")}, args...)
	go func() { done <- Run(ctx, args, stdout, stderr) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	select {
	case base := <-stdout.base:
		return base, stderr
	case err := <-done:
		t.Fatalf("Run returned %v before listening", err)
	case <-time.After(30 * time.Second):
		t.Fatal("processord did not listen within 30 s")
	}
	return "", nil
}

func do(t *testing.T, method, url string, auth []string, body string) int {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", "k1")
	for _, a := range auth {
		req.Header.Add("Authorization", a)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	return res.StatusCode
}

// TestEveryRouteNeedsAToken: processord authenticates as paymentsd does;
// it used to accept any bearer token and count charges without one.
func TestEveryRouteNeedsAToken(t *testing.T) {
	t.Parallel()
	base, _ := start(t, "-tokens", "sk_pay=paymentsd")
	charge := `{"amount":100,"currency":"usd","customer":"c"}`
	for _, tt := range []struct {
		name, method, path string
		auth               []string
		want               int
	}{
		{"ChargeWithoutToken", "POST", "/v1/charges", nil, http.StatusUnauthorized},
		{"ChargeWithUnknownToken", "POST", "/v1/charges", []string{"Bearer anything"}, http.StatusUnauthorized},
		{"ChargeWithTwoFields", "POST", "/v1/charges", []string{"Bearer sk_pay", "Bearer sk_pay"}, http.StatusUnauthorized},
		{"CountWithoutToken", "GET", "/v1/charges/count?key=k1", nil, http.StatusUnauthorized},
		{"Charge", "POST", "/v1/charges", []string{"bearer sk_pay"}, http.StatusCreated},
		{"Count", "GET", "/v1/charges/count?key=k1", []string{"Bearer sk_pay"}, http.StatusOK},
	} {
		if got := do(t, tt.method, base+tt.path, tt.auth, charge); got != tt.want {
			t.Errorf("%s: %d, want %d", tt.name, got, tt.want)
		}
	}
}

// TestRunNeverPrintsTokens: the development-token warning and a bad -tokens
// value print no token.
func TestRunNeverPrintsTokens(t *testing.T) {
	t.Parallel()
	_, stderr := start(t)
	if out := stderr.String(); !strings.Contains(out, "development token") || strings.Contains(out, "sk_") {
		t.Errorf("stderr: %s", out)
	}
	var out bytes.Buffer
	err := Run(context.Background(), []string{"-tokens", "sk_live_SECRETVALUE"}, &out, &out)
	if err == nil || !strings.Contains(err.Error(), "token pair 1 of 1") || strings.Contains(err.Error()+out.String(), "SECRET") {
		t.Errorf("-tokens sk_live_SECRETVALUE: %v (output %q)", err, out.String())
	}
}

func TestHelpNeverPrintsTokens(t *testing.T) {
	t.Setenv("PROCESSORD_TOKENS", "sk_live_SECRETVALUE=paymentsd")
	var out bytes.Buffer
	Run(context.Background(), []string{"-h"}, &out, &out)
	if !strings.Contains(out.String(), "-tokens") || strings.Contains(out.String(), "SECRET") {
		t.Errorf("-h output:\n%s", out.String())
	}
}
