package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemlog"
	"github.com/idemkit/idem/idemsqlite"
	"github.com/idemkit/idem/internal/keyspec"
)

// serviceBinaries builds paymentsd and processord into a directory that
// is removed when the test ends.
func serviceBinaries(t *testing.T) (paymentsd, processord string) {
	t.Helper()
	dir := t.TempDir()
	out, err := exec.Command("go", "build", "-o", dir, "github.com/idemkit/idem/cmd/paymentsd", "github.com/idemkit/idem/cmd/processord").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return filepath.Join(dir, "paymentsd"), filepath.Join(dir, "processord")
}

// lines hands each written line to a channel and keeps them all.
type lines struct {
	mu  sync.Mutex
	buf bytes.Buffer
	all []string
	ch  chan string
}

func (w *lines) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	for {
		line, err := w.buf.ReadString('\n')
		if err != nil {
			w.buf.WriteString(line)
			return len(p), nil
		}
		line = strings.TrimSpace(line)
		w.all = append(w.all, line)
		select {
		case w.ch <- line:
		default:
		}
	}
}

func (w *lines) snapshot() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.all...)
}

// wait returns the first submatch of the first line that matches re.
func (w *lines) wait(t *testing.T, re *regexp.Regexp) string {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case line := <-w.ch:
			if m := re.FindStringSubmatch(line); m != nil {
				if len(m) > 1 {
					return m[1]
				}
				return m[0]
			}
		case <-timeout:
			t.Fatalf("no line matching %s within 30 s", re)
		}
	}
}

type service struct {
	cmd    *exec.Cmd
	base   string
	stderr *lines
}

var listeningRE = regexp.MustCompile(`listening on (http://\S+)`)

func startService(t *testing.T, bin string, args ...string) *service {
	t.Helper()
	stdout, stderr := &lines{ch: make(chan string, 1000)}, &lines{ch: make(chan string, 1000)}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.Env = append(os.Environ(), "PAYMENTSD_TOKENS=sk_a=alice,sk_b=bob", "PAYMENTSD_ADMIN_ADDR=off")
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	s := &service{cmd: cmd, stderr: stderr}
	t.Cleanup(s.kill)
	s.base = stdout.wait(t, listeningRE)
	return s
}

// kill sends SIGKILL: no shutdown, no rollback by the process.
func (s *service) kill() {
	if s.cmd.ProcessState == nil {
		s.cmd.Process.Kill()
		s.cmd.Wait()
	}
}

type reply struct {
	status int
	header http.Header
	body   string
}

func call(t *testing.T, method, url, token, key, body string) reply {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if key != "" {
		req.Header.Set(idem.HeaderKey, `"`+key+`"`)
	}
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		return reply{body: err.Error()}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	resp.Header.Del("Date")
	resp.Header.Del(idemlog.HeaderRequestID) // a new one per request
	return reply{resp.StatusCode, resp.Header, string(b)}
}

