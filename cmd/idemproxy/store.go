package main

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idempg"
	"github.com/idemkit/idem/idemsqlite"
)

// keyStore is the key store with what the proxy needs besides claims.
type keyStore struct {
	idem.Store
	name  string
	ping  func(ctx context.Context) error
	purge func(ctx context.Context, before time.Time) (int64, error)
	close func()
}

// openStore opens and migrates the key store of a database URL: sqlite:PATH
// or postgres://...
func openStore(ctx context.Context, url string, migrate bool, logger *slog.Logger) (*keyStore, error) {
	switch {
	case strings.HasPrefix(url, "sqlite:"):
		s, err := idemsqlite.Open(strings.TrimPrefix(url, "sqlite:"), &idemsqlite.Config{Logger: logger})
		if err != nil {
			return nil, err
		}
		if migrate {
			if err := s.Migrate(ctx); err != nil {
				s.Close()
				return nil, fmt.Errorf("migrate: %w", err)
			}
		}
		return &keyStore{
			Store: s, name: "sqlite",
			ping: func(ctx context.Context) error { return s.DB().PingContext(ctx) },
			purge: func(ctx context.Context, before time.Time) (int64, error) {
				return s.Purge(ctx, idemsqlite.PurgeParams{Before: before})
			},
			close: func() { s.Close() },
		}, nil
	case strings.HasPrefix(url, "postgres://"), strings.HasPrefix(url, "postgresql://"):
		pool, err := pgxpool.New(ctx, url)
		if err != nil {
			return nil, fmt.Errorf("connect: %w", err)
		}
		s, err := idempg.New(pool, &idempg.Config{Logger: logger})
		if err == nil && migrate {
			if err = s.Migrate(ctx); err != nil {
				err = fmt.Errorf("migrate: %w", err)
			}
		}
		if err != nil {
			pool.Close()
			return nil, err
		}
		return &keyStore{
			Store: s, name: "postgres",
			ping: pool.Ping,
			purge: func(ctx context.Context, before time.Time) (int64, error) {
				return s.Purge(ctx, idempg.PurgeParams{Before: before})
			},
			close: pool.Close,
		}, nil
	}
	return nil, fmt.Errorf("unsupported database %q: want sqlite:PATH or a postgres:// URL", url)
}
