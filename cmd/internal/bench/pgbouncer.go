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

// Variants through PgBouncer in pool_mode = transaction, which run only
// when asked for and need Config.BouncerURL: the bare endpoint and the
// atomic mode with idempg.Config.TransactionPooling, on the same database
// as the others, one more hop away.
const (
	BarePgBouncer   = "bare-pgbouncer"
	AtomicPgBouncer = "atomic-pgbouncer"
)

// BouncerVariants lists the variants through PgBouncer.
var BouncerVariants = []string{BarePgBouncer, AtomicPgBouncer}

// bouncerDB serves the variants through PgBouncer: handler opens the
// database through url on first use, and close closes it.
type bouncerDB struct {
	url string
	db  *database.DB
}

func (b *bouncerDB) handler(ctx context.Context, variant string) (http.Handler, error) {
	if b.url == "" {
		return nil, fmt.Errorf("bench: %s needs the URL of PgBouncer in front of the same database (--pgbouncer)", variant)
	}
	if b.db == nil {
		// Open refuses a PgBouncer that does not keep pgx's prepared
		// statements, with what to add to the URL.
		db, err := database.Open(ctx, b.url, &database.Config{TransactionPooling: true, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			return nil, fmt.Errorf("bench: open through PgBouncer: %w", err)
		}
		if db.Postgres == nil {
			db.Close()
			return nil, fmt.Errorf("bench: %s needs PostgreSQL", variant)
		}
		b.db = db
	}
	repo, err := payments.NewRepo(ctx, b.db)
	if err != nil {
		return nil, err
	}
	return variantHandler(b.db, repo, strings.TrimSuffix(variant, "-pgbouncer"))
}

func (b *bouncerDB) close() {
	if b.db != nil {
		b.db.Close()
	}
}
