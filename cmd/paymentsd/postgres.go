package main

import (
	"context"
	"fmt"
	"log/slog"
)

func openPostgres(ctx context.Context, url string, migrate bool, logger *slog.Logger) (*database, error) {
	return nil, fmt.Errorf("PostgreSQL support is not in this build yet")
}
