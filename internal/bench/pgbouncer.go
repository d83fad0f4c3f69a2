package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idemkit/idem/internal/database"
	"github.com/idemkit/idem/internal/payments"
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
		db, err := database.Open(ctx, b.url, &database.Config{TransactionPooling: true, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			return nil, fmt.Errorf("bench: open through PgBouncer: %w", err)
		}
		if db.Postgres == nil {
			db.Close()
			return nil, fmt.Errorf("bench: %s needs PostgreSQL", variant)
		}
		if err := checkStatements(ctx, db.Pool.Config().ConnConfig); err != nil {
			db.Close()
			return nil, err
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

// codeNoSuchStatement is SQLSTATE invalid_sql_statement_name: a prepared
// statement that the server connection does not have.
const codeNoSuchStatement = "26000"

// checkStatements returns an error that says what to do when the pooler at
// cc does not keep pgx's prepared statements from one server connection to
// another, as PgBouncer in transaction mode before 1.21 (or with
// max_prepared_statements = 0) does not: with pgx's default query mode,
// which prepares each statement once by name, most requests through it
// would fail. It prepares a statement on one client connection, pins the
// server connection that ran it to a transaction of a second client, and
// runs the statement again, which PgBouncer then sends to another server
// connection. A pooler that cannot hand out a second server connection
// leaves the check undecided: it passes.
func checkStatements(ctx context.Context, cc *pgx.ConnConfig) error {
	conns := make([]*pgx.Conn, 2)
	for i := range conns {
		c, err := pgx.ConnectConfig(ctx, cc.Copy())
		if err != nil {
			return fmt.Errorf("bench: connect through PgBouncer: %w", err)
		}
		defer c.Close(context.Background())
		conns[i] = c
	}
	const query = `SELECT $1::int + 1`
	var n int
	if err := conns[0].QueryRow(ctx, query, 1).Scan(&n); err != nil {
		return fmt.Errorf("bench: query through PgBouncer: %w", err)
	}
	tx, err := conns[1].Begin(ctx)
	if err != nil {
		return fmt.Errorf("bench: begin through PgBouncer: %w", err)
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(ctx, `SELECT 1`); err != nil {
		return fmt.Errorf("bench: query through PgBouncer: %w", err)
	}
	qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	err = conns[0].QueryRow(qctx, query, 2).Scan(&n)
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &pgErr) && pgErr.Code == codeNoSuchStatement:
		return fmt.Errorf("bench: PgBouncer does not keep prepared statements between its server connections "+
			"(PgBouncer before 1.21, or max_prepared_statements = 0), so most requests through it would fail: "+
			"add default_query_exec_mode=cache_describe to the --pgbouncer URL (%v)", err)
	case err != nil && qctx.Err() == nil:
		return fmt.Errorf("bench: query through PgBouncer: %w", err)
	}
	return nil
}
