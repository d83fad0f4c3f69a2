package idemmysql

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"embed"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/internal/migrate"
)

//go:embed migration/*.sql
var migrationFS embed.FS

// LockWaitTimeoutDefault is the default of [Config.LockWaitTimeout].
const LockWaitTimeoutDefault = 5 * time.Second

// Config configures a [Store].
type Config struct {
	// LockWaitTimeout is the session's innodb_lock_wait_timeout, in whole
	// seconds (at least 1): how long a handler's statement, and a
	// completion, wait for a row that another transaction holds before
	// failing with error 1205. A claim never waits: it runs with no wait
	// at all (see the package documentation). Defaults to
	// LockWaitTimeoutDefault (5 s); the server's default is 50 s. An
	// innodb_lock_wait_timeout parameter in the DSN takes precedence.
	LockWaitTimeout time.Duration

	// MaxOpenConns bounds the pool; 0 leaves database/sql's default (no
	// bound). Each request in flight in ModeAtomic holds a connection.
	MaxOpenConns int

	// Logger receives migration notices. Defaults to slog.Default().
	Logger *slog.Logger
}

func (c *Config) withDefaults() *Config {
	out := Config{}
	if c != nil {
		out = *c
	}
	if out.LockWaitTimeout == 0 {
		out.LockWaitTimeout = LockWaitTimeoutDefault
	}
	if out.Logger == nil {
		out.Logger = slog.Default()
	}
	return &out
}

var _ idemstore.Store = (*Store)(nil)

// Store is an [idemstore.Store] in a MySQL or MariaDB (InnoDB) database,
// which it shares with the application's business tables so that both
// commit in one transaction.
type Store struct {
	db      *sql.DB
	conn    *connector
	cfg     *Config
	mariadb bool
}

// ErrNotStrict is wrapped by the error of [Open] for a server whose
// sql_mode is not strict: it would truncate a response too long for its
// column, or a key, instead of failing.
var ErrNotStrict = errors.New("idemmysql: sql_mode is not strict")

// Open connects to the database that dsn names, in the driver's form
// (user:password@tcp(host:port)/database?param=value, see
// github.com/go-sql-driver/mysql). It sets, on every connection of its
// pool: READ COMMITTED isolation, innodb_lock_wait_timeout from
// cfg.LockWaitTimeout, client-side parameter interpolation (one round
// trip per statement) and found-rows counting. It fails, wrapping
// ErrNotStrict, when the session's sql_mode has neither
// STRICT_TRANS_TABLES nor STRICT_ALL_TABLES. It does not apply
// migrations; call [Store.Migrate].
func Open(ctx context.Context, dsn string, cfg *Config) (*Store, error) {
	c := cfg.withDefaults()
	if c.LockWaitTimeout < time.Second || c.LockWaitTimeout%time.Second != 0 {
		return nil, fmt.Errorf("idemmysql: Config.LockWaitTimeout %s must be whole seconds, at least 1s", c.LockWaitTimeout)
	}
	mc, err := mysql.ParseDSN(dsn)
	if err != nil {
		return nil, fmt.Errorf("idemmysql: %w", err)
	}
	if mc.DBName == "" {
		return nil, errors.New("idemmysql: the DSN names no database")
	}
	// Ask the server what it is before choosing the session settings.
	probe, err := mysql.NewConnector(mc)
	if err != nil {
		return nil, fmt.Errorf("idemmysql: %w", err)
	}
	pdb := sql.OpenDB(probe)
	var (
		version, mode string
		rollback      bool
	)
	err = pdb.QueryRowContext(ctx, `SELECT VERSION(), @@SESSION.sql_mode, @@GLOBAL.innodb_rollback_on_timeout`).Scan(&version, &mode, &rollback)
	pdb.Close()
	if err != nil {
		return nil, fmt.Errorf("idemmysql: connect: %w", unavailable(err))
	}
	if !strictMode(mode) {
		return nil, fmt.Errorf("%w: it is %q; add STRICT_TRANS_TABLES (the server's default), or a response too long for its column would be cut short", ErrNotStrict, mode)
	}
	mariadb := strings.Contains(strings.ToLower(version), "mariadb")
	mc = mc.Clone()
	mc.InterpolateParams = true
	mc.ClientFoundRows = true
	if mc.Params == nil {
		mc.Params = map[string]string{}
	}
	isolation := "transaction_isolation"
	if mariadb {
		isolation = "tx_isolation" // transaction_isolation only from MariaDB 11.1
	}
	mc.Params[isolation] = "'READ-COMMITTED'"
	if _, ok := mc.Params["innodb_lock_wait_timeout"]; !ok {
		mc.Params["innodb_lock_wait_timeout"] = strconv.Itoa(int(c.LockWaitTimeout / time.Second))
	}
	base, err := mysql.NewConnector(mc)
	if err != nil {
		return nil, fmt.Errorf("idemmysql: %w", err)
	}
	cn := &connector{base: base, rollbackOnTimeout: rollback}
	db := sql.OpenDB(cn)
	if c.MaxOpenConns > 0 {
		db.SetMaxOpenConns(c.MaxOpenConns)
	}
	db.SetMaxIdleConns(max(c.MaxOpenConns, 8))
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("idemmysql: connect: %w", unavailable(err))
	}
	return &Store{db: db, conn: cn, cfg: c, mariadb: mariadb}, nil
}

