package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/cmd/internal/payments"
	"github.com/idemkit/idem/idemclient"
	"github.com/idemkit/idem/idemsqlite"
	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/internal/pgtest"
)

// TestKilledAtEachRecoveryPoint SIGKILLs paymentsd (two-phase, PostgreSQL)
// at each point of a payment in turn, restarts it, and retries like a
// client: for every key, exactly one charge at processord, exactly one
// payment row, succeeded, and the client's final answer names it.
//
// The kill points are made without hooks in paymentsd: the test holds a
// row lock that the next commit needs, waits until paymentsd waits on it,
// and kills it there. The resumer is off (-resumer-interval 0), so
// that the client's retry is what resumes the payment.
func TestKilledAtEachRecoveryPoint(t *testing.T) {
	t.Parallel()
	paymentsd, processord := binaries(t)
	for _, point := range []string{"payment_created", "charged", "charge_created"} {
		t.Run(point, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			proc := start(t, processord, "-addr", "127.0.0.1:0", "-db", filepath.Join(dir, "proc.db"), "-delay", "1s")
			dbURL := pgtest.NewDatabase(t)
			args := []string{"-addr", "127.0.0.1:0", "-db", withPoolSize(dbURL, 4),
				"-processor", proc.base, "-lock-timeout", "2s", "-resumer-interval", "0"}
			svc := start(t, paymentsd, args...)
			ctx := context.Background()
			pool, err := pgxpool.New(ctx, withPoolSize(dbURL, 2))
			if err != nil {
				t.Fatal(err)
			}
			defer pool.Close()

			key := "crash-" + point
			body := `{"amount":4200,"currency":"usd","customer":"cus_123"}`
			inflight := make(chan answer, 1)
			go func() { inflight <- post(t, svc.base, "sk_a", key, body) }()
			waitFor(t, 60*time.Second, "the pending payment", func() bool { return recoveryPoint(ctx, pool, key) == "payment_created" })

			var lock pgx.Tx
			switch point {
			case "payment_created": // inside the processor's call
				proc.waitLog(t, "processord: charging")
			case "charged": // the processor answered; the charge_created checkpoint waits
				lock = lockRow(t, pool, `SELECT 1 FROM idempotency_keys WHERE idempotency_key = $1 FOR UPDATE`, key)
				waitForLockWait(t, pool)
			case "charge_created": // the final phase waits to settle the payment
				lock = lockRow(t, pool, `SELECT 1 FROM payments WHERE idempotency_key = $1 FOR UPDATE`, key)
				waitForLockWait(t, pool)
				if got := recoveryPoint(ctx, pool, key); got != "charge_created" {
					t.Fatalf("recovery point %q when the final phase waits; want charge_created", got)
				}
			}
			svc.kill()
			if lock != nil {
				lock.Rollback(ctx)
			}
			if a := <-inflight; a.status != 0 {
				t.Fatalf("the killed request got an answer: %d %s", a.status, a.body)
			}

			svc = start(t, paymentsd, args...)
			final := retryWithIdemclient(t, svc.base, key, body)
			var p struct{ ID, Status string }
			if err := json.Unmarshal(final.body, &p); err != nil || final.status != http.StatusCreated || p.Status != "succeeded" {
				t.Fatalf("final answer: %d %s; want 201 succeeded", final.status, final.body)
			}
			var rows int
			var id, status string
			if err := pool.QueryRow(ctx, `SELECT count(*), min(id), min(status) FROM payments WHERE idempotency_key = $1`, key).Scan(&rows, &id, &status); err != nil {
				t.Fatal(err)
			}
			if rows != 1 || id != p.ID || status != "succeeded" {
				t.Errorf("%d payment rows (%s %s); want one, %s succeeded, as the answer says", rows, id, status, p.ID)
			}
			derived := payments.ChargeKey(idem.ContextWithScope(ctx, idemstore.Scope{ClientID: "alice", Key: key}), p.ID)
			if n := chargesOf(t, proc.base, derived); n != 1 {
				t.Errorf("%d charges at the processor for the key; want 1", n)
			}
		})
	}
}

func recoveryPoint(ctx context.Context, pool *pgxpool.Pool, key string) string {
	var point *string
	if err := pool.QueryRow(ctx, `SELECT recovery_point FROM idempotency_keys WHERE idempotency_key = $1`, key).Scan(&point); err != nil || point == nil {
		return ""
	}
	return *point
}

// lockRow begins a transaction that locks the row query selects.
func lockRow(t *testing.T, pool *pgxpool.Pool, query, key string) pgx.Tx {
	t.Helper()
	tx, err := pool.Begin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var one int
	if err := tx.QueryRow(context.Background(), query, key).Scan(&one); err != nil {
		tx.Rollback(context.Background())
		t.Fatalf("lock the row: %v", err)
	}
	return tx
}

// waitForLockWait waits until a session of the database waits on a lock.
func waitForLockWait(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	waitFor(t, 60*time.Second, "a session waiting on the row lock", func() bool {
		var n int
		pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&n)
		return n > 0
	})
}

