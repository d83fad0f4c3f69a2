package main

import (
	"context"

	"github.com/idemkit/idem/cmd/internal/database"
)

// ping checks that the key store answers, for /readyz: on Redis, every
// primary, and the layout's version marker (idemredis.Store.Ready).
func ping(ctx context.Context, db *database.DB) error {
	switch {
	case db.Redis != nil:
		return db.Redis.Ready(ctx)
	case db.SQLite != nil:
		return db.SQLite.DB().PingContext(ctx)
	case db.MySQL != nil:
		return db.MySQL.DB().PingContext(ctx)
	}
	return db.Pool.Ping(ctx)
}
