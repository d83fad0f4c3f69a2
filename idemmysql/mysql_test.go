package idemmysql_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"errors"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/idemkit/idem/idemmysql"
	"github.com/idemkit/idem/idemstore"
)

// newestVersion is the number of the newest embedded migration.
const newestVersion = 3

func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func params(scope idemstore.Scope, body string, twoPhase bool) idemstore.ClaimParams {
	sum := sha256.Sum256([]byte(body))
	return idemstore.ClaimParams{
		Scope: scope, Method: "POST", Path: "/v1/payments", RequestHash: sum[:],
		TwoPhase: twoPhase, Now: time.Now(), LockTimeout: 30 * time.Second, Retention: 24 * time.Hour,
	}
}

func claim(t *testing.T, s *idemmysql.Store, p idemstore.ClaimParams) idemstore.ClaimResult {
	t.Helper()
	res, err := s.Claim(testCtx(t), p)
	if err != nil {
		t.Fatalf("Claim: %v", err)
	}
	return res
}

func TestSchemaVersionCreatesNothing(t *testing.T) {
	t.Parallel()
	store := openUnmigrated(t)
	ctx := testCtx(t)
	if v, err := store.SchemaVersion(ctx); err != nil || v != 0 {
		t.Fatalf("SchemaVersion = %d, %v; want 0", v, err)
	}
	var n int
	if err := store.DB().QueryRow(`SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = DATABASE()`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d tables after SchemaVersion (err %v); want none", n, err)
	}
}

func TestMigrateUpAndDown(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	store := openStore(t)
	if v, err := store.SchemaVersion(ctx); err != nil || v != newestVersion {
		t.Fatalf("SchemaVersion = %d, %v; want %d", v, err, newestVersion)
	}
	if err := store.MigrateTo(ctx, 1); err != nil { // down past the outbox
		t.Fatalf("MigrateTo(1): %v", err)
	}
	if err := store.Migrate(ctx); err != nil {
		t.Fatalf("second Migrate: %v", err)
	}
	if err := store.MigrateTo(ctx, 0); err != nil {
		t.Fatalf("MigrateTo(0): %v", err)
	}
	var n int
	if err := store.DB().QueryRow(`SELECT COUNT(*) FROM information_schema.tables
WHERE table_schema = DATABASE() AND table_name IN ('idempotency_keys', 'idem_outbox')`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("tables after migrating down: count %d, err %v; want gone", n, err)
	}
	if err := store.Migrate(ctx); err != nil {
		t.Fatalf("Migrate after down: %v", err)
	}
	if v, _ := store.SchemaVersion(ctx); v != newestVersion {
		t.Fatalf("SchemaVersion = %d after re-migrating, want %d", v, newestVersion)
	}
}