// retryWithIdemclient sends the payment as a client does: idemclient, one
// key, retries on 409 after Retry-After and on 5xx.
func retryWithIdemclient(t *testing.T, base, key, body string) answer {
	t.Helper()
	client, err := idemclient.New(&idemclient.Config{MaxAttempts: 50, MaxElapsed: 2 * time.Minute, AttemptTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequestWithContext(idemclient.WithKey(context.Background(), key), http.MethodPost, base+"/v1/payments", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer sk_a")
	res, err := client.Do(req)
	if err != nil {
		t.Fatalf("retry: %v", err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return answer{status: res.StatusCode, header: res.Header, body: b}
}

// TestKilledAtRecoveryPointsOnSQLite is TestKilledAtEachRecoveryPoint on
// SQLite: inside the charge; after processord recorded the charge, with
// the charge_created checkpoint kept from committing by the test's write
// lock; and after charge_created committed, before the final phase, where
// SQLite has no lock to hold: there paymentsd is built with the crashpoint
// tag and PAYMENTSD_CRASH_POINT, and holds the request for the kill.
func TestKilledAtRecoveryPointsOnSQLite(t *testing.T) {
	t.Parallel()
	paymentsd, processord := binaries(t)
	for _, point := range []string{"payment_created", "charged", "charge_created"} {
		t.Run(point, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			procDB := filepath.Join(dir, "proc.db")
			proc := start(t, processord, "-addr", "127.0.0.1:0", "-db", procDB, "-delay", "1s")
			payDB := filepath.Join(dir, "pay.db")
			args := []string{"-addr", "127.0.0.1:0", "-db", "sqlite:" + payDB,
				"-processor", proc.base, "-lock-timeout", "2s", "-resumer-interval", "0"}
			var svc *process
			if point == "charge_created" {
				svc = startWithEnv(t, crashBinary(t), []string{"PAYMENTSD_CRASH_POINT=charge_created"}, args...)
			} else {
				svc = start(t, paymentsd, args...)
			}
			db, err := idemsqlite.Open(payDB, &idemsqlite.Config{Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			ctx := context.Background()
			recoveryPoint := func() string {
				var p sql.NullString
				db.ReadDB().QueryRow(`SELECT recovery_point FROM idempotency_keys WHERE idempotency_key = ?`, key(point)).Scan(&p)
				return p.String
			}

			body := `{"amount":4200,"currency":"usd","customer":"cus_123"}`
			inflight := make(chan answer, 1)
			go func() { inflight <- post(t, svc.base, "sk_a", key(point), body) }()
			waitFor(t, 60*time.Second, "the pending payment", func() bool { return recoveryPoint() != "" })
			var lock *sql.Tx
			switch point {
			case "payment_created": // inside the processor's call
				proc.waitLog(t, "processord: charging")
			case "charged":
				// The write lock keeps charge_created from committing; the
				// charge is made once processord has recorded it.
				if lock, err = db.DB().BeginTx(ctx, nil); err != nil {
					t.Fatal(err)
				}
				waitFor(t, 60*time.Second, "the charge at processord", func() bool {
					return countRows(t, procDB, `SELECT count(*) FROM charges`) == 1
				})
			case "charge_created": // committed; the final phase has not begun
				svc.waitLog(t, "crash point charge_created reached")
			}
			svc.kill()
			if lock != nil {
				lock.Rollback()
			}
			if a := <-inflight; a.status != 0 {
				t.Fatalf("the killed request got an answer: %d %s", a.status, a.body)
			}
			want := "payment_created"
			if point == "charge_created" {
				want = "charge_created"
			}
			if got := recoveryPoint(); got != want {
				t.Fatalf("recovery point after the kill: %q; want %s", got, want)
			}
			if n := countRows(t, payDB, `SELECT count(*) FROM payments WHERE status = 'pending'`); n != 1 {
				t.Fatalf("%d pending payments after the kill; want 1", n)
			}

			svc = start(t, paymentsd, args...)
			final := retryWithIdemclient(t, svc.base, key(point), body)
			var pay struct{ ID, Status string }
			if err := json.Unmarshal(final.body, &pay); err != nil || final.status != http.StatusCreated || pay.Status != "succeeded" {
				t.Fatalf("final answer: %d %s; want 201 succeeded", final.status, final.body)
			}
			if n := countRows(t, payDB, `SELECT count(*) FROM payments WHERE idempotency_key = ? AND id = ? AND status = 'succeeded'`, key(point), pay.ID); n != 1 {
				t.Errorf("%d succeeded payment rows named by the answer; want 1", n)
			}
			if n := countRows(t, payDB, `SELECT count(*) FROM payments`); n != 1 {
				t.Errorf("%d payment rows; want 1", n)
			}
			derived := payments.ChargeKey(idem.ContextWithScope(ctx, idemstore.Scope{ClientID: "alice", Key: key(point)}), pay.ID)
			if n := chargesOf(t, proc.base, derived); n != 1 {
				t.Errorf("%d charges at the processor for the key; want 1", n)
			}
		})
	}
}

// key is the idempotency key of the crash test at point.
func key(point string) string { return "crash-" + point }
