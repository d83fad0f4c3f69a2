package database

import (
	"context"

	"github.com/idemkit/idem/idempg"
	"github.com/idemkit/idem/idemsqlite"
	"github.com/idemkit/idem/idemstore"
)

// PurgeStore returns the key store as an idemstore.PurgeStore, for an
// idem.Purger, or nil for Redis, whose keys expire by themselves.
func (d *DB) PurgeStore() idemstore.PurgeStore {
	if d.Redis != nil {
		return nil
	}
	if d.SQLite != nil {
		return d.SQLite
	}
	return d.Postgres
}

// PurgeCount returns the number of keys that Purge with p would delete,
// and deletes nothing.
func (d *DB) PurgeCount(ctx context.Context, p PurgeParams) (int64, error) {
	if d.Redis != nil {
		return 0, ErrNoPurge
	}
	if d.SQLite != nil {
		return d.SQLite.PurgeCount(ctx, idemsqlite.PurgeParams{Before: p.Before, BatchSize: p.BatchSize})
	}
	return d.Postgres.PurgeCount(ctx, idempg.PurgeParams{Before: p.Before, BatchSize: p.BatchSize})
}
