package main

import (
	"context"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem/internal/pgtest"
)

// abandon sends a payment to svc and kills svc while the card processor
// charges it: the payment is committed as pending (recovery point
// payment_created), the charge happens at the processor, and the client
// never retries.
func abandon(t *testing.T, svc, proc *process, key, body string) {
	t.Helper()
	inflight := make(chan answer, 1)
	go func() { inflight <- post(t, svc.base, "sk_a", key, body) }()
	proc.waitLog(t, "processord: charging")
	svc.kill()
	if a := <-inflight; a.status != 0 {
		t.Fatalf("the killed request got an answer: %d %s", a.status, a.body)
	}
}

// pollStatus polls status until it returns want, for at most 60 s.
func pollStatus(t *testing.T, want string, status func() string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for got := status(); got != want; got = status() {
		if time.Now().After(deadline) {
			t.Fatalf("payment status %q after 60 s; want %q", got, want)
		}
		time.Sleep(100 * time.Millisecond) // a poll, not a synchronisation: the deadline is generous
	}
}

// TestResumerFinishesAbandonedPayment: a payment whose process died after
// payment_created, and whose client never came back, is finished by the
// resumer of a restarted instance: one charge, one payment, succeeded,
// and the client that finally returns gets the stored 201.
func TestResumerFinishesAbandonedPaymentOnSQLite(t *testing.T) {
	t.Parallel()
	paymentsd, processord := binaries(t)
	dir := t.TempDir()
	procDB := filepath.Join(dir, "proc.db")
	proc := start(t, processord, "-addr", "127.0.0.1:0", "-db", procDB, "-delay", "500ms")
	payDB := filepath.Join(dir, "pay.db")
	args := []string{"-addr", "127.0.0.1:0", "-db", "sqlite:" + payDB,
		"-processor", proc.base, "-lock-timeout", "2s", "-resumer-interval", "1s"}
	body := `{"amount":4200,"currency":"usd","customer":"cus_123"}`
	abandon(t, start(t, paymentsd, args...), proc, "gone-key", body)

	svc := start(t, paymentsd, args...)
	pollStatus(t, "succeeded", func() string {
		if countRows(t, payDB, `SELECT count(*) FROM payments WHERE idempotency_key = ? AND status = 'succeeded'`, "gone-key") == 1 {
			return "succeeded"
		}
		return "not succeeded"
	})
	back := post(t, svc.base, "sk_a", "gone-key", body)
	if back.status != http.StatusCreated || back.header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("client's return: %d %s; want the stored 201", back.status, back.body)
	}
	svc.kill()
	proc.kill()
	if n := countRows(t, payDB, `SELECT count(*) FROM payments WHERE idempotency_key = ?`, "gone-key"); n != 1 {
		t.Errorf("%d payment rows, want 1", n)
	}
	if n := countRows(t, procDB, `SELECT count(*) FROM charges`); n != 1 {
		t.Errorf("%d charges at the processor, want 1", n)
	}
}

// TestResumerOnTwoPostgresInstances: the same on PostgreSQL, with two
// instances running resumers: the payment is finished once.
func TestResumerOnTwoPostgresInstances(t *testing.T) {
	t.Parallel()
	paymentsd, processord := binaries(t)
	dir := t.TempDir()
	procDB := filepath.Join(dir, "proc.db")
	proc := start(t, processord, "-addr", "127.0.0.1:0", "-db", procDB, "-delay", "500ms")
	dbURL := pgtest.NewDatabase(t)
	args := []string{"-addr", "127.0.0.1:0", "-db", withPoolSize(dbURL, 4),
		"-processor", proc.base, "-lock-timeout", "2s", "-resumer-interval", "1s"}
	body := `{"amount":4200,"currency":"usd","customer":"cus_123"}`
	b := start(t, paymentsd, args...)
	abandon(t, start(t, paymentsd, args...), proc, "gone-key", body)
	a := start(t, paymentsd, args...)

	ctx := context.Background()
	pool, err := pgxpool.New(ctx, withPoolSize(dbURL, 2))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	pollStatus(t, "succeeded", func() string {
		var status string
		if err := pool.QueryRow(ctx, `SELECT status FROM payments WHERE idempotency_key = $1`, "gone-key").Scan(&status); err != nil {
			return err.Error()
		}
		return status
	})
	back := post(t, a.base, "sk_a", "gone-key", body)
	if back.status != http.StatusCreated || back.header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("client's return: %d %s; want the stored 201", back.status, back.body)
	}
	a.kill()
	b.kill()
	proc.kill()
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM payments WHERE idempotency_key = $1`, "gone-key").Scan(&n); err != nil || n != 1 {
		t.Errorf("%d payment rows (err %v), want 1", n, err)
	}
	if n := countRows(t, procDB, `SELECT count(*) FROM charges`); n != 1 {
		t.Errorf("%d charges at the processor, want 1", n)
	}
}
