package idemsqlite

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/internal/migrate"

	_ "modernc.org/sqlite" // registers the pure-Go "sqlite" driver
)

//go:embed migration/*.sql
var migrationFS embed.FS

// BusyTimeoutDefault is the default of [Config.BusyTimeout].
const BusyTimeoutDefault = 5 * time.Second

// ReadConnsDefault is the default of [Config.ReadConns].
const ReadConnsDefault = 4

// Config configures a [Store].
type Config struct {
	// BusyTimeout is how long a statement waits for another process's
	// write lock before failing. Defaults to BusyTimeoutDefault (5 s).
	BusyTimeout time.Duration

	// ReadConns is the number of read connections; WAL mode lets them read
	// while a write is in progress. Defaults to ReadConnsDefault (4).
	ReadConns int

	// Logger receives migration notices. Defaults to slog.Default().
	Logger *slog.Logger
}

func (c *Config) withDefaults() *Config {
	out := Config{}
	if c != nil {
		out = *c
	}
	if out.BusyTimeout == 0 {
		out.BusyTimeout = BusyTimeoutDefault
	}
	if out.ReadConns == 0 {
		out.ReadConns = ReadConnsDefault
	}
	if out.Logger == nil {
		out.Logger = slog.Default()
	}
	return &out
}

func (c *Config) validate() error {
	if c.BusyTimeout < 0 || c.ReadConns < 0 {
		return errors.New("idemsqlite: Config.BusyTimeout and Config.ReadConns must not be negative")
	}
	return nil
}

var _ idemstore.Store = (*Store)(nil)

// Store is an [idemstore.Store] in an SQLite database file, which it shares with
// the application's business tables so that both commit in one transaction.
//
// SQLite has one writer at a time. The store keeps one write connection, so
// writers queue inside the process instead of failing with SQLITE_BUSY, and
// a pool of read connections for replays. A key in flight in this process
// is answered from memory at once, without waiting for the writer.
type Store struct {
	write *sql.DB
	read  *sql.DB
	cfg   *Config

	mu       sync.Mutex
	inflight map[idemstore.Scope]*idemstore.Record

	// relayLock lets one outbox batch at a time be delivered (outbox.go).
	relayLock chan struct{}
}

// Open opens (creating if needed) the database at path in WAL mode. It does
// not apply migrations; call [Store.Migrate].
func Open(path string, cfg *Config) (*Store, error) {
	c := cfg.withDefaults()
	if err := c.validate(); err != nil {
		return nil, err
	}
	if path == "" {
		return nil, errors.New("idemsqlite: a database path is required")
	}
	q := url.Values{}
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", c.BusyTimeout.Milliseconds()))
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous(FULL)")
	q.Add("_pragma", "foreign_keys(ON)")
	q.Set("_txlock", "immediate")
	dsn := "file:" + path + "?" + q.Encode()
	if strings.ContainsAny(path, "?#") {
		return nil, fmt.Errorf("idemsqlite: database path %q must not contain ? or #", path)
	}
	write, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("idemsqlite: open %s: %w", path, err)
	}
	write.SetMaxOpenConns(1)
	write.SetMaxIdleConns(1)
	write.SetConnMaxLifetime(0)
	if err := write.Ping(); err != nil {
		write.Close()
		return nil, fmt.Errorf("idemsqlite: open %s: %w", path, err)
	}
	read, err := sql.Open("sqlite", dsn+"&_pragma=query_only(1)")
	if err != nil {
		write.Close()
		return nil, fmt.Errorf("idemsqlite: open %s for reading: %w", path, err)
	}
	read.SetMaxOpenConns(c.ReadConns)
	read.SetMaxIdleConns(c.ReadConns)
	return &Store{write: write, read: read, cfg: c, inflight: make(map[idemstore.Scope]*idemstore.Record), relayLock: make(chan struct{}, 1)}, nil
}

// DB returns the write connection pool. It has one connection: inside a
// handler use [TxFromContext] instead, never DB, or the handler waits for
// the connection its own transaction holds.
func (s *Store) DB() *sql.DB { return s.write }

// ReadDB returns the read connection pool, for queries outside handlers'
// transactions.
func (s *Store) ReadDB() *sql.DB { return s.read }

// Close closes both pools.
func (s *Store) Close() error {
	return errors.Join(s.read.Close(), s.write.Close())
}

// Migrate applies the embedded migrations that the database lacks, each in
// its own transaction. It is safe to run from several processes at once.
func (s *Store) Migrate(ctx context.Context) error {
	return s.MigrateTo(ctx, -1)
}

// MigrateTo moves the schema up or down to version, one migration per
// transaction. -1 means the newest; 0 removes everything the store created
// except its version table, idem_schema_migrations.
func (s *Store) MigrateTo(ctx context.Context, version int) error {
	migrations, err := migrate.Load(migrationFS, "migration")
	if err != nil {
		return fmt.Errorf("idemsqlite: %w", err)
	}
	r := migrate.Runner{
		Store:      "idemsqlite",
		Migrations: migrations,
		Begin:      s.beginMigration,
		Applied: func(m migrate.Migration, up bool) {
			s.cfg.Logger.InfoContext(ctx, "idemsqlite: migrated", "version", m.Version, "name", m.Name, "up", up)
		},
	}
	return r.To(ctx, version)
}

// migrationTx is a migration's transaction; _txlock=immediate makes BEGIN
// take the database's write lock, which serializes migrations.
type migrationTx struct{ tx *sql.Tx }

