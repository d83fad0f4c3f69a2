package main

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem/idempg"
	"github.com/idemkit/idem/internal/payments"
)

// defaultPoolConns is the pool size when the URL sets no pool_max_conns.
const defaultPoolConns = 16

func openPostgres(ctx context.Context, url string, migrate bool, logger *slog.Logger) (*database, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("database URL: %w", err)
	}
	// An atomic request holds a connection from claim to commit, so the
	// pool is sized for requests in flight, not for CPUs.
	if !strings.Contains(url, "pool_max_conns") {
		cfg.MaxConns = defaultPoolConns
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	store, err := idempg.New(pool, &idempg.Config{Logger: logger})
	if err != nil {
		pool.Close()
		return nil, err
	}
	if migrate {
		if err := store.Migrate(ctx); err != nil {
			pool.Close()
			return nil, err
		}
	}
	repo, err := payments.NewPostgresRepo(ctx, pool)
	if err != nil {
		pool.Close()
		return nil, err
	}
	return &database{
		name:  "postgres://" + cfg.ConnConfig.Host + fmt.Sprintf(":%d/", cfg.ConnConfig.Port) + cfg.ConnConfig.Database,
		store: store, repo: repo,
		purge: func(ctx context.Context, before time.Time) (int64, error) {
			return store.Purge(ctx, idempg.PurgeParams{Before: before})
		},
		close: pool.Close,
	}, nil
}
