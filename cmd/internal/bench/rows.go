package bench

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"

	"github.com/idemkit/idem/cmd/internal/database"
	"github.com/idemkit/idem/cmd/internal/payments"
)

// Variants with idempg.Config.NoAdvisoryLocks, which run only when asked
// for: new keys in each mode and replays, claimed by rows instead of
// advisory locks, on the same database as the others (PostgreSQL only),
// to compare with atomic, two-phase and replay in the same run.
const (
	AtomicRows   = "atomic-rows"
	TwoPhaseRows = "two-phase-rows"
	ReplayRows   = "replay-rows" // retries of keys that atomic-rows completed
)

// RowVariants lists the variants without advisory locks.
var RowVariants = []string{AtomicRows, TwoPhaseRows, ReplayRows}

// rowsDB serves the row variants: handler opens the database again, with
// NoAdvisoryLocks, on first use, and close closes it.
type rowsDB struct {
	url string
	db  *database.DB
}

func (r *rowsDB) handler(ctx context.Context, variant string) (http.Handler, error) {
	if r.db == nil {
		db, err := database.Open(ctx, r.url, &database.Config{NoAdvisoryLocks: true, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			return nil, fmt.Errorf("bench: open without advisory locks: %w", err)
		}
		if db.Postgres == nil {
			db.Close()
			return nil, fmt.Errorf("bench: %s needs PostgreSQL", variant)
		}
		r.db = db
	}
	repo, err := payments.NewRepo(ctx, r.db)
	if err != nil {
		return nil, err
	}
	return variantHandler(r.db, repo, strings.TrimSuffix(variant, "-rows"))
}

func (r *rowsDB) close() {
	if r.db != nil {
		r.db.Close()
	}
}
