package main

import (
	"context"
	"log/slog"

	"github.com/idemkit/idem/cmd/internal/database"
)

// openStore opens the key store of a database URL: sqlite:PATH,
// postgres://... or mysql://... Migration notices go to logger.
func openStore(ctx context.Context, url string, logger *slog.Logger) (*database.DB, error) {
	return database.Open(ctx, url, &database.Config{Logger: logger})
}
