package database

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem/idemmysql"
	"github.com/idemkit/idem/idempg"
	"github.com/idemkit/idem/idemredis"
	"github.com/idemkit/idem/idemsqlite"
	"github.com/idemkit/idem/idemstore"
)

// PoolConnsDefault is the PostgreSQL pool size when the URL sets no
// pool_max_conns: an atomic request holds a connection from claim to
// commit, so the pool is sized for requests in flight, not for CPUs.
const PoolConnsDefault = 16

// ErrUnsupported means the URL names no database this package opens.
var ErrUnsupported = errors.New("database: unsupported database URL: want sqlite:PATH, a postgres:// or a mysql:// URL (idemproxy: or a redis:// or redis-cluster:// one)")

// ErrNoPurge means the store has no purge: Redis expires keys itself.
var ErrNoPurge = errors.New("database: the Redis store has no purge: each key expires at its retention")

// Config configures Open. A nil *Config is the zero Config.
type Config struct {
	// Migrate applies the key store's migrations after opening. Defaults
	// to false.
	Migrate bool
	// TransactionPooling is idempg.Config.TransactionPooling: set it when
	// PostgreSQL is reached through a pooler in transaction mode. Ignored
	// on SQLite. Defaults to false.
	TransactionPooling bool
	// NoAdvisoryLocks is idempg.Config.NoAdvisoryLocks: claims and
	// leaders by rows, for databases without advisory locks. Ignored on
	// the other stores. Defaults to false.
	NoAdvisoryLocks bool
	// Redis accepts redis:// and redis-cluster:// URLs, for a store that
	// keeps two-phase keys only (idemredis): idemproxy sets it; services
	// whose handlers write to their own database do not, since their keys
	// belong in it. Defaults to false.
	Redis bool
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// DB is an open key store. Exactly one of SQLite, Postgres, MySQL and Redis is
// set.
type DB struct {
	// Name is the database without credentials, for logs.
	Name string
	// SQLite is the store on sqlite:PATH.
	SQLite *idemsqlite.Store
	// Postgres is the store on postgres://..., and Pool its connections.
	Postgres *idempg.Store
	Pool     *pgxpool.Pool
	// NoAdvisoryLocks is Config.NoAdvisoryLocks on PostgreSQL: the
	// application's own schema creation must not take advisory locks
	// either.
	NoAdvisoryLocks bool
	// MySQL is the store on mysql://... (MySQL or MariaDB).
	MySQL *idemmysql.Store
	// Redis is the store on redis:// or redis-cluster:// (with
	// Config.Redis), and RedisClient its client. It has no purge: a key's
	// retention is its Redis expiry.
	Redis       *idemredis.Store
	RedisClient redis.UniversalClient
}

// PurgeParams are the inputs of DB.Purge.
type PurgeParams struct {
	// Before: keys created before it are deleted.
	Before time.Time
	// BatchSize is the store's batch size; 0 is the store's default.
	BatchSize int
	// Share is the most of its time the purge spends in its batches
	// (idemstore.PurgeParams.Share); 0 is the store's default.
	Share float64
}

// Open opens the database named by url: sqlite:PATH, postgres://...
// (postgresql:// too) or mysql://user:password@host:port/database?params
// (MySQL or MariaDB; see MySQLDSN), and applies the key store's migrations when
// cfg.Migrate is set. A postgres:// URL with pgx's default query mode is
// refused with an error wrapping ErrStatementsNotKept when it reaches a
// pooler that does not keep prepared statements (PgBouncer in transaction
// mode before 1.21): with or without cfg.TransactionPooling, most
// statements through it would fail.
func Open(ctx context.Context, url string, cfg *Config) (*DB, error) {
	var c Config
	if cfg != nil {
		c = *cfg
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	var db *DB
	var err error
	switch {
	case strings.HasPrefix(url, "sqlite:"):
		db, err = openSQLite(strings.TrimPrefix(url, "sqlite:"), c)
	case c.Redis && (strings.HasPrefix(url, "redis://") || strings.HasPrefix(url, "redis-cluster://")):
		db, err = openRedis(ctx, url, c)
	case strings.HasPrefix(url, "postgres://"), strings.HasPrefix(url, "postgresql://"):
		db, err = openPostgres(ctx, url, c)
	case strings.HasPrefix(url, "mysql://"):
		db, err = openMySQL(ctx, url, c)
	default:
		// The URL is not repeated: it may hold a password.
		return nil, ErrUnsupported
	}
	if err != nil {
		return nil, err
	}
	if c.Migrate {
		if err := db.MigrateTo(ctx, -1); err != nil {
			db.Close()
			return nil, err
		}
	}
	return db, nil
}

func openSQLite(path string, c Config) (*DB, error) {
	store, err := idemsqlite.Open(path, &idemsqlite.Config{Logger: c.Logger})
	if err != nil {
		return nil, err
	}
	return &DB{Name: "sqlite:" + path, SQLite: store}, nil
}

func openPostgres(ctx context.Context, url string, c Config) (*DB, error) {
	pc, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("database: parse URL: %w", err)
	}
	if !strings.Contains(url, "pool_max_conns") {
		pc.MaxConns = PoolConnsDefault
	}
	if err := checkStatements(ctx, pc.ConnConfig); err != nil {
		return nil, err
	}
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("database: connect: %w", err)
	}
	store, err := idempg.New(pool, &idempg.Config{Logger: c.Logger, TransactionPooling: c.TransactionPooling, NoAdvisoryLocks: c.NoAdvisoryLocks})
	if err != nil {
		pool.Close()
		return nil, err
	}
	return &DB{
		Name:     fmt.Sprintf("postgres://%s:%d/%s", pc.ConnConfig.Host, pc.ConnConfig.Port, pc.ConnConfig.Database),
		Postgres: store, Pool: pool, NoAdvisoryLocks: c.NoAdvisoryLocks,
	}, nil
}

