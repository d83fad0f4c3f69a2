package idempg

import (
	"context"
	"embed"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem/internal/migrate"
)

//go:embed migration/*.sql
var migrationFS embed.FS

// migrationLockID is the advisory lock that serializes migrations of one
// database across processes: "idemmigr" in ASCII.
const migrationLockID int64 = 0x6964656d6d696772

// Migrate applies the embedded migrations that the database lacks. Each
// migration runs in its own transaction, which first takes an advisory
// lock, so several instances may call Migrate at once when they start: one
// applies each migration, the others find it applied.
func (s *Store) Migrate(ctx context.Context) error {
	return s.MigrateTo(ctx, -1)
}

// MigrateTo moves the schema up or down to version, one migration per
// transaction. -1 means the newest; 0 removes everything the store created
// except its version table, idem_schema_migrations.
func (s *Store) MigrateTo(ctx context.Context, version int) error {
	migrations, err := migrate.Load(migrationFS, "migration")
	if err != nil {
		return fmt.Errorf("idempg: %w", err)
	}
	r := migrate.Runner{
		Store:      "idempg",
		Migrations: migrations,
		Begin:      s.beginMigration,
		Applied: func(m migrate.Migration, up bool) {
			s.cfg.Logger.InfoContext(ctx, "idempg: migrated", "version", m.Version, "name", m.Name, "up", up)
		},
	}
	return r.To(ctx, version)
}

// migrationTx is a migration's transaction, on a connection of its own.
type migrationTx struct {
	conn *pgxpool.Conn
	tx   pgx.Tx
}

// beginMigration begins a migration's transaction, which first takes an
// advisory lock, so that only one process migrates at a time and creates
// the version table: concurrent CREATE TABLE IF NOT EXISTS can fail.
func (s *Store) beginMigration(ctx context.Context) (migrate.Tx, error) {
	conn, err := s.acquire(ctx, "migrate")
	if err != nil {
		return nil, err
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		conn.Release()
		return nil, wrapErr(ctx, "migrate: begin", err)
	}
	t := &migrationTx{conn: conn, tx: tx}
	if s.cfg.NoAdvisoryLocks {
		return s.lockVersionTable(ctx, t)
	}
	if _, err := tx.Exec(ctx, queryMigrationLock, migrationLockID); err != nil {
		t.Rollback(ctx)
		return nil, wrapErr(ctx, "migrate: lock", err)
	}
	if _, err := tx.Exec(ctx, queryCreateVersionTable); err != nil {
		t.Rollback(ctx)
		return nil, wrapErr(ctx, "migrate: create version table", err)
	}
	return t, nil
}

// lockVersionTable serializes migrations without an advisory lock
// (Config.NoAdvisoryLocks): it creates the version table, in a transaction
// of its own, if it is missing, and locks it in t. Two processes that
// create it at once collide on the catalog; the one that lost finds it
// there when it tries again.
func (s *Store) lockVersionTable(ctx context.Context, t *migrationTx) (migrate.Tx, error) {
	var exists bool
	if err := t.tx.QueryRow(ctx, queryVersionTableExists).Scan(&exists); err != nil {
		t.Rollback(ctx)
		return nil, wrapErr(ctx, "migrate: find version table", err)
	}
	if !exists {
		t.Rollback(ctx)
		for attempt := 0; ; attempt++ {
			_, err := s.pool.Exec(ctx, queryCreateVersionTable)
			if err == nil {
				break
			}
			if code := pgCode(err); attempt > 2 || (code != codeUniqueViolation && code != codeDuplicateTable) {
				return nil, wrapErr(ctx, "migrate: create version table", err)
			}
		}
		return s.beginMigration(ctx)
	}
	if _, err := t.tx.Exec(ctx, queryLockVersionTable); err != nil {
		t.Rollback(ctx)
		return nil, wrapErr(ctx, "migrate: lock", err)
	}
	return t, nil
}

func (t *migrationTx) Version(ctx context.Context) (int, error) {
	var v int
	if err := t.tx.QueryRow(ctx, querySchemaVersion).Scan(&v); err != nil {
		return 0, wrapErr(ctx, "migrate: read schema version", err)
	}
	return v, nil
}

func (t *migrationTx) Exec(ctx context.Context, script string) error {
	if _, err := t.tx.Exec(ctx, script); err != nil {
		return wrapErr(ctx, "run", err)
	}
	return nil
}

func (t *migrationTx) Record(ctx context.Context, m migrate.Migration) error {
	if _, err := t.tx.Exec(ctx, queryRecordMigration, m.Version, m.Name); err != nil {
		return wrapErr(ctx, "record version", err)
	}
	return nil
}

func (t *migrationTx) Forget(ctx context.Context, m migrate.Migration) error {
	if _, err := t.tx.Exec(ctx, queryForgetMigration, m.Version); err != nil {
		return wrapErr(ctx, "forget version", err)
	}
	return nil
}

func (t *migrationTx) Commit(ctx context.Context) error {
	if err := t.tx.Commit(ctx); err != nil {
		return wrapErr(ctx, "commit", err)
	}
	return nil
}

// Rollback rolls back unless the transaction committed, and returns the
// connection to the pool.
func (t *migrationTx) Rollback(ctx context.Context) error {
	if t.conn == nil {
		return nil
	}
	err := t.tx.Rollback(ctx)
	t.conn.Release()
	t.conn = nil
	if errors.Is(err, pgx.ErrTxClosed) {
		return nil
	}
	return err
}

// SchemaVersion returns the applied migration version, 0 for none. It
// creates nothing.
func (s *Store) SchemaVersion(ctx context.Context) (int, error) {
	conn, err := s.acquire(ctx, "read schema version")
	if err != nil {
		return 0, err
	}
	defer conn.Release()
	var exists bool
	if err := conn.QueryRow(ctx, queryVersionTableExists).Scan(&exists); err != nil {
		return 0, wrapErr(ctx, "read schema version", err)
	}
	if !exists {
		return 0, nil
	}
	var v int
	if err := conn.QueryRow(ctx, querySchemaVersion).Scan(&v); err != nil {
		return 0, wrapErr(ctx, "read schema version", err)
	}
	return v, nil
}
