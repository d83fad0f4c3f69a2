package bench

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"net/http"
	"runtime/pprof"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/cmd/internal/database"
	"github.com/idemkit/idem/cmd/internal/payments"
	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/internal/bearer"
)

// benchToken is the bearer token that send uses, and benchClient the
// client it authenticates.
const (
	benchToken  = "sk_bench"
	benchClient = "bench"
)

// variantHandler returns the payments endpoint of a variant. The bare
// variants serve payments.Service.Create without the idem middleware: a
// payment per request, retries included, which no payments API may do; it
// is only the baseline the middleware is measured against.
func variantHandler(db *database.DB, repo payments.Repo, variant string) (http.Handler, error) {
	tokens, err := bearer.Parse(benchToken + "=" + benchClient)
	if err != nil {
		return nil, err
	}
	pc := payments.Config{Repo: repo, Store: db.Store(), Tokens: tokens, Logger: slog.New(slog.DiscardHandler)}
	switch {
	case variant == TwoPhase:
		pc.Idem.Mode = idem.ModeTwoPhase
	case variant == BareTx:
		pc.Repo = &ownTxRepo{Repo: repo, db: db}
	case slices.Contains(FloorVariants, variant), slices.Contains(MySQLFloorVariants, variant):
		if pc.Repo, err = newFloorRepo(db, repo, variant); err != nil {
			return nil, err
		}
	}
	svc, err := payments.NewService(pc)
	if err != nil {
		return nil, err
	}
	if variant == Atomic || variant == TwoPhase || variant == Conflict {
		return svc.Handler(), nil
	}
	var h http.Handler = http.HandlerFunc(svc.Create)
	if slices.Contains(FloorVariants, variant) || slices.Contains(MySQLFloorVariants, variant) {
		h = withKeyScope(h)
	}
	mux := http.NewServeMux()
	mux.Handle("POST /v1/payments", payments.Authenticator{Tokens: tokens}.Wrap(h))
	return mux, nil
}

// withKeyScope gives h the request's Idempotency-Key as its scope, as the
// middleware would, so that a floor variant writes its payment and its key
// row under the key the request carried, as atomic mode does, and both
// spread their rows over the key indexes alike.
func withKeyScope(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		scope := idemstore.Scope{ClientID: benchClient, Key: r.Header.Get(idem.HeaderKey)}
		h.ServeHTTP(w, r.WithContext(idem.ContextWithScope(r.Context(), scope)))
	})
}

// ownTxRepo inserts each payment in a transaction of its own, as an
// endpoint that writes several rows must: the bare-tx baseline.
type ownTxRepo struct {
	payments.Repo // Get, Count
	db            *database.DB
}

func (r *ownTxRepo) Insert(ctx context.Context, p *payments.Payment) error {
	args := []any{p.ID, p.ClientID, p.Amount, p.Currency, p.Customer, p.Description, p.Status, p.Created, p.IdempotencyKey}
	if r.db.SQLite != nil {
		tx, err := r.db.SQLite.DB().BeginTx(ctx, nil)
		if err != nil {
			return fmt.Errorf("bench: begin: %w", err)
		}
		if _, err := tx.ExecContext(ctx, payments.SQLiteInsert, args...); err != nil {
			_ = tx.Rollback()
			return fmt.Errorf("bench: insert: %w", err)
		}
		return commit(tx)
	}
	if r.db.MySQL != nil {
		tx, err := r.db.MySQL.DB().BeginTx(ctx, nil)
		if err != nil {
			return fmt.Errorf("bench: begin: %w", err)
		}
		if _, err := tx.ExecContext(ctx, payments.SQLiteInsert, args...); err != nil {
			_ = tx.Rollback()
			return fmt.Errorf("bench: insert: %w", err)
		}
		return commit(tx)
	}
	return pgx.BeginFunc(ctx, r.db.Pool, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, payments.PostgresInsert, args...)
		return err
	})
}

func commit(tx *sql.Tx) error {
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("bench: commit: %w", err)
	}
	return nil
}

// labeled runs h with the profiler label variant=v, so that a CPU profile
// of the run (idem bench --cpuprofile) splits by variant:
// go tool pprof -tagfocus variant=atomic.
func labeled(v string, h http.Handler) http.Handler {
	labels := pprof.Labels("variant", v)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		pprof.Do(r.Context(), labels, func(ctx context.Context) { h.ServeHTTP(w, r.WithContext(ctx)) })
	})
}