// strictMode reports whether an sql_mode makes InnoDB refuse, rather than
// truncate, a value too long for its column.
func strictMode(mode string) bool {
	for m := range strings.SplitSeq(strings.ToUpper(mode), ",") {
		if m == "STRICT_TRANS_TABLES" || m == "STRICT_ALL_TABLES" {
			return true
		}
	}
	return false
}

// DB returns the store's pool, for queries outside handlers' transactions.
// Inside a handler use [TxFromContext].
func (s *Store) DB() *sql.DB { return s.db }

// Close closes the pool.
func (s *Store) Close() error { return s.db.Close() }

// noWait prefixes a claim's statement so that it fails at once with error
// 1205, instead of waiting, when another transaction holds the key's row:
// MariaDB's SET STATEMENT sets innodb_lock_wait_timeout to 0 for that
// statement alone. MySQL has neither SET STATEMENT nor a timeout below 1 s:
// there the statement runs with the session's timeout (see the package
// documentation).
func (s *Store) noWait(query string) string {
	if !s.mariadb {
		return query
	}
	switch query { // the claim's statements, joined once, at compile time
	case queryInsertKey:
		return noWaitPrefix + queryInsertKey
	case queryReplaceKey:
		return noWaitPrefix + queryReplaceKey
	case queryTakeOverKey:
		return noWaitPrefix + queryTakeOverKey
	}
	return noWaitPrefix + query
}

// noWaitPrefix is what noWait puts before a statement on MariaDB.
const noWaitPrefix = "SET STATEMENT innodb_lock_wait_timeout = 0 FOR "

// Migrate applies the embedded migrations that the database lacks. It is
// safe to run from several processes at once: each step holds a named
// lock (GET_LOCK) of the database.
func (s *Store) Migrate(ctx context.Context) error {
	return s.MigrateTo(ctx, -1)
}

// MigrateTo moves the schema up or down to version, one migration per
// step. -1 means the newest; 0 removes everything the store created except
// its version table, idem_schema_migrations.
func (s *Store) MigrateTo(ctx context.Context, version int) error {
	migrations, err := migrate.Load(migrationFS, "migration")
	if err != nil {
		return fmt.Errorf("idemmysql: %w", err)
	}
	r := migrate.Runner{
		Store:      "idemmysql",
		Migrations: migrations,
		Begin:      s.beginMigration,
		Applied: func(m migrate.Migration, up bool) {
			s.cfg.Logger.InfoContext(ctx, "idemmysql: migrated", "version", m.Version, "name", m.Name, "up", up)
		},
	}
	return r.To(ctx, version)
}

// migrationLockWait bounds the wait for another process's migration.
const migrationLockWait = 60 // seconds

// migrationStep is one step of a migration. MySQL commits each DDL
// statement at once, so a step is not a transaction: it is serialized by
// the database's migration lock, held on the step's connection, and its
// scripts are idempotent so that a step that failed part way runs again.
type migrationStep struct{ conn *sql.Conn }

