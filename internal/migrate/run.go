package migrate

import (
	"context"
	"fmt"
)

// Tx is one migration transaction of a store's driver. The store's begin
// function returns it holding whatever lock serializes migrations across
// processes, with the version table created.
type Tx interface {
	// Version returns the version recorded in the version table, 0 for none.
	Version(ctx context.Context) (int, error)
	// Exec runs a migration script, which may hold several statements.
	Exec(ctx context.Context, script string) error
	// Record records that m is applied; Forget that it is not.
	Record(ctx context.Context, m Migration) error
	Forget(ctx context.Context, m Migration) error
	Commit(ctx context.Context) error
	// Rollback ends the transaction unless it committed.
	Rollback(ctx context.Context) error
}

// Run moves a schema up or down to target, one migration per transaction,
// each begun by begin. target -1 means the newest of migrations; 0 undoes
// them all. A database at a version newer than the newest of migrations is
// an error: this program does not know its schema. applied is called after
// each migration commits.
func Run(ctx context.Context, migrations []Migration, target int, begin func(context.Context) (Tx, error), applied func(m Migration, up bool)) error {
	if target < 0 {
		target = len(migrations)
	}
	if target > len(migrations) {
		return fmt.Errorf("no migration version %d; the newest is %d", target, len(migrations))
	}
	for {
		done, err := step(ctx, migrations, target, begin, applied)
		if err != nil || done {
			return err
		}
	}
}

// step applies one migration towards target, in one transaction. It
// returns done when the schema is at target.
func step(ctx context.Context, migrations []Migration, target int, begin func(context.Context) (Tx, error), applied func(Migration, bool)) (done bool, err error) {
	tx, err := begin(ctx)
	if err != nil {
		return false, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	current, err := tx.Version(ctx)
	if err != nil {
		return false, err
	}
	if current > len(migrations) {
		return false, fmt.Errorf("the database is at schema version %d, newer than this program's %d", current, len(migrations))
	}
	var (
		m  Migration
		up = current < target
	)
	switch {
	case current == target:
		return true, nil
	case up:
		m = migrations[current]
		if err := tx.Exec(ctx, m.Up); err != nil {
			return false, fmt.Errorf("migrate up to %d (%s): %w", m.Version, m.Name, err)
		}
		if err := tx.Record(ctx, m); err != nil {
			return false, fmt.Errorf("record migration %d: %w", m.Version, err)
		}
	default:
		m = migrations[current-1]
		if err := tx.Exec(ctx, m.Down); err != nil {
			return false, fmt.Errorf("migrate down from %d (%s): %w", m.Version, m.Name, err)
		}
		if err := tx.Forget(ctx, m); err != nil {
			return false, fmt.Errorf("forget migration %d: %w", m.Version, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return false, fmt.Errorf("commit migration %d: %w", m.Version, err)
	}
	if applied != nil {
		applied(m, up)
	}
	return false, nil
}
