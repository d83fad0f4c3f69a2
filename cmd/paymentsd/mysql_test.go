package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/cmd/internal/database"
	"github.com/idemkit/idem/cmd/internal/mysqltest"
	"github.com/idemkit/idem/cmd/internal/payments"
	"github.com/idemkit/idem/idemstore"
)

// mysqlLockWait is paymentsd's innodb_lock_wait_timeout in the tests that
// hold a row it needs: long enough that its statement still waits when
// the test kills it, however loaded the machine.
const mysqlLockWait = "innodb_lock_wait_timeout=120"

// openMySQL opens a small pool of the test's own on the database of a
// mysql:// URL.
func openMySQL(t *testing.T, dbURL string) *sql.DB {
	t.Helper()
	dsn, err := database.MySQLDSN(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(4)
	t.Cleanup(func() { db.Close() })
	return db
}

// TestKilledAtEachRecoveryPointOnMariaDB is TestKilledAtEachRecoveryPoint
// on a mysql:// database: paymentsd (two-phase payments) is SIGKILLed
// inside the processor's call; after processord recorded the charge, with
// the charge_created checkpoint waiting on a row lock the test holds on the
// key; and after charge_created committed, with the final phase waiting
// on the payment's row. A retry with idemclient on a new paymentsd then
// finishes the payment: one charge at processord, one payment row,
// succeeded, and a 201 that names it. The resumer is off, so that the
// retry is what resumes.
//
// paymentsd's lock wait is raised for the test (mysqlLockWait): with the
// store's default of 5 s, a wait on the test's lock can end in error 1205
// before the kill on a loaded machine, and the request then answers
// instead of dying at the point.
func TestKilledAtEachRecoveryPointOnMariaDB(t *testing.T) {
	t.Parallel()
	paymentsd, processord := binaries(t)
	for _, point := range []string{"payment_created", "charged", "charge_created"} {
		t.Run(point, func(t *testing.T) {
			t.Parallel()
			dbURL := mysqltest.NewDatabase(t)
			proc := start(t, processord, "-addr", "127.0.0.1:0", "-db", filepath.Join(t.TempDir(), "proc.db"), "-delay", "1s")
			args := []string{"-addr", "127.0.0.1:0", "-db", dbURL + "?" + mysqlLockWait, "-migrate",
				"-processor", proc.base, "-lock-timeout", "2s", "-resumer-interval", "0"}
			svc := start(t, paymentsd, args...)
			db := openMySQL(t, dbURL)
			ctx := context.Background()
			key := "crash-" + point
			recoveryPoint := func() string {
				var p sql.NullString
				db.QueryRowContext(ctx, `SELECT recovery_point FROM idempotency_keys WHERE idempotency_key = ?`, key).Scan(&p)
				return p.String
			}

			body := `{"amount":4200,"currency":"usd","customer":"cus_123"}`
			inflight := make(chan answer, 1)
			go func() { inflight <- post(t, svc.base, "sk_a", key, body) }()
			waitFor(t, 60*time.Second, "the pending payment", func() bool { return recoveryPoint() == "payment_created" })

			var lock *sql.Tx
			switch point {
			case "payment_created": // inside the processor's call
				proc.waitLog(t, "processord: charging")
			case "charged": // the processor answered; the charge_created checkpoint waits
				lock = lockMySQLRow(t, db, `SELECT 1 FROM idempotency_keys WHERE idempotency_key = ? FOR UPDATE`, key)
				waitForMySQLStatement(t, db, "UPDATE idempotency_keys SET recovery_point = 'charge_created'")
			case "charge_created": // the final phase waits to settle the payment
				lock = lockMySQLRow(t, db, `SELECT 1 FROM payments WHERE idempotency_key = ? FOR UPDATE`, key)
				waitForMySQLStatement(t, db, "UPDATE payments SET status")
				if got := recoveryPoint(); got != "charge_created" {
					t.Fatalf("recovery point %q when the final phase waits; want charge_created", got)
				}
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

			svc = start(t, paymentsd, args...)
			final := retryWithIdemclient(t, svc.base, key, body)
			var p struct{ ID, Status string }
			if err := json.Unmarshal(final.body, &p); err != nil || final.status != http.StatusCreated || p.Status != "succeeded" {
				t.Fatalf("final answer: %d %s; want 201 succeeded", final.status, final.body)
			}
			var rows int
			var id, status sql.NullString
			if err := db.QueryRowContext(ctx, `SELECT count(*), min(id), min(status) FROM payments WHERE idempotency_key = ?`, key).Scan(&rows, &id, &status); err != nil {
				t.Fatal(err)
			}
			if rows != 1 || id.String != p.ID || status.String != "succeeded" {
				t.Errorf("%d payment rows (%s %s); want one, %s succeeded, as the answer says", rows, id.String, status.String, p.ID)
			}
			derived := payments.ChargeKey(idem.ContextWithScope(ctx, idemstore.Scope{ClientID: "alice", Key: key}), p.ID)
			if n := chargesOf(t, proc.base, derived); n != 1 {
				t.Errorf("%d charges at the processor for the key; want 1", n)
			}
		})
	}
}

// lockMySQLRow begins a transaction that locks the row query selects.
func lockMySQLRow(t *testing.T, db *sql.DB, query, key string) *sql.Tx {
	t.Helper()
	tx, err := db.BeginTx(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var one int
	if err := tx.QueryRow(query, key).Scan(&one); err != nil {
		tx.Rollback()
		t.Fatalf("lock the row: %v", err)
	}
	t.Cleanup(func() { tx.Rollback() })
	return tx
}

// waitForMySQLStatement waits until a session on the test's database runs
// a statement that begins with prefix (other databases of the server are
// not looked at). With the row it writes locked by the test, the statement
// cannot end: it waits on the lock. The sessions are read from the process
// list, not from information_schema.innodb_trx, which MariaDB 10.11 was
// seen to leave without the waiting transaction for a minute on end.
func waitForMySQLStatement(t *testing.T, db *sql.DB, prefix string) {
	t.Helper()
	waitFor(t, 60*time.Second, "a session running "+prefix+"...", func() bool {
		var n int
		db.QueryRow(`SELECT count(*) FROM information_schema.processlist
WHERE db = DATABASE() AND command = 'Query' AND info LIKE CONCAT(?, '%')`, prefix).Scan(&n)
		return n > 0
	})
}

// TestThreeInstancesOneMariaDB runs three paymentsd processes on one
// MariaDB database (all migrating at start) and sends 300 keys, each 8
// times at once, spread over the three: exactly one payment and one
// charge per key, every answer a 201, a byte-identical replay of it, or a
// 409; no 5xx.
func TestThreeInstancesOneMariaDB(t *testing.T) {
	t.Parallel()
	paymentsd, processord := binaries(t)
	dbURL := mysqltest.NewDatabase(t)
	proc := start(t, processord, "-addr", "127.0.0.1:0", "-db", filepath.Join(t.TempDir(), "proc.db"))
	instances := make([]*process, 3)
	var wg sync.WaitGroup
	for i := range instances {
		wg.Add(1)
		go func() {
			defer wg.Done()
			instances[i] = start(t, paymentsd, "-addr", "127.0.0.1:0", "-migrate", "-db", dbURL, "-processor", proc.base)
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}

	const keys, copies = 300, 8
	results := make([][copies]answer, keys)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	storm, cancel := context.WithTimeout(context.Background(), multiStormDeadline)
	defer cancel()
	work := make(chan int)
	var workers sync.WaitGroup
	for range 8 { // 8 keys in flight, 64 requests at once
		workers.Add(1)
		go func() {
			defer workers.Done()
			for k := range work {
				var burst sync.WaitGroup
				start := make(chan struct{})
				for c := range copies {
					burst.Add(1)
					go func() {
						defer burst.Done()
						<-start
						base := instances[(k+c)%len(instances)].base
						// never ending in 02, which processord declines
						results[k][c] = postCtx(storm, client, base, "sk_a", fmt.Sprintf("storm-%d", k), fmt.Sprintf(`{"amount":%d,"currency":"usd","customer":"cus_%d"}`, 100*k+101, k))
					}()
				}
				close(start)
				burst.Wait()
			}
		}()
	}
	for k := range keys {
		work <- k
	}
	close(work)
	workers.Wait()
	if storm.Err() != nil {
		t.Fatalf("the storm did not end within %v", multiStormDeadline)
	}

	statuses := map[string]int{}
	for k, copies := range results {
		var original []byte
		for _, a := range copies {
			if a.status == http.StatusCreated && a.header.Get("Idempotent-Replayed") != "true" {
				if original != nil {
					t.Errorf("key %d executed twice", k)
				}
				original = a.body
			}
		}
		for _, a := range copies {
			switch {
			case a.status == http.StatusCreated && a.header.Get("Idempotent-Replayed") == "true":
				statuses["201 replay"]++
				if original == nil || string(a.body) != string(original) {
					t.Errorf("key %d: replay %s differs from the original %s", k, a.body, original)
				}
			case a.status == http.StatusCreated:
				statuses["201"]++
			case a.status == http.StatusConflict:
				statuses["409"]++
			default:
				statuses[fmt.Sprint(a.status)]++
				t.Errorf("key %d: status %d: %s", k, a.status, a.body)
			}
		}
	}
	t.Logf("answers: %v", statuses)
	if statuses["201"] != keys {
		t.Errorf("%d original 201s, want one per key (%d)", statuses["201"], keys)
	}

	db := openMySQL(t, dbURL)
	var rows, distinct int
	if err := db.QueryRow(`SELECT count(*), count(DISTINCT idempotency_key) FROM payments`).Scan(&rows, &distinct); err != nil {
		t.Fatal(err)
	}
	if rows != keys || distinct != keys {
		t.Fatalf("%d payment rows for %d distinct keys, want exactly %d", rows, distinct, keys)
	}
	// The stored answer of each key is the one the client got.
	var mismatched []string
	for k := range keys {
		var stored []byte
		if err := db.QueryRow(`SELECT response_body FROM idempotency_keys WHERE client_id = 'alice' AND idempotency_key = ?`, fmt.Sprintf("storm-%d", k)).Scan(&stored); err != nil {
			t.Fatalf("key %d: %v", k, err)
		}
		for _, a := range results[k] {
			if a.status == http.StatusCreated && string(a.body) != string(stored) {
				mismatched = append(mismatched, fmt.Sprint(k))
				break
			}
		}
		var p struct{ ID string }
		if err := json.Unmarshal(stored, &p); err != nil {
			t.Fatalf("key %d: stored body %s: %v", k, stored, err)
		}
		derived := payments.ChargeKey(idem.ContextWithScope(context.Background(), idemstore.Scope{ClientID: "alice", Key: fmt.Sprintf("storm-%d", k)}), p.ID)
		if n := chargesOf(t, proc.base, derived); n != 1 {
			t.Errorf("key %d: %d charges at the processor; want 1", k, n)
		}
	}
	if len(mismatched) > 0 {
		t.Errorf("keys whose answer differs from the stored response: %s", strings.Join(mismatched, ", "))
	}
}