// Store returns the key store.
func (d *DB) Store() idemstore.Store {
	switch {
	case d.SQLite != nil:
		return d.SQLite
	case d.Redis != nil:
		return d.Redis
	case d.MySQL != nil:
		return d.MySQL
	}
	return d.Postgres
}

// SchemaVersion returns the key table's schema version.
func (d *DB) SchemaVersion(ctx context.Context) (int, error) {
	switch {
	case d.SQLite != nil:
		return d.SQLite.SchemaVersion(ctx)
	case d.Redis != nil:
		return d.Redis.SchemaVersion(ctx)
	case d.MySQL != nil:
		return d.MySQL.SchemaVersion(ctx)
	}
	return d.Postgres.SchemaVersion(ctx)
}

// MigrateTo moves the key table's schema to version; -1 is the newest.
func (d *DB) MigrateTo(ctx context.Context, version int) error {
	switch {
	case d.Redis != nil && version < 0:
		return d.Redis.Migrate(ctx)
	case d.Redis != nil:
		return errors.New("database: Redis has one layout version: migrate to the newest")
	case d.MySQL != nil:
		return d.MySQL.MigrateTo(ctx, version)
	case d.SQLite != nil && version < 0:
		return d.SQLite.Migrate(ctx)
	case d.SQLite != nil:
		return d.SQLite.MigrateTo(ctx, version)
	case version < 0:
		return d.Postgres.Migrate(ctx)
	}
	return d.Postgres.MigrateTo(ctx, version)
}

// Purge deletes keys created before p.Before and returns how many.
func (d *DB) Purge(ctx context.Context, p PurgeParams) (int64, error) {
	switch {
	case d.Redis != nil:
		return 0, ErrNoPurge
	case d.SQLite != nil:
		return d.SQLite.Purge(ctx, idemsqlite.PurgeParams{Before: p.Before, BatchSize: p.BatchSize, Share: p.Share})
	case d.MySQL != nil:
		return d.MySQL.Purge(ctx, idemmysql.PurgeParams{Before: p.Before, BatchSize: p.BatchSize, Share: p.Share})
	}
	return d.Postgres.Purge(ctx, idempg.PurgeParams{Before: p.Before, BatchSize: p.BatchSize, Share: p.Share})
}

// Close closes the database.
func (d *DB) Close() {
	switch {
	case d.RedisClient != nil:
		d.Redis.Close()
		d.RedisClient.Close()
	case d.SQLite != nil:
		d.SQLite.Close()
	case d.MySQL != nil:
		d.MySQL.Close()
	default:
		d.Pool.Close()
	}
}
