package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/idemkit/idem/idemsqlite"
	"github.com/idemkit/idem/internal/pgtest"
)

var binDir string // built binaries, shared by the process tests

func TestMain(m *testing.M) {
	code := pgtest.Run(m)
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

var buildOnce struct {
	sync.Once
	err error
}

// binaries builds paymentsd and processord once per test binary.
func binaries(t *testing.T) (paymentsd, processord string) {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "paymentsd-test-bin-")
		if err != nil {
			buildOnce.err = err
			return
		}
		binDir = dir
		out, err := exec.Command("go", "build", "-o", dir, "github.com/idemkit/idem/cmd/paymentsd", "github.com/idemkit/idem/cmd/processord").CombinedOutput()
		if err != nil {
			buildOnce.err = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildOnce.err != nil {
		t.Fatalf("build binaries: %v", buildOnce.err)
	}
	return filepath.Join(binDir, "paymentsd"), filepath.Join(binDir, "processord")
}

var crashBuild struct {
	sync.Once
	err error
}

// crashBinary builds paymentsd with the crashpoint tag (crashpoint.go)
// once per test binary, beside the others.
func crashBinary(t *testing.T) string {
	t.Helper()
	binaries(t)
	dir := filepath.Join(binDir, "crashpoint")
	crashBuild.Do(func() {
		out, err := exec.Command("go", "build", "-tags", "crashpoint", "-o", dir+"/", "github.com/idemkit/idem/cmd/paymentsd").CombinedOutput()
		if err != nil {
			crashBuild.err = fmt.Errorf("go build -tags crashpoint: %v\n%s", err, out)
		}
	})
	if crashBuild.err != nil {
		t.Fatalf("build paymentsd with the crashpoint tag: %v", crashBuild.err)
	}
	return filepath.Join(dir, "paymentsd")
}

// inProcess is paymentsd run by Run in the test's process.
type inProcess struct {
	stdout, stderr *lineWriter
	cancel         context.CancelFunc
	done           chan error
}

// runInProcess starts Run with args; stop ends it.
func runInProcess(t *testing.T, args ...string) *inProcess {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	p := &inProcess{stdout: newLineWriter(), stderr: newLineWriter(), cancel: cancel, done: make(chan error, 1)}
	go func() { p.done <- Run(ctx, args, p.stdout, p.stderr) }()
	return p
}

// stop cancels Run and returns what it returned; it fails t if Run does
// not return within 30 s.
func (p *inProcess) stop(t *testing.T) error {
	t.Helper()
	p.cancel()
	select {
	case err := <-p.done:
		return err
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return within 30 s of cancel")
		return nil
	}
}

// lineWriter hands each written line to a channel, so a test can wait for
// "listening on" without sleeping.
type lineWriter struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	lines chan string
}

func newLineWriter() *lineWriter { return &lineWriter{lines: make(chan string, 100)} }

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	for {
		line, err := w.buf.ReadString('\n')
		if err != nil {
			w.buf.WriteString(line)
			return len(p), nil
		}
		select {
		case w.lines <- strings.TrimSpace(line):
		default:
		}
	}
}

var (
	listenRE = regexp.MustCompile(`listening on (http://\S+)`)
	adminRE  = regexp.MustCompile(`admin endpoint \(GET /metrics\) at (http://\S+)`)
)

// waitListening returns the base URL that a service printed.
func waitListening(t *testing.T, lines <-chan string, what string) string {
	t.Helper()
	return waitLine(t, lines, listenRE, what)
}

// waitLine returns the first submatch of the first line matching re.
func waitLine(t *testing.T, lines <-chan string, re *regexp.Regexp, what string) string {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case line := <-lines:
			if m := re.FindStringSubmatch(line); m != nil {
				return m[1]
			}
		case <-timeout:
			t.Fatalf("%s did not start listening within 30 s", what)
		}
	}
}

type answer struct {
	status int
	header http.Header
	body   []byte
}

func post(t *testing.T, base, token, key, body string) answer {
	t.Helper()
	return postWith(&http.Client{Timeout: 20 * time.Second}, base, token, key, body)
}

func postWith(client *http.Client, base, token, key, body string) answer {
	return postCtx(context.Background(), client, base, token, key, body)
}

