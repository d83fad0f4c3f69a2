package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem/cmd/internal/processor"
	"github.com/idemkit/idem/internal/pgtest"
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

func TestMain(m *testing.M) { pgtest.Main(m) }

// start runs processord in-process on a database of its own and returns
// its base URL and stderr.
func start(t *testing.T, args ...string) (string, *output) {
	t.Helper()
	base, stderr, _ := startOn(t, filepath.Join(t.TempDir(), "proc.db"), args...)
	return base, stderr
}

// startOn runs processord in-process on the database db and returns its
// base URL, its stderr and a function that stops it and waits.
func startOn(t *testing.T, db string, args ...string) (string, *output, func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	stdout, stderr := &output{base: make(chan string, 1)}, &output{}
	done := make(chan error, 1)
	args = append([]string{"-addr", "127.0.0.1:0", "-db", db}, args...)
	go func() { done <- Run(ctx, args, stdout, stderr) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	select {
	case base := <-stdout.base:
		return base, stderr, stop
	case err := <-done:
		t.Fatalf("Run returned %v before listening", err)
	case <-time.After(30 * time.Second):
		t.Fatal("processord did not listen within 30 s")
	}
	return "", nil, nil
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
		{"ListWithoutToken", "GET", "/v1/charges?idempotency_key=k1", nil, http.StatusUnauthorized},
		{"Charge", "POST", "/v1/charges", []string{"bearer sk_pay"}, http.StatusCreated},
		{"Count", "GET", "/v1/charges/count?key=k1", []string{"Bearer sk_pay"}, http.StatusOK},
		{"List", "GET", "/v1/charges?idempotency_key=k1", []string{"Bearer sk_pay"}, http.StatusOK},
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
	t.Setenv("PROCESSORD_DB", "postgres://processord:SECRETPASSWORD@db:5432/processord")
	t.Setenv("PROCESSORD_WEBHOOK_SECRET", "whsec_SECRETVALUEAAAAAAAAAAAAAAAAAAAAAAAAAAAAA")
	var out bytes.Buffer
	Run(context.Background(), []string{"-h"}, &out, &out)
	if !strings.Contains(out.String(), "-tokens") || strings.Contains(out.String(), "SECRETVALUE") || strings.Contains(out.String(), "SECRETPASSWORD") {
		t.Errorf("-h output:\n%s", out.String())
	}
}

func TestHelpListsEveryFlag(t *testing.T) {
	var out bytes.Buffer
	Run(context.Background(), []string{"-h"}, &out, &out)
	for _, want := range []string{"-addr", "PROCESSORD_ADDR", "-db", "postgres://", "PROCESSORD_DB", "-delay", "-fail-rate", "PROCESSORD_FAIL_RATE",
		"-lose-rate", "PROCESSORD_LOSE_RATE", "-timeout-rate", "PROCESSORD_TIMEOUT_RATE", "-seed", "PROCESSORD_SEED", "-tokens",
		"-webhook-url", "PROCESSORD_WEBHOOK_URL", "-webhook-secret", "PROCESSORD_WEBHOOK_SECRET"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("-h output lacks %s:\n%s", want, out.String())
		}
	}
}

func TestRunRejectsBadFaults(t *testing.T) {
	for _, tt := range []struct {
		name string
		args []string
		env  string
		want string
	}{
		{"RatesAboveOne", []string{"-lose-rate", "0.6", "-timeout-rate", "0.5"}, "", "add up to at most 1"},
		{"NegativeRate", []string{"-fail-rate", "-1"}, "", "between 0 and 1"},
		{"SeedFromEnv", nil, "-3", "PROCESSORD_SEED"},
		{"UnknownDatabase", []string{"-db", "mysql://db"}, "", "sqlite:PATH or a postgres:// URL"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if tt.env != "" {
				t.Setenv("PROCESSORD_SEED", tt.env)
			}
			args := append([]string{"-addr", "127.0.0.1:0", "-db", "sqlite:" + filepath.Join(t.TempDir(), "proc.db")}, tt.args...)
			var out bytes.Buffer
			if err := Run(context.Background(), args, &out, &out); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Run %q: %v; want an error about %q", tt.args, err, tt.want)
			}
		})
	}
}

// charge asks processord for a charge with key, on a connection of its
// own, and returns the status and body, or the connection error.
func charge(base, key string) (int, string, error) {
	req, _ := http.NewRequest(http.MethodPost, base+"/v1/charges", strings.NewReader(`{"amount":100,"currency":"usd","customer":"c"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+processor.DevToken)
	req.Header.Set("Idempotency-Key", key)
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	res, err := client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	return res.StatusCode, string(b), err
}

// charges lists the charges of key.
func charges(t *testing.T, base, key string) []processor.Charge {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, base+"/v1/charges?idempotency_key="+key, nil)
	req.Header.Set("Authorization", "Bearer "+processor.DevToken)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var page processor.ChargeList
	if err := json.NewDecoder(res.Body).Decode(&page); err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("GET /v1/charges: %d %v", res.StatusCode, err)
	}
	return page.Data
}

// TestRestartKeepsEveryCharge: processord restarted on the same database,
// with -lose-rate 1 so that the first answer is lost, answers the retry
// with the charge it made, and has made one.
func TestRestartKeepsEveryCharge(t *testing.T) {
	t.Parallel()
	for _, db := range []struct{ name, url string }{
		{"SQLite", "sqlite:" + filepath.Join(t.TempDir(), "proc.db")},
		{"PostgreSQL", pgtest.NewDatabase(t)},
	} {
		t.Run(db.name, func(t *testing.T) {
			t.Parallel()
			base, stderr, stop := startOn(t, db.url, "-lose-rate", "1", "-seed", "7")
			if status, body, err := charge(base, "k1"); err == nil {
				t.Fatalf("charge answered %d %s; want the connection closed", status, body)
			}
			first := charges(t, base, "k1")
			stop()
			if out := stderr.String(); !strings.Contains(out, "closing the connection without an answer") || !strings.Contains(out, "seed=7") {
				t.Errorf("stderr: %s", out)
			}

			base, _, _ = startOn(t, db.url)
			status, body, err := charge(base, "k1")
			if err != nil || status != http.StatusCreated || len(first) != 1 || !strings.Contains(body, first[0].ID) {
				t.Fatalf("retry after a restart: %d %s %v; want the charge %+v", status, body, err, first)
			}
			if again := charges(t, base, "k1"); len(again) != 1 || again[0] != first[0] {
				t.Errorf("charges after a restart: %+v, want %+v", again, first)
			}
		})
	}
}