// TestMigrateConcurrently starts several instances at once on an empty
// database: the migration lock lets each step run once.
func TestMigrateConcurrently(t *testing.T) {
	t.Parallel()
	dsn := newDatabase(t)
	ctx := testCtx(t)
	const instances = 4
	var (
		wg   sync.WaitGroup
		errs = make([]error, instances)
	)
	stores := make([]*idemmysql.Store, instances)
	for i := range stores {
		s, err := idemmysql.Open(ctx, dsn, nil)
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		t.Cleanup(func() { s.Close() })
		stores[i] = s
	}
	for i, s := range stores {
		wg.Go(func() { errs[i] = s.Migrate(ctx) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("concurrent Migrate: %v", err)
	}
	var n int
	if err := stores[0].DB().QueryRow(`SELECT COUNT(*) FROM idem_schema_migrations`).Scan(&n); err != nil || n != newestVersion {
		t.Fatalf("%d migrations recorded (err %v), want %d, each once", n, err, newestVersion)
	}
	if err := stores[0].Ready(ctx); err != nil {
		t.Fatalf("Ready after migrating: %v", err)
	}
}

func TestReadyWantsMigrations(t *testing.T) {
	t.Parallel()
	store := openUnmigrated(t)
	var sv *idemstore.SchemaVersionError
	if err := store.Ready(testCtx(t)); !errors.As(err, &sv) || sv.Have != 0 || sv.Want != newestVersion {
		t.Fatalf("Ready of an unmigrated database = %v, want a SchemaVersionError 0 < %d", err, newestVersion)
	}
}

// TestRefusesLaxSQLMode: a server that would truncate a response instead
// of failing is refused at Open.
func TestRefusesLaxSQLMode(t *testing.T) {
	t.Parallel()
	cfg, err := mysql.ParseDSN(newDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Params = map[string]string{"sql_mode": "'NO_ENGINE_SUBSTITUTION'"}
	_, err = idemmysql.Open(testCtx(t), cfg.FormatDSN(), nil)
	if !errors.Is(err, idemmysql.ErrNotStrict) {
		t.Fatalf("Open with a lax sql_mode = %v, want ErrNotStrict", err)
	}
}

// TestKeysAndBodiesAreBytes: keys differing only in case or a trailing
// space are different keys, and a body that is not UTF-8 comes back byte
// for byte.
func TestKeysAndBodiesAreBytes(t *testing.T) {
	t.Parallel()
	store := openStore(t)
	ctx := testCtx(t)
	body := []byte{0xff, 0xfe, 0x00, 'a', 0xc3, 0x28, ' ', ' '}
	for i, key := range []string{"Key", "key", "key "} {
		scope := idemstore.Scope{ClientID: "alice", Key: key}
		res := claim(t, store, params(scope, "a", false))
		if res.Lease == nil {
			t.Fatalf("claim %d (%q) found %+v, want a new key", i, key, res.Record)
		}
		if err := res.Lease.Complete(ctx, &idemstore.Response{StatusCode: 201, Header: http.Header{}, Body: body}); err != nil {
			t.Fatalf("Complete: %v", err)
		}
	}
	rec, err := store.GetKey(ctx, idemstore.Scope{ClientID: "alice", Key: "key "})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(rec.Response.Body, body) {
		t.Fatalf("body = %x, want %x", rec.Response.Body, body)
	}
}

// TestDeadlockIsConflict: two atomic leases whose handlers lock two rows
// in opposite orders deadlock; InnoDB rolls one back (error 1213), whose
// lease then reports a conflict for the middleware to rerun it.
func TestDeadlockIsConflict(t *testing.T) {
	t.Parallel()
	store := openStore(t)
	ctx := testCtx(t)
	if _, err := store.DB().Exec(`CREATE TABLE accounts (id INT PRIMARY KEY, balance INT NOT NULL) ENGINE = InnoDB`); err != nil {
		t.Fatal(err)
	}
	if _, err := store.DB().Exec(`INSERT INTO accounts VALUES (1, 0), (2, 0)`); err != nil {
		t.Fatal(err)
	}
	var leases [2]idemstore.Lease
	var txs [2]*sql.Tx
	for i := range leases {
		res := claim(t, store, params(idemstore.Scope{ClientID: "alice", Key: "k" + string(rune('a'+i))}, "a", false))
		if res.Lease == nil {
			t.Fatal("no lease")
		}
		leases[i] = res.Lease
		t.Cleanup(func() { res.Lease.Release(context.Background()) }) // after a failure; else ErrLeaseEnded
		tx, err := idemmysql.TxFromContext(res.Lease.Context(ctx))
		if err != nil {
			t.Fatal(err)
		}
		txs[i] = tx
		if _, err := tx.ExecContext(ctx, `UPDATE accounts SET balance = balance + 1 WHERE id = ?`, i+1); err != nil {
			t.Fatal(err)
		}
	}
	// Each now asks for the other's row: whichever asks second closes the
	// cycle, and InnoDB rolls one of them back at once.
	errs := make(chan error, 2)
	go func() {
		_, err := txs[0].ExecContext(ctx, `UPDATE accounts SET balance = balance + 1 WHERE id = 2`)
		errs <- err
	}()
	go func() {
		_, err := txs[1].ExecContext(ctx, `UPDATE accounts SET balance = balance + 1 WHERE id = 1`)
		errs <- err
	}()
	var deadlocks int
	for range 2 {
		var me *mysql.MySQLError
		if err := <-errs; errors.As(err, &me) && me.Number == 1213 {
			deadlocks++
		} else if err != nil {
			t.Fatalf("handler statement: %v", err)
		}
	}
	if deadlocks != 1 {
		t.Fatalf("%d deadlocks, want 1", deadlocks)
	}
	var conflicted int
	for _, l := range leases {
		if l.(idemstore.ConflictReporter).Conflicted() {
			conflicted++
			if err := l.Release(ctx); err != nil {
				t.Fatalf("Release: %v", err)
			}
		} else if err := l.Complete(ctx, &idemstore.Response{StatusCode: 201, Header: http.Header{}}); err != nil {
			t.Fatalf("Complete of the survivor: %v", err)
		}
	}
	if conflicted != 1 {
		t.Fatalf("%d leases report a conflict, want the one rolled back", conflicted)
	}
}

// TestLeaderIsExclusive: one holder of a leader's lock per database and
// name, across stores (instances); unlock frees it, and another name or
// another database is another lock.
func TestLeaderIsExclusive(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	dsn := newDatabase(t)
	var stores [2]*idemmysql.Store
	for i := range stores {
		s, err := idemmysql.Open(ctx, dsn, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		stores[i] = s
	}
	unlock, held, err := stores[0].TryLead(ctx, "resumer")
	if err != nil || !held {
		t.Fatalf("first TryLead = %v, %v; want held", held, err)
	}
	if _, held, err := stores[1].TryLead(ctx, "resumer"); err != nil || held {
		t.Fatalf("second TryLead while held = %v, %v; want not held", held, err)
	}
	other, held, err := stores[1].TryLead(ctx, "purger")
	if err != nil || !held {
		t.Fatalf("TryLead of another name = %v, %v; want held", held, err)
	}
	other()
	elsewhere := openStore(t) // another database on the same server
	u, held, err := elsewhere.TryLead(ctx, "resumer")
	if err != nil || !held {
		t.Fatalf("TryLead in another database = %v, %v; want held", held, err)
	}
	u()
	unlock()
	unlock() // a second unlock does nothing
	again, held, err := stores[1].TryLead(ctx, "resumer")
	if err != nil || !held {
		t.Fatalf("TryLead after unlock = %v, %v; want held", held, err)
	}
	again()
}
