package idempg_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idempg"
	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// quiet is the logger of the tests' stores and middleware.
var quiet = slog.New(slog.DiscardHandler)

// testTimeout bounds every database call of a test.
const testTimeout = 30 * time.Second

// Clock values for claims; the store must take time from ClaimParams.Now.
var (
	epoch       = time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	lockTimeout = 30 * time.Second
	retention   = 24 * time.Hour
)

// newPool opens a pool on connString with at most maxConns connections
// (0: pgxpool's default), closed when the test ends.
func newPool(t testing.TB, connString string, maxConns int32) *pgxpool.Pool {
	t.Helper()
	return newPoolWith(t, connString, func(cfg *pgxpool.Config) {
		if maxConns > 0 {
			cfg.MaxConns = maxConns
		}
	})
}

// newPoolWith opens a pool on connString whose configuration configure
// changes first, closed when the test ends.
func newPoolWith(t testing.TB, connString string, configure func(*pgxpool.Config)) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(connString)
	if err != nil {
		t.Fatalf("parse pool config: %v", err)
	}
	configure(cfg)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("open pool: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// setup returns a migrated store on a fresh database that also holds a
// business table.
func setup(t testing.TB, cfg *idempg.Config) *idempg.Store {
	t.Helper()
	return setupOn(t, newPool(t, pgtest.NewDatabase(t), 8), cfg)
}

// setupOn migrates a store on pool and creates the business table.
func setupOn(t testing.TB, pool *pgxpool.Pool, cfg *idempg.Config) *idempg.Store {
	t.Helper()
	c := idempg.Config{}
	if cfg != nil {
		c = *cfg
	}
	if c.Logger == nil {
		c.Logger = quiet
	}
	store, err := idempg.New(pool, &c)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	if err := store.Migrate(ctx); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE business (id bigserial PRIMARY KEY, value text NOT NULL)`); err != nil {
		t.Fatalf("create business table: %v", err)
	}
	return store
}

// write inserts one business row in the lease's transaction in ctx.
func write(ctx context.Context, value string) error {
	tx, err := idempg.TxFromContext(ctx)
	if err != nil {
		return err
	}
	_, err = tx.Exec(ctx, `INSERT INTO business (value) VALUES ($1)`, value)
	return err
}

// countRows counts the committed business rows that recorded value.
func countRows(t testing.TB, store *idempg.Store, value string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	var n int
	if err := store.Pool().QueryRow(ctx, `SELECT count(*) FROM business WHERE value = $1`, value).Scan(&n); err != nil {
		t.Fatalf("count business rows: %v", err)
	}
	return n
}

var keySeq atomic.Int64

func newScope(client string) idemstore.Scope {
	return idemstore.Scope{ClientID: client, Key: fmt.Sprintf("key-%d", keySeq.Add(1))}
}

func hashOf(s string) []byte {
	sum := sha256.Sum256([]byte(s))
	return sum[:]
}

func params(mode idem.Mode, scope idemstore.Scope, body string, now time.Time) idemstore.ClaimParams {
	return idemstore.ClaimParams{
		Scope: scope, Method: http.MethodPost, Path: "/v1/payments",
		RequestHash: hashOf(body), TwoPhase: mode == idem.ModeTwoPhase, Now: now, LockTimeout: lockTimeout, Retention: retention,
	}
}

func claim(t testing.TB, store *idempg.Store, p idemstore.ClaimParams) idemstore.ClaimResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	res, err := store.Claim(ctx, p)
	if err != nil {
		t.Fatalf("Claim: %v", err)
	}
	return res
}

func mustLease(t testing.TB, store *idempg.Store, p idemstore.ClaimParams) idemstore.Lease {
	t.Helper()
	res := claim(t, store, p)
	if res.Lease == nil {
		t.Fatalf("Claim returned a record (status %q); want a lease", res.Record.Status)
	}
	return res.Lease
}

func mustRecord(t testing.TB, store *idempg.Store, p idemstore.ClaimParams) *idemstore.Record {
	t.Helper()
	res := claim(t, store, p)
	if res.Lease == nil {
		return res.Record
	}
	res.Lease.Release(context.Background())
	t.Fatalf("Claim returned a lease (token %d); want the existing record", res.Lease.Info().Token)
	return nil
}

func response(body string) *idemstore.Response {
	return &idemstore.Response{
		StatusCode: http.StatusCreated,
		Header:     http.Header{"Content-Type": {"application/json"}},
		Body:       []byte(body),
	}
}

func complete(t testing.TB, l idemstore.Lease, body string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	if err := l.Complete(ctx, response(body)); err != nil {
		t.Fatalf("Complete: %v", err)
	}
}

var modes = []idem.Mode{idem.ModeAtomic, idem.ModeTwoPhase}

// schemaPool returns a pool on the database at connString whose
// connections work in a new, empty schema: a fresh store without the cost
// of a new database.
func schemaPool(t testing.TB, admin *pgxpool.Pool, connString string) *pgxpool.Pool {
	t.Helper()
	schema := fmt.Sprintf("store_%d", keySeq.Add(1))
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatalf("create schema: %v", err)
	}
	return newPoolWith(t, connString, func(cfg *pgxpool.Config) {
		cfg.MaxConns = 8
		cfg.ConnConfig.RuntimeParams["search_path"] = schema
	})
}

func TestConformance(t *testing.T) {
	t.Parallel()
	connString := pgtest.NewDatabase(t)
	admin := newPool(t, connString, 2)
	for _, tt := range []struct {
		name string
		cfg  *idempg.Config
	}{
		{"Default", nil},
		{"TransactionPooling", &idempg.Config{TransactionPooling: true}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			idemtest.RunStoreTests(t, idemtest.Harness{
				NewStore: func(t *testing.T) idemstore.Store {
					return setupOn(t, schemaPool(t, admin, connString), tt.cfg)
				},
				Write: func(ctx context.Context, _ idemstore.Store, value string) error {
					return write(ctx, value)
				},
				Count: func(t *testing.T, s idemstore.Store, value string) int {
					return countRows(t, s.(*idempg.Store), value)
				},
				NewUnmigrated: func(t *testing.T) idemstore.Store {
					store, err := idempg.New(schemaPool(t, admin, connString), &idempg.Config{Logger: quiet})
					if err != nil {
						t.Fatalf("New: %v", err)
					}
					return store
				},
			})
		})
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	t.Parallel()
	pool := newPool(t, "postgres://127.0.0.1:1/none", 1) // never connects: pools dial lazily
	tests := []struct {
		name string
		cfg  *idempg.Config
	}{
		{"NegativeAcquireTimeout", &idempg.Config{AcquireTimeout: -time.Second}},
		{"SubMillisecondLockTimeout", &idempg.Config{ClaimLockTimeout: time.Microsecond}},
		{"UnknownIsoLevel", &idempg.Config{IsoLevel: "read sometimes"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if _, err := idempg.New(pool, tt.cfg); err == nil {
				t.Errorf("New(%+v) succeeded; want an error", tt.cfg)
			}
		})
	}
	if _, err := idempg.New(nil, nil); err == nil {
		t.Errorf("New(nil pool) succeeded; want an error")
	}
}

func TestTxFromContextWithoutLease(t *testing.T) {
	t.Parallel()
	if _, err := idempg.TxFromContext(context.Background()); !errors.Is(err, idempg.ErrNoTx) {
		t.Errorf("TxFromContext(no lease) = %v, want ErrNoTx", err)
	}
}

func TestReplayedRecordKeepsBytesAndTimes(t *testing.T) {
	t.Parallel()
	store := setup(t, nil)
	for _, mode := range modes {
		t.Run(mode.String(), func(t *testing.T) {
			scope := newScope("alice")
			// Not JSON-normalized: key order, spacing and a duplicate key
			// must all survive.
			body := `{"z": 1,  "a":2, "a":3}`
			complete(t, mustLease(t, store, params(mode, scope, "a", epoch)), body)
			rec := mustRecord(t, store, params(mode, scope, "a", epoch.Add(time.Hour)))
			if string(rec.Response.Body) != body {
				t.Errorf("replayed body %q, want %q byte for byte", rec.Response.Body, body)
			}
			if !rec.CreatedAt.Equal(epoch) || !rec.LockedAt.Equal(epoch) {
				t.Errorf("created %v locked %v, want both %v (the claim's Now)", rec.CreatedAt, rec.LockedAt, epoch)
			}
		})
	}
}