func (s *Store) beginMigration(ctx context.Context) (migrate.Tx, error) {
	tx, err := s.write.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("idemsqlite: migrate: begin: %w", unavailable(err))
	}
	if _, err := tx.ExecContext(ctx, queryCreateVersionTable); err != nil {
		tx.Rollback()
		return nil, fmt.Errorf("idemsqlite: migrate: create version table: %w", err)
	}
	return migrationTx{tx: tx}, nil
}

func (t migrationTx) Version(ctx context.Context) (int, error) {
	var v int
	if err := t.tx.QueryRowContext(ctx, querySchemaVersion).Scan(&v); err != nil {
		return 0, fmt.Errorf("idemsqlite: migrate: read schema version: %w", err)
	}
	return v, nil
}

func (t migrationTx) Exec(ctx context.Context, script string) error {
	_, err := t.tx.ExecContext(ctx, script)
	return err
}

func (t migrationTx) Record(ctx context.Context, m migrate.Migration) error {
	_, err := t.tx.ExecContext(ctx, queryRecordMigration, m.Version, m.Name, time.Now().UnixMicro())
	return err
}

func (t migrationTx) Forget(ctx context.Context, m migrate.Migration) error {
	_, err := t.tx.ExecContext(ctx, queryForgetMigration, m.Version)
	return err
}

func (t migrationTx) Commit(context.Context) error { return t.tx.Commit() }

func (t migrationTx) Rollback(context.Context) error { return t.tx.Rollback() }

// SchemaVersion returns the applied migration version, 0 for none. It
// creates nothing.
func (s *Store) SchemaVersion(ctx context.Context) (int, error) {
	var exists bool
	if err := s.read.QueryRowContext(ctx, queryVersionTableExists).Scan(&exists); err != nil {
		return 0, fmt.Errorf("idemsqlite: read schema version: %w", unavailable(err))
	}
	if !exists {
		return 0, nil
	}
	var v int
	if err := s.read.QueryRowContext(ctx, querySchemaVersion).Scan(&v); err != nil {
		return 0, fmt.Errorf("idemsqlite: read schema version: %w", unavailable(err))
	}
	return v, nil
}

// PurgeParams are the inputs of [Store.Purge]; see [idemstore.PurgeParams].
type PurgeParams = idemstore.PurgeParams

// The store's pace of a purge, where none is configured: for [Store.Purge]
// and the purge lock's batches (the store is an [idemstore.PurgePacer]),
// and for [Store.PurgeEvents]. SQLite has one writer for the whole file,
// which each batch holds while it deletes from random places of the
// primary key, and which every request that writes waits for: a batch of
// 5,000 held it about 1.8 s at 1M keys on a loaded machine, a batch of 50
// about 27 ms; at 1M keys with a purge beside, writing requests kept at
// least 0.83 of their throughput with a share of 0.1, and some fell to
// 0.57 with 0.2 (docs/benchmarks.md, "A paced purge").
const (
	// PurgeBatchSizeDefault is the batch size, in keys or events.
	PurgeBatchSizeDefault = 100
	// PurgeShareDefault is the most of its time a purge spends in its
	// batches (idemstore.PurgePause).
	PurgeShareDefault = 0.1
)

var _ idemstore.PurgePacer = (*Store)(nil)

// PurgeBatchSize implements [idemstore.PurgePacer]: PurgeBatchSizeDefault.
func (s *Store) PurgeBatchSize() int { return PurgeBatchSizeDefault }

// PurgeShare implements [idemstore.PurgePacer]: PurgeShareDefault.
func (s *Store) PurgeShare() float64 { return PurgeShareDefault }

// Purge deletes keys created before p.Before, in batches of p.BatchSize
// (PurgeBatchSizeDefault when 0), each in its own short transaction, with
// a pause after each that leaves requests the writer for all but p.Share
// (PurgeShareDefault when 0) of the time ([idemstore.PurgePause]). It
// returns the number of keys deleted, also when it fails or is cancelled
// part way. A p that [idemstore.PurgeParams.Validate] refuses is an error
// and deletes nothing.
func (s *Store) Purge(ctx context.Context, p PurgeParams) (int64, error) {
	if err := p.Validate(); err != nil {
		return 0, fmt.Errorf("idemsqlite: purge: %w", err)
	}
	if p.BatchSize == 0 {
		p.BatchSize = PurgeBatchSizeDefault
	}
	if p.Share == 0 {
		p.Share = PurgeShareDefault
	}
	var total int64
	for {
		start := time.Now()
		n, err := s.purgeBatch(ctx, queryPurgeBatch, p.Before, p.BatchSize)
		if err != nil {
			return total, fmt.Errorf("idemsqlite: purge: %w", err)
		}
		total += n
		if n < int64(p.BatchSize) {
			return total, nil
		}
		if err := idemstore.PurgeWait(ctx, time.Since(start), p.Share); err != nil {
			return total, fmt.Errorf("idemsqlite: purge: %w", err)
		}
	}
}

// purgeBatch runs one batch of a purge, query with the bound before and
// the batch size, and returns the rows it deleted. A cancelled ctx starts
// no batch; a batch once started runs to its end, bounded by the busy
// timeout and its size, because the driver reports a cancellation that
// came while the statement ran even when its delete committed, and the
// purge would then not count keys it deleted.
func (s *Store) purgeBatch(ctx context.Context, query string, before time.Time, size int) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	res, err := s.write.ExecContext(context.WithoutCancel(ctx), query, before.UnixMicro(), size)
	if err != nil {
		return 0, unavailable(err)
	}
	n, _ := res.RowsAffected()
	return n, nil
}