func (s *Store) beginMigration(ctx context.Context) (migrate.Tx, error) {
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return nil, fmt.Errorf("idemmysql: migrate: %w", unavailable(err))
	}
	var got sql.NullInt64
	if err := conn.QueryRowContext(ctx, `SELECT GET_LOCK(CONCAT('idem:migrate:', SHA1(DATABASE())), ?)`, migrationLockWait).Scan(&got); err != nil {
		conn.Close()
		return nil, fmt.Errorf("idemmysql: migrate: lock: %w", unavailable(err))
	}
	if got.Int64 != 1 {
		conn.Close()
		return nil, fmt.Errorf("idemmysql: migrate: another process held the migration lock for %d s", migrationLockWait)
	}
	st := &migrationStep{conn: conn}
	if _, err := conn.ExecContext(ctx, queryCreateVersionTable); err != nil {
		st.Rollback(ctx)
		return nil, fmt.Errorf("idemmysql: migrate: create version table: %w", err)
	}
	return st, nil
}

func (t *migrationStep) Version(ctx context.Context) (int, error) {
	var v int
	if err := t.conn.QueryRowContext(ctx, querySchemaVersion).Scan(&v); err != nil {
		return 0, fmt.Errorf("idemmysql: migrate: read schema version: %w", err)
	}
	return v, nil
}

// Exec runs a script's statements one by one: they end with a semicolon
// at the end of a line.
func (t *migrationStep) Exec(ctx context.Context, script string) error {
	for stmt := range strings.SplitSeq(script, ";\n") {
		if strings.TrimSpace(stripComments(stmt)) == "" {
			continue
		}
		if _, err := t.conn.ExecContext(ctx, stmt); err != nil {
			return err
		}
	}
	return nil
}

// stripComments drops the lines of s that are only a comment.
func stripComments(s string) string {
	var b strings.Builder
	for line := range strings.SplitSeq(s, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), "--") {
			b.WriteString(line)
			b.WriteByte('\n')
		}
	}
	return b.String()
}

func (t *migrationStep) Record(ctx context.Context, m migrate.Migration) error {
	_, err := t.conn.ExecContext(ctx, queryRecordMigration, m.Version, m.Name, time.Now().UnixMicro())
	return err
}

func (t *migrationStep) Forget(ctx context.Context, m migrate.Migration) error {
	_, err := t.conn.ExecContext(ctx, queryForgetMigration, m.Version)
	return err
}

func (t *migrationStep) Commit(ctx context.Context) error { return t.Rollback(ctx) }

// Rollback ends the step: it frees the lock and gives the connection back.
// Closing a connection whose RELEASE_LOCK failed ends its session, which
// frees the lock too.
func (t *migrationStep) Rollback(ctx context.Context) error {
	if t.conn == nil {
		return nil
	}
	conn := t.conn
	t.conn = nil
	if _, err := conn.ExecContext(context.WithoutCancel(ctx), `DO RELEASE_LOCK(CONCAT('idem:migrate:', SHA1(DATABASE())))`); err != nil {
		discard(conn)
	}
	return conn.Close()
}

// SchemaVersion returns the applied migration version, 0 for none. It
// creates nothing.
func (s *Store) SchemaVersion(ctx context.Context) (int, error) {
	var exists bool
	if err := s.db.QueryRowContext(ctx, queryVersionTableExists).Scan(&exists); err != nil {
		return 0, fmt.Errorf("idemmysql: read schema version: %w", unavailable(err))
	}
	if !exists {
		return 0, nil
	}
	var v int
	if err := s.db.QueryRowContext(ctx, querySchemaVersion).Scan(&v); err != nil {
		return 0, fmt.Errorf("idemmysql: read schema version: %w", unavailable(err))
	}
	return v, nil
}

// discard makes database/sql close conn's driver connection instead of
// pooling it, so that the server ends its session and frees its locks.
func discard(conn *sql.Conn) {
	_ = conn.Raw(func(any) error { return driver.ErrBadConn })
}
