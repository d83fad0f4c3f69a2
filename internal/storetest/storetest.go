// Package storetest opens real stores, each with a business table written
// in the key's transaction, for the tests of idem's fronts (gRPC, Connect,
// message consumers): one place for what each front's tests would
// otherwise repeat. PostgreSQL databases come from pgtest, one per test;
// SQLite files live in the test's directory.
package storetest

import (
	"context"
	"database/sql"
	"errors"
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idem/idemconsume/idemconsumetest"
	"github.com/idemkit/idem/idempg"
	"github.com/idemkit/idem/idemsqlite"
	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/internal/pgtest"
)

var quiet = slog.New(slog.DiscardHandler)

// DB is a migrated store and its business table, `business (id, key)`.
type DB struct {
	Store idemstore.Store

	// Insert writes a business row for key in the transaction the store
	// put in ctx (atomic mode) and returns the row's id.
	Insert func(ctx context.Context, key string) (int64, error)

	// Count counts the committed business rows for key.
	Count func(ctx context.Context, key string) (int, error)

	// Rows counts every committed business row; 0 once Down was called.
	Rows func(t testing.TB) int

	// Down closes the store's connections, so that every later call of
	// the store fails, as when its database is unreachable.
	Down func()
}

// Backend opens a DB of one kind for a test.
type Backend struct {
	Name string
	Open func(t *testing.T) *DB
}

// Backends are the stores a front's tests run on.
var Backends = []Backend{{"SQLite", SQLite}, {"PostgreSQL", PostgreSQL}}

// SQLite opens an idemsqlite store in the test's directory.
func SQLite(t *testing.T) *DB {
	t.Helper()
	store, err := idemsqlite.Open(filepath.Join(t.TempDir(), "idem.db"), &idemsqlite.Config{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	if err := store.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := store.DB().Exec(`CREATE TABLE business (id INTEGER PRIMARY KEY AUTOINCREMENT, key TEXT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	return &DB{
		Store: store,
		Insert: func(ctx context.Context, key string) (int64, error) {
			tx, err := idemsqlite.TxFromContext(ctx)
			if err != nil {
				return 0, err
			}
			var id int64
			err = tx.QueryRowContext(ctx, `INSERT INTO business (key) VALUES (?) RETURNING id`, key).Scan(&id)
			return id, err
		},
		Count: func(ctx context.Context, key string) (n int, err error) {
			err = store.ReadDB().QueryRowContext(ctx, `SELECT count(*) FROM business WHERE key = ?`, key).Scan(&n)
			return n, err
		},
		Rows: func(t testing.TB) int {
			var n int
			if err := store.ReadDB().QueryRow(`SELECT count(*) FROM business`).Scan(&n); err != nil && !errors.Is(err, sql.ErrConnDone) {
				t.Fatal(err)
			}
			return n
		},
		Down: func() { store.Close() },
	}
}

// PostgreSQL opens an idempg store on a database of the test's own.
func PostgreSQL(t *testing.T) *DB {
	t.Helper()
	pool := pgtest.NewPool(t)
	store, err := idempg.New(pool, &idempg.Config{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := store.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE business (id bigserial PRIMARY KEY, key text NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	return &DB{
		Store: store,
		Insert: func(ctx context.Context, key string) (int64, error) {
			tx, err := idempg.TxFromContext(ctx)
			if err != nil {
				return 0, err
			}
			var id int64
			err = tx.QueryRow(ctx, `INSERT INTO business (key) VALUES ($1) RETURNING id`, key).Scan(&id)
			return id, err
		},
		Count: func(ctx context.Context, key string) (n int, err error) {
			err = pool.QueryRow(ctx, `SELECT count(*) FROM business WHERE key = $1`, key).Scan(&n)
			return n, err
		},
		Rows: func(t testing.TB) int {
			var n int
			if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM business`).Scan(&n); err != nil && !errors.Is(err, pgx.ErrTxClosed) {
				t.Fatal(err)
			}
			return n
		},
		Down: pool.Close,
	}
}

// ConsumeEnv is d as the environment of idemconsumetest's suite: a
// message's effect is a business row keyed by its name.
func ConsumeEnv(d *DB) idemconsumetest.Env {
	return idemconsumetest.Env{
		Store: d.Store,
		Apply: func(ctx context.Context, name string) error {
			_, err := d.Insert(ctx, name)
			return err
		},
		Applied: d.Count,
	}
}
