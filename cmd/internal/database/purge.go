package database

import (
	"context"

	"github.com/idemkit/idem/idemmysql"
	"github.com/idemkit/idem/idempg"
	"github.com/idemkit/idem/idemsqlite"
	"github.com/idemkit/idem/idemstore"
)

// PurgeStore returns the key store as an idemstore.PurgeStore, for an
// idem.Purger, or nil for Redis, whose keys expire by themselves.
func (d *DB) PurgeStore() idemstore.PurgeStore {
	switch {
	case d.Redis != nil:
		return nil
	case d.SQLite != nil:
		return d.SQLite
	case d.MySQL != nil:
		return d.MySQL
	}
	return d.Postgres
}

// PurgeCount returns the number of keys that Purge with p would delete,
// and deletes nothing.
func (d *DB) PurgeCount(ctx context.Context, p PurgeParams) (int64, error) {
	switch {
	case d.Redis != nil:
		return 0, ErrNoPurge
	case d.SQLite != nil:
		return d.SQLite.PurgeCount(ctx, idemsqlite.PurgeParams{Before: p.Before, BatchSize: p.BatchSize})
	case d.MySQL != nil:
		return d.MySQL.PurgeCount(ctx, idemmysql.PurgeParams{Before: p.Before, BatchSize: p.BatchSize})
	}
	return d.Postgres.PurgeCount(ctx, idempg.PurgeParams{Before: p.Before, BatchSize: p.BatchSize})
}
