package main

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemsqlite"
	"github.com/idemkit/idem/internal/payments"
)

// database is the store and the payments repository on one database.
type database struct {
	name  string
	store idem.Store
	repo  payments.Repo
	purge func(ctx context.Context, before time.Time) (int64, error)
	close func()
}

// openDatabase opens the database named by url: sqlite:PATH or
// postgres://... (postgresql:// too).
func openDatabase(ctx context.Context, url string, migrate bool, logger *slog.Logger) (*database, error) {
	switch {
	case strings.HasPrefix(url, "sqlite:"):
		return openSQLite(ctx, strings.TrimPrefix(url, "sqlite:"), migrate, logger)
	case strings.HasPrefix(url, "postgres://"), strings.HasPrefix(url, "postgresql://"):
		return openPostgres(ctx, url, migrate, logger)
	}
	return nil, fmt.Errorf("unsupported database %q: want sqlite:PATH or postgres://...", url)
}

func openSQLite(ctx context.Context, path string, migrate bool, logger *slog.Logger) (*database, error) {
	store, err := idemsqlite.Open(path, &idemsqlite.Config{Logger: logger})
	if err != nil {
		return nil, err
	}
	if migrate {
		if err := store.Migrate(ctx); err != nil {
			store.Close()
			return nil, err
		}
	}
	repo, err := payments.NewSQLiteRepo(ctx, store)
	if err != nil {
		store.Close()
		return nil, err
	}
	return &database{
		name: "sqlite:" + path, store: store, repo: repo,
		purge: func(ctx context.Context, before time.Time) (int64, error) {
			return store.Purge(ctx, idemsqlite.PurgeParams{Before: before})
		},
		close: func() { store.Close() },
	}, nil
}
