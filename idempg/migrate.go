package idempg

import (
	"context"
	"embed"
	"fmt"

	"github.com/jackc/pgx/v5"

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
	if version < 0 {
		version = len(migrations)
	}
	if version > len(migrations) {
		return fmt.Errorf("idempg: no migration version %d; the newest is %d", version, len(migrations))
	}
	for {
		done, err := s.migrateStep(ctx, migrations, version)
		if err != nil || done {
			return err
		}
	}
}

// migrateStep applies one migration towards target, in one transaction. It
// returns done when the schema is at target.
func (s *Store) migrateStep(ctx context.Context, migrations []migrate.Migration, target int) (done bool, err error) {
	conn, err := s.acquire(ctx, "migrate")
	if err != nil {
		return false, err
	}
	defer conn.Release()
	tx, err := conn.Begin(ctx)
	if err != nil {
		return false, wrapErr(ctx, "migrate: begin", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))

	// The lock comes first, so that only one process creates the version
	// table: concurrent CREATE TABLE IF NOT EXISTS can fail.
	if _, err := tx.Exec(ctx, queryMigrationLock, migrationLockID); err != nil {
		return false, wrapErr(ctx, "migrate: lock", err)
	}
	if _, err := tx.Exec(ctx, queryCreateVersionTable); err != nil {
		return false, wrapErr(ctx, "migrate: create version table", err)
	}
	var current int
	if err := tx.QueryRow(ctx, querySchemaVersion).Scan(&current); err != nil {
		return false, wrapErr(ctx, "migrate: read schema version", err)
	}
	if current > len(migrations) {
		return false, fmt.Errorf("idempg: the database is at schema version %d, newer than this program's %d", current, len(migrations))
	}
	var (
		m  migrate.Migration
		up = current < target
	)
	switch {
	case current == target:
		return true, nil
	case up:
		m = migrations[current]
		if err := run(ctx, tx, m.Up, queryRecordMigration, m.Version, m.Name); err != nil {
			return false, fmt.Errorf("idempg: migrate up to %d (%s): %w", m.Version, m.Name, err)
		}
	default:
		m = migrations[current-1]
		if err := run(ctx, tx, m.Down, queryForgetMigration, m.Version); err != nil {
			return false, fmt.Errorf("idempg: migrate down from %d (%s): %w", m.Version, m.Name, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return false, wrapErr(ctx, fmt.Sprintf("commit migration %d", m.Version), err)
	}
	s.cfg.Logger.InfoContext(ctx, "idempg: migrated", "version", m.Version, "name", m.Name, "up", up)
	return false, nil
}

// run executes a migration's SQL, which may hold several statements, then
// records it.
func run(ctx context.Context, tx pgx.Tx, script, record string, args ...any) error {
	if _, err := tx.Exec(ctx, script); err != nil {
		return wrapErr(ctx, "run", err)
	}
	if _, err := tx.Exec(ctx, record, args...); err != nil {
		return wrapErr(ctx, "record version", err)
	}
	return nil
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