// countIn counts rows of a SQLite file or a PostgreSQL database.
func countIn(t *testing.T, db, query string, args ...any) int {
	t.Helper()
	ctx := context.Background()
	var n int
	if path, ok := strings.CutPrefix(db, "sqlite:"); ok {
		store, err := idemsqlite.Open(path, &idemsqlite.Config{Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		defer store.Close()
		if err := store.ReadDB().QueryRowContext(ctx, query, args...).Scan(&n); err != nil {
			t.Fatalf("count: %v", err)
		}
		return n
	}
	conn, err := pgx.Connect(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	query = strings.ReplaceAll(query, "?", "$1")
	if err := conn.QueryRow(ctx, query, args...).Scan(&n); err != nil {
		t.Fatalf("count: %v", err)
	}
	return n
}

// TestStuckKeyAfterSIGKILL kills paymentsd (two-phase, a 90 s lease) while a
// request waits on the card processor, so its key stays started; the
// retry gets 409. The operator finds the key with "idem keys list --state
// started --older-than 1m" (the CLI's clock two minutes ahead: the key is
// then two minutes old and its lease expired), is refused a release while
// the lease is live, releases it once expired, and the client's next retry
// runs once: one payment, one charge. Then the key-status endpoint: the
// owner sees completed with the status and link, another client the same
// 404 as an unknown key.
func TestStuckKeyAfterSIGKILL(t *testing.T) {
	t.Parallel()
	paymentsd, processord := serviceBinaries(t)
	for kind, db := range databases(t) {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			procDB := filepath.Join(dir, "proc.db")
			proc := startService(t, processord, "-addr", "127.0.0.1:0", "-db", procDB, "-delay", "500ms")
			args := []string{"-addr", "127.0.0.1:0", "-db", db, "-lock-timeout", "90s",
				"-processor", proc.base, "-log-format", "json"}
			svc := startService(t, paymentsd, args...)

			body := `{"amount":4200,"currency":"usd","customer":"cus_123"}`
			inflight := make(chan reply, 1)
			go func() { inflight <- call(t, "POST", svc.base+"/v1/payments", "sk_a", "kill-1", body) }()
			proc.stderr.wait(t, regexp.MustCompile(`processord: charging`))
			svc.kill()
			if r := <-inflight; r.status != 0 {
				t.Fatalf("the killed request got an answer: %d %s", r.status, r.body)
			}

			svc = startService(t, paymentsd, args...)
			if r := call(t, "POST", svc.base+"/v1/payments", "sk_a", "kill-1", body); r.status != http.StatusConflict {
				t.Fatalf("retry of the stuck key: %d %s, want 409", r.status, r.body)
			}
			if r := call(t, "GET", svc.base+"/v1/idempotency-keys/kill-1", "sk_a", "", ""); r.status != 200 || !strings.Contains(r.body, `"state":"in_flight"`) {
				t.Fatalf("status of the stuck key: %d %s, want in_flight", r.status, r.body)
			}

			e := &keysEnv{db: db, now: time.Now()}
			code, out, errOut := e.keys(t, "release", "alice", "kill-1", "--lock-timeout", "90s")
			t.Logf("idem keys release alice kill-1 (lease live): exit %d\n%s%s", code, out, errOut)
			if code != exitFail || !strings.Contains(errOut, "the lease is live") {
				t.Fatalf("release within the lease: exit %d\n%s", code, errOut)
			}
			e.now = e.now.Add(2 * time.Minute)
			code, out, _ = e.keys(t, "list", "--state", "started", "--older-than", "1m", "--lock-timeout", "90s")
			t.Logf("idem keys list --state started --older-than 1m\n%s", out)
			if code != exitOK || !strings.Contains(out, "kill-1") || !strings.Contains(out, "expired") || !strings.Contains(out, "1 key\n") {
				t.Fatalf("list: exit %d\n%s", code, out)
			}
			code, out, errOut = e.keys(t, "release", "alice", "kill-1", "--lock-timeout", "90s", "--reason", "paymentsd killed mid-request; no payment row")
			t.Logf("idem keys release alice kill-1: exit %d\n%s%s", code, out, errOut)
			if code != exitOK {
				t.Fatalf("release: exit %d\n%s", code, errOut)
			}

			first := call(t, "POST", svc.base+"/v1/payments", "sk_a", "kill-1", body)
			again := call(t, "POST", svc.base+"/v1/payments", "sk_a", "kill-1", body)
			if first.status != http.StatusCreated || first.header.Get(idem.HeaderReplayed) != "" ||
				again.header.Get(idem.HeaderReplayed) != "true" || again.body != first.body {
				t.Fatalf("retries after release: %d (replayed %q), then %d (replayed %q)", first.status,
					first.header.Get(idem.HeaderReplayed), again.status, again.header.Get(idem.HeaderReplayed))
			}
			payments := countIn(t, db, `SELECT count(*) FROM payments WHERE idempotency_key = ?`, "kill-1")
			charges := countIn(t, "sqlite:"+procDB, `SELECT count(*) FROM charges`)
			t.Logf("after release and two retries: %d payment, %d charge", payments, charges)
			if payments != 1 || charges != 1 {
				t.Errorf("%d payments and %d charges, want 1 and 1", payments, charges)
			}

			// The key-status endpoint.
			var st idem.KeyStatus
			owner := call(t, "GET", svc.base+"/v1/idempotency-keys/kill-1", "sk_a", "", "")
			if err := json.Unmarshal([]byte(owner.body), &st); err != nil || owner.status != 200 || st.State != idem.KeyStateCompleted ||
				st.ResponseStatus != 201 || !strings.HasPrefix(st.Link, "/v1/payments/pay_") {
				t.Fatalf("owner's status: %d %s", owner.status, owner.body)
			}
			other := call(t, "GET", svc.base+"/v1/idempotency-keys/kill-1", "sk_b", "", "")
			unknown := call(t, "GET", svc.base+"/v1/idempotency-keys/never-used", "sk_b", "", "")
			t.Logf("owner: %d %s\nother client: %d %s\nunknown key: %d %s", owner.status, owner.body, other.status, other.body, unknown.status, unknown.body)
			if other.status != 404 || other.status != unknown.status || other.body != unknown.body || fmt.Sprint(other.header) != fmt.Sprint(unknown.header) {
				t.Errorf("another client's key: %d %v %q; an unknown key: %d %v %q; want byte-identical 404s",
					other.status, other.header, other.body, unknown.status, unknown.header, unknown.body)
			}
			for _, path := range []string{"/healthz", "/readyz"} {
				if r := call(t, "GET", svc.base+path, "", "", ""); r.status != 200 {
					t.Errorf("GET %s: %d %s", path, r.status, r.body)
				}
			}

			// The request log: one JSON line per request, with its outcome,
			// and never the key, a token or a body.
			var executed int
			for _, line := range svc.stderr.snapshot() {
				if strings.Contains(line, "kill-1") || strings.Contains(line, "sk_a") || strings.Contains(line, "cus_123") {
					t.Errorf("log line leaks a key, token or body: %s", line)
				}
				var l map[string]any
				if json.Unmarshal([]byte(line), &l) == nil && l["msg"] == "http request" && l["outcome"] == "executed" &&
					l["key_digest"] == keyspec.Digest("kill-1") && l["client"] == "alice" && l["request_id"] != "" {
					executed++
				}
			}
			if executed != 1 {
				t.Errorf("%d request lines with outcome executed for the key, want 1", executed)
			}
		})
	}
}
