package payments

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idempg"
	"github.com/idemkit/idem/idemsqlite"
)

// DefaultPoolConns is the PostgreSQL pool size when the URL sets no
// pool_max_conns: an atomic request holds a connection from claim to
// commit, so the pool is sized for requests in flight, not for CPUs.
const DefaultPoolConns = 16

// Database is a key store and the payments repository on one database.
type Database struct {
	// Name is the database without credentials, for logs.
	Name  string
	Store idem.Store
	Repo  Repo
	// RepoOwnTx is Repo, inserting in a transaction of its own in a
	// request without an idempotency transaction: a benchmark baseline.
	RepoOwnTx Repo
	// Purge deletes keys created before a time.
	Purge func(ctx context.Context, before time.Time) (int64, error)
	// Close closes the database.
	Close func()

	pool *pgxpool.Pool // nil on SQLite
}

// Pool returns the PostgreSQL pool, and false on SQLite.
func (d *Database) Pool() (*pgxpool.Pool, bool) { return d.pool, d.pool != nil }

// DatabaseOptions configure OpenDatabase.
type DatabaseOptions struct {
	// Migrate applies the store's migrations.
	Migrate bool
	// TransactionPooling is idempg.Config.TransactionPooling: set it when
	// PostgreSQL is reached through a pooler in transaction mode.
	TransactionPooling bool
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// OpenDatabase opens the database named by url, sqlite:PATH or
// postgres://... (postgresql:// too), applies the store's migrations when
// asked to, and creates the payments table if needed.
func OpenDatabase(ctx context.Context, url string, opts DatabaseOptions) (*Database, error) {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	switch {
	case strings.HasPrefix(url, "sqlite:"):
		return openSQLite(ctx, strings.TrimPrefix(url, "sqlite:"), opts)
	case strings.HasPrefix(url, "postgres://"), strings.HasPrefix(url, "postgresql://"):
		return openPostgres(ctx, url, opts)
	}
	return nil, fmt.Errorf("payments: unsupported database %q: want sqlite:PATH or a postgres:// URL", url)
}

func openSQLite(ctx context.Context, path string, opts DatabaseOptions) (*Database, error) {
	store, err := idemsqlite.Open(path, &idemsqlite.Config{Logger: opts.Logger})
	if err != nil {
		return nil, err
	}
	if opts.Migrate {
		if err := store.Migrate(ctx); err != nil {
			store.Close()
			return nil, err
		}
	}
	repo, err := NewSQLiteRepo(ctx, store)
	if err != nil {
		store.Close()
		return nil, err
	}
	return &Database{
		Name: "sqlite:" + path, Store: store, Repo: repo, RepoOwnTx: repo.OwnTransactions(),
		Purge: func(ctx context.Context, before time.Time) (int64, error) {
			return store.Purge(ctx, idemsqlite.PurgeParams{Before: before})
		},
		Close: func() { store.Close() },
	}, nil
}

func openPostgres(ctx context.Context, url string, opts DatabaseOptions) (*Database, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("payments: database URL: %w", err)
	}
	if !strings.Contains(url, "pool_max_conns") {
		cfg.MaxConns = DefaultPoolConns
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("payments: connect: %w", err)
	}
	store, err := idempg.New(pool, &idempg.Config{Logger: opts.Logger, TransactionPooling: opts.TransactionPooling})
	if err == nil && opts.Migrate {
		err = store.Migrate(ctx)
	}
	var repo *PostgresRepo
	if err == nil {
		repo, err = NewPostgresRepo(ctx, pool)
	}
	if err != nil {
		pool.Close()
		return nil, err
	}
	return &Database{
		Name:  fmt.Sprintf("postgres://%s:%d/%s", cfg.ConnConfig.Host, cfg.ConnConfig.Port, cfg.ConnConfig.Database),
		Store: store, Repo: repo, RepoOwnTx: repo.OwnTransactions(),
		Purge: func(ctx context.Context, before time.Time) (int64, error) {
			return store.Purge(ctx, idempg.PurgeParams{Before: before})
		},
		Close: pool.Close,
		pool:  pool,
	}, nil
}
