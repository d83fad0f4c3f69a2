package main

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem/idempg"
	"github.com/idemkit/idem/idemsqlite"
)

// keyStore is what the operator commands need of a store.
type keyStore interface {
	SchemaVersion(ctx context.Context) (int, error)
	MigrateTo(ctx context.Context, version int) error
	purge(ctx context.Context, before time.Time, batch int) (int64, error)
	close()
}

type sqliteStore struct{ *idemsqlite.Store }

func (s sqliteStore) purge(ctx context.Context, before time.Time, batch int) (int64, error) {
	return s.Purge(ctx, idemsqlite.PurgeParams{Before: before, BatchSize: batch})
}

func (s sqliteStore) close() { s.Close() }

type pgStore struct {
	*idempg.Store
	pool *pgxpool.Pool
}

func (s pgStore) purge(ctx context.Context, before time.Time, batch int) (int64, error) {
	return s.Purge(ctx, idempg.PurgeParams{Before: before, BatchSize: batch})
}

func (s pgStore) close() { s.pool.Close() }

// openStore opens the key store of a database URL: sqlite:PATH or
// postgres://... Migration notices go to logger.
func openStore(ctx context.Context, url string, logger *slog.Logger) (keyStore, error) {
	switch {
	case strings.HasPrefix(url, "sqlite:"):
		s, err := idemsqlite.Open(strings.TrimPrefix(url, "sqlite:"), &idemsqlite.Config{Logger: logger})
		if err != nil {
			return nil, err
		}
		return sqliteStore{s}, nil
	case strings.HasPrefix(url, "postgres://"), strings.HasPrefix(url, "postgresql://"):
		pool, err := pgxpool.New(ctx, url)
		if err != nil {
			return nil, fmt.Errorf("connect: %w", err)
		}
		s, err := idempg.New(pool, &idempg.Config{Logger: logger})
		if err != nil {
			pool.Close()
			return nil, err
		}
		return pgStore{Store: s, pool: pool}, nil
	}
	return nil, fmt.Errorf("unsupported database %q: want sqlite:PATH or a postgres:// URL", url)
}