// postCtx is postWith, bounded by ctx.
func postCtx(ctx context.Context, client *http.Client, base, token, key, body string) answer {
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/payments", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	res, err := client.Do(req)
	if err != nil {
		return answer{status: 0, body: []byte(err.Error())}
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return answer{res.StatusCode, res.Header, b}
}

func TestRunServesTheTourAndStopsGracefully(t *testing.T) {
	t.Parallel()
	db := "sqlite:" + filepath.Join(t.TempDir(), "p.db")
	p := runInProcess(t, "-addr", "127.0.0.1:0", "-admin-addr", "127.0.0.1:0", "-db", db, "-tokens", "sk_a=alice")
	stdout := p.stdout
	base := waitListening(t, stdout.lines, "paymentsd")
	admin := waitLine(t, stdout.lines, adminRE, "paymentsd's admin endpoint")

	res, err := http.Get(base + "/healthz")
	if err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("healthz: %v %v", res, err)
	}
	res.Body.Close()
	body := `{"amount":4200,"currency":"usd","customer":"cus_123"}`
	first := post(t, base, "sk_a", `"tour-1"`, body)
	replay := post(t, base, "sk_a", `"tour-1"`, body)
	reused := post(t, base, "sk_a", `"tour-1"`, `{"amount":4300,"currency":"usd","customer":"cus_123"}`)
	missing := post(t, base, "sk_a", "", body)
	// No -processor: the simulated processor charges, and declines amounts
	// ending in 02.
	declined := post(t, base, "sk_a", "tour-2", `{"amount":4202,"currency":"usd","customer":"cus_123"}`)
	if !bytes.Contains(first.body, []byte(`"status":"succeeded"`)) || declined.status != http.StatusPaymentRequired ||
		!bytes.Contains(declined.body, []byte("payment-declined")) {
		t.Fatalf("charge %s, decline %d %s; want a succeeded payment and a 402 payment-declined", first.body, declined.status, declined.body)
	}
	if first.status != 201 || replay.status != 201 || !bytes.Equal(first.body, replay.body) || replay.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("create %d then replay %d (replayed=%q)", first.status, replay.status, replay.header.Get("Idempotent-Replayed"))
	}
	if reused.status != 422 || missing.status != 400 {
		t.Fatalf("reuse %d (want 422), missing key %d (want 400)", reused.status, missing.status)
	}
	res, err = http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusNotFound {
		t.Errorf("GET /metrics on the public listener: %d, want 404", res.StatusCode)
	}
	res, err = http.Get(admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(res.Body)
	res.Body.Close()
	for _, want := range []string{
		`idem_requests_total{result="executed"} 2`, `idem_requests_total{result="replayed"} 1`,
		`idem_requests_total{result="mismatch"} 1`, `idem_requests_total{result="rejected"} 1`,
		`idem_claim_duration_seconds_count{outcome="ok"} 4`,
	} {
		if !strings.Contains(string(metrics), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if err := p.stop(t); err != nil {
		t.Fatalf("Run returned %v after cancel, want nil", err)
	}
}

func TestRunRejectsBadFlags(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"-tokens", "no-equals-sign"},
		{"-db", "mysql://x"},
		{"stray"},
	} {
		err := Run(context.Background(), args, io.Discard, io.Discard)
		if err == nil {
			t.Errorf("Run(%q) = nil, want an error", args)
		}
	}
}

// process is a service started as a child process.
type process struct {
	cmd    *exec.Cmd
	base   string
	stderr *lineWriter
}

func start(t *testing.T, bin string, args ...string) *process {
	t.Helper()
	return startWithEnv(t, bin, nil, args...)
}

// startWithEnv is start with env added to the process's environment.
func startWithEnv(t *testing.T, bin string, env []string, args ...string) *process {
	t.Helper()
	stdout, stderr := newLineWriter(), newLineWriter()
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.Env = append(os.Environ(), "PAYMENTSD_TOKENS=sk_a=alice", "PAYMENTSD_ADMIN_ADDR=127.0.0.1:0")
	cmd.Env = append(cmd.Env, env...)
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	p := &process{cmd: cmd, stderr: stderr}
	t.Cleanup(func() {
		if p.cmd.ProcessState == nil { // not waited for by the test
			p.cmd.Process.Kill()
			p.cmd.Wait()
		}
	})
	p.base = waitListening(t, stdout.lines, filepath.Base(bin))
	return p
}

// waitLog waits for a log line of the process that contains s.
func (p *process) waitLog(t *testing.T, s string) {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case line := <-p.stderr.lines:
			if strings.Contains(line, s) {
				return
			}
		case <-timeout:
			t.Fatalf("no log line with %q within 30 s", s)
		}
	}
}

func (p *process) kill() {
	p.cmd.Process.Kill() // SIGKILL: no shutdown, no rollback by the process
	p.cmd.Wait()
}

// retryLikeAClient retries as the published client guidance says: the same
// key and body, after Retry-After on 409, after a short pause on 5xx, a
// bounded number of times.
func retryLikeAClient(t *testing.T, base, key, body string) answer {
	t.Helper()
	for range 20 {
		a := post(t, base, "sk_a", key, body)
		switch {
		case a.status == http.StatusConflict:
			wait, err := strconv.Atoi(a.header.Get("Retry-After"))
			if err != nil || wait < 1 || wait > 5 {
				t.Fatalf("409 with Retry-After %q", a.header.Get("Retry-After"))
			}
			time.Sleep(time.Duration(wait) * time.Second)
		case a.status >= 500:
			time.Sleep(250 * time.Millisecond)
		default:
			return a
		}
	}
	t.Fatal("no final answer after 20 retries")
	return answer{}
}

