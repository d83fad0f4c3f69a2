package main

import (
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem/internal/pgtest"
)

// purgeInstance is a paymentsd process with its admin endpoint.
type purgeInstance struct {
	*process
	admin string
}

// startPurging starts paymentsd on dbURL with a short purge interval.
func startPurging(t *testing.T, bin, dbURL string) *purgeInstance {
	t.Helper()
	stdout, stderr := newLineWriter(), newLineWriter()
	cmd := exec.Command(bin, "-addr", "127.0.0.1:0", "-db", dbURL, "-purge-interval", "100ms")
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.Env = append(os.Environ(), "PAYMENTSD_TOKENS=sk_a=alice", "PAYMENTSD_ADMIN_ADDR=127.0.0.1:0")
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	p := &purgeInstance{process: &process{cmd: cmd, stderr: stderr}}
	t.Cleanup(func() {
		if p.cmd.ProcessState == nil {
			p.cmd.Process.Kill()
			p.cmd.Wait()
		}
	})
	p.base = waitListening(t, stdout.lines, "paymentsd")
	p.admin = waitLine(t, stdout.lines, adminRE, "paymentsd admin")
	return p
}

// leader returns the value of idem_purge_leader on p's admin endpoint.
func (p *purgeInstance) leader(t *testing.T) string {
	t.Helper()
	res, err := http.Get(p.admin + "/metrics")
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	for line := range strings.SplitSeq(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, "idem_purge_leader "); ok {
			return v
		}
	}
	t.Fatalf("/metrics lacks idem_purge_leader")
	return ""
}

// TestPurgeOneInstanceAtATime runs two paymentsd processes on one
// PostgreSQL database: one holds the purge lock and purges, the other does
// not; when the first is killed with SIGKILL, the second takes over and
// purges what is left.
func TestPurgeOneInstanceAtATime(t *testing.T) {
	t.Parallel()
	paymentsd, _ := binaries(t)
	dbURL := pgtest.NewDatabase(t)
	pool, err := pgxpool.New(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	first := startPurging(t, paymentsd, dbURL)
	first.waitLog(t, "holds the purge lock")
	second := startPurging(t, paymentsd, dbURL)

	// lockHolder returns the backend pids holding the purge lock.
	lockHolders := func() []int32 {
		t.Helper()
		rows, err := pool.Query(ctx, `SELECT pid FROM pg_locks
WHERE locktype = 'advisory' AND classid = 1768187245 AND objsubid = 2 AND granted
  AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`)
		if err != nil {
			t.Fatal(err)
		}
		var pids []int32
		for rows.Next() {
			var pid int32
			if err := rows.Scan(&pid); err != nil {
				t.Fatal(err)
			}
			pids = append(pids, pid)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return pids
	}
	expire := func(n int, prefix string) {
		t.Helper()
		if _, err := pool.Exec(ctx, `INSERT INTO idempotency_keys
  (client_id, idempotency_key, request_method, request_path, request_hash, status, response_status, created_at, locked_at)
SELECT 'alice', $2 || i, 'POST', '/v1/payments', '\x00', 'completed', 201, now() - interval '48 hours', now() - interval '48 hours'
FROM generate_series(1, $1) AS i`, n, prefix); err != nil {
			t.Fatal(err)
		}
	}
	waitPurged := func() {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for {
			var n int
			if err := pool.QueryRow(ctx, `SELECT count(*) FROM idempotency_keys`).Scan(&n); err != nil {
				t.Fatal(err)
			}
			if n == 0 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d expired keys still there after 60 s", n)
			}
			time.Sleep(50 * time.Millisecond) // polling the database, not synchronising
		}
	}

	expire(3000, "a-")
	waitPurged()
	first.waitLog(t, "purged keys past retention")
	// The second instance has tried the lock many times by now (every
	// 100 ms); one lock, held by one session, and only the first leads.
	if got := lockHolders(); len(got) != 1 {
		t.Errorf("%d sessions hold the purge lock, want 1", len(got))
	}
	if a, b := first.leader(t), second.leader(t); a != "1" || b != "0" {
		t.Errorf("idem_purge_leader: first %s, second %s; want 1 and 0", a, b)
	}

	first.kill()
	expire(3000, "b-")
	second.waitLog(t, "holds the purge lock")
	waitPurged()
	second.waitLog(t, "purged keys past retention")
	if got := lockHolders(); len(got) != 1 {
		t.Errorf("after the takeover %d sessions hold the purge lock, want 1", len(got))
	}
	if b := second.leader(t); b != "1" {
		t.Errorf("idem_purge_leader of the second instance after the takeover: %s, want 1", b)
	}
}
