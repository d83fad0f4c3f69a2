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

// Runner applies a store's migrations with the store's driver.
type Runner struct {
	// Store names the store in error messages ("idempg").
	Store string
	// Migrations are the store's migrations, from Load.
	Migrations []Migration
	// Begin begins one migration's transaction. Its errors and those of the
	// Tx's Version are returned as they are; the others are wrapped with
	// the migration they belong to.
	Begin func(ctx context.Context) (Tx, error)
	// Applied, if set, is called after each migration commits.
	Applied func(m Migration, up bool)
}

// To moves the schema up or down to target, one migration per
// transaction. target -1 means the newest migration; 0 undoes them all. A
// database at a version newer than the newest migration is an error: this
// program does not know its schema.
func (r Runner) To(ctx context.Context, target int) error {
	if target < 0 {
		target = len(r.Migrations)
	}
	if target > len(r.Migrations) {
		return fmt.Errorf("%s: no migration version %d; the newest is %d", r.Store, target, len(r.Migrations))
	}
	for {
		done, err := r.step(ctx, target)
		if err != nil || done {
			return err
		}
	}
}

// step applies one migration towards target, in one transaction. It
// returns done when the schema is at target.
func (r Runner) step(ctx context.Context, target int) (done bool, err error) {
	tx, err := r.Begin(ctx)
	if err != nil {
		return false, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	current, err := tx.Version(ctx)
	if err != nil {
		return false, err
	}
	if current > len(r.Migrations) {
		return false, fmt.Errorf("%s: the database is at schema version %d, newer than this program's %d", r.Store, current, len(r.Migrations))
	}
	var (
		m  Migration
		up = current < target
	)
	switch {
	case current == target:
		return true, nil
	case up:
		m = r.Migrations[current]
		if err := tx.Exec(ctx, m.Up); err != nil {
			return false, fmt.Errorf("%s: migrate up to %d (%s): %w", r.Store, m.Version, m.Name, err)
		}
		if err := tx.Record(ctx, m); err != nil {
			return false, fmt.Errorf("%s: record migration %d: %w", r.Store, m.Version, err)
		}
	default:
		m = r.Migrations[current-1]
		if err := tx.Exec(ctx, m.Down); err != nil {
			return false, fmt.Errorf("%s: migrate down from %d (%s): %w", r.Store, m.Version, m.Name, err)
		}
		if err := tx.Forget(ctx, m); err != nil {
			return false, fmt.Errorf("%s: forget migration %d: %w", r.Store, m.Version, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return false, fmt.Errorf("%s: commit migration %d: %w", r.Store, m.Version, err)
	}
	if r.Applied != nil {
		r.Applied(m, up)
	}
	return false, nil
}
