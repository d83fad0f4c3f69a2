package idemnats_test

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/idemkit/idem/idemconsume/idemconsumetest"
	"github.com/idemkit/idem/idempg"
	"github.com/idemkit/idem/idemsqlite"
	"github.com/idemkit/idem/internal/pgtest"
)

func TestMain(m *testing.M) {
	if role := os.Getenv(childEnv); role != "" {
		os.Exit(runChild(role))
	}
	pgtest.Main(m)
}

var quiet = slog.New(slog.DiscardHandler)

// pgEnv is a PostgreSQL database of the test's own with an effects table
// that counts every committed write.
func pgEnv(t *testing.T) idemconsumetest.Env {
	t.Helper()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	store, err := idempg.New(pool, &idempg.Config{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE effects (name text NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	return idemconsumetest.Env{
		Store: store,
		Apply: func(ctx context.Context, name string) error {
			tx, err := idempg.TxFromContext(ctx)
			if err != nil {
				return err
			}
			_, err = tx.Exec(ctx, `INSERT INTO effects (name) VALUES ($1)`, name)
			return err
		},
		Applied: func(ctx context.Context, name string) (n int, err error) {
			err = pool.QueryRow(ctx, `SELECT count(*) FROM effects WHERE name = $1`, name).Scan(&n)
			return n, err
		},
	}
}

// sqliteEnv is a SQLite database in the test's directory.
func sqliteEnv(t *testing.T) idemconsumetest.Env {
	t.Helper()
	ctx := context.Background()
	store, err := idemsqlite.Open(filepath.Join(t.TempDir(), "idem.db"), &idemsqlite.Config{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	if err := store.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := store.DB().ExecContext(ctx, `CREATE TABLE effects (name TEXT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	return idemconsumetest.Env{
		Store: store,
		Apply: func(ctx context.Context, name string) error {
			tx, err := idemsqlite.TxFromContext(ctx)
			if err != nil {
				return err
			}
			_, err = tx.ExecContext(ctx, `INSERT INTO effects (name) VALUES (?)`, name)
			return err
		},
		Applied: func(ctx context.Context, name string) (n int, err error) {
			err = store.DB().QueryRowContext(ctx, `SELECT count(*) FROM effects WHERE name = ?`, name).Scan(&n)
			return n, err
		},
	}
}