func countRows(t *testing.T, path, query string, args ...any) int {
	t.Helper()
	var n int
	scanRow(t, path, query, args, &n)
	return n
}

// scanRow scans the row that query returns from the SQLite database at
// path into dest.
func scanRow(t *testing.T, path, query string, args []any, dest ...any) {
	t.Helper()
	store, err := idemsqlite.Open(path, &idemsqlite.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatalf("open %s: %v", path, err)
	}
	defer store.Close()
	if err := store.ReadDB().QueryRow(query, args...).Scan(dest...); err != nil {
		t.Fatalf("%s in %s: %v", query, path, err)
	}
}

// TestKilledMidRequestChargesOnce kills paymentsd with SIGKILL while a
// request waits on the card processor, restarts it on the same database,
// and retries with the same key: exactly one charge and one payment.
func TestKilledMidRequestChargesOnce(t *testing.T) {
	t.Parallel()
	paymentsd, processord := binaries(t)
	dir := t.TempDir()
	proc := start(t, processord, "-addr", "127.0.0.1:0", "-db", filepath.Join(dir, "proc.db"), "-delay", "500ms")
	payDB := filepath.Join(dir, "pay.db")
	args := []string{"-addr", "127.0.0.1:0", "-db", "sqlite:" + payDB,
		"-processor", proc.base, "-lock-timeout", "2s", "-resumer-interval", "0"}
	svc := start(t, paymentsd, args...)

	body := `{"amount":4200,"currency":"usd","customer":"cus_123"}`
	inflight := make(chan answer, 1)
	go func() { inflight <- post(t, svc.base, "sk_a", "crash-key", body) }()
	proc.waitLog(t, "processord: charging") // paymentsd is inside the processor call
	svc.kill()
	if a := <-inflight; a.status != 0 {
		t.Fatalf("the killed request got an answer: %d %s", a.status, a.body)
	}

	svc = start(t, paymentsd, args...)
	final := retryLikeAClient(t, svc.base, "crash-key", body)
	if final.status != http.StatusCreated {
		t.Fatalf("retry after restart: %d %s", final.status, final.body)
	}
	again := post(t, svc.base, "sk_a", "crash-key", body)
	if again.header.Get("Idempotent-Replayed") != "true" || !bytes.Equal(again.body, final.body) {
		t.Fatalf("second retry: %d replayed=%q", again.status, again.header.Get("Idempotent-Replayed"))
	}
	svc.kill()
	proc.kill()
	if n := countRows(t, payDB, `SELECT count(*) FROM payments WHERE idempotency_key = ?`, "crash-key"); n != 1 {
		t.Errorf("%d payment rows, want 1", n)
	}
	if n := countRows(t, filepath.Join(dir, "proc.db"), `SELECT count(*) FROM charges`); n != 1 {
		t.Errorf("%d charges at the processor, want 1", n)
	}
}

// TestSIGTERMLetsInFlightRequestsFinish sends SIGTERM while a request waits
// on the card processor: the request still gets its 201, the process exits
// cleanly, and the payment is stored once.
func TestSIGTERMLetsInFlightRequestsFinish(t *testing.T) {
	t.Parallel()
	paymentsd, processord := binaries(t)
	dir := t.TempDir()
	proc := start(t, processord, "-addr", "127.0.0.1:0", "-db", filepath.Join(dir, "proc.db"), "-delay", "500ms")
	payDB := filepath.Join(dir, "pay.db")
	svc := start(t, paymentsd, "-addr", "127.0.0.1:0", "-db", "sqlite:"+payDB, "-processor", proc.base)

	body := `{"amount":4200,"currency":"usd","customer":"cus_123"}`
	inflight := make(chan answer, 1)
	go func() { inflight <- post(t, svc.base, "sk_a", "term-key", body) }()
	proc.waitLog(t, "processord: charging")
	if err := svc.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if a := <-inflight; a.status != http.StatusCreated {
		t.Fatalf("in-flight request after SIGTERM: %d %s, want 201", a.status, a.body)
	}
	if err := svc.cmd.Wait(); err != nil {
		t.Fatalf("paymentsd exited with %v after SIGTERM, want a clean exit", err)
	}
	if n := countRows(t, payDB, `SELECT count(*) FROM payments WHERE idempotency_key = ?`, "term-key"); n != 1 {
		t.Errorf("%d payment rows, want 1", n)
	}
}

func TestRunRejectsBadEnvironment(t *testing.T) {
	t.Setenv("PAYMENTSD_RETENTION", "soon")
	err := Run(context.Background(), nil, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), `PAYMENTSD_RETENTION="soon"`) {
		t.Fatalf("Run with a bad PAYMENTSD_RETENTION = %v, want an error naming it", err)
	}
}
