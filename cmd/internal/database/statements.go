package database

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// ErrStatementsNotKept means that the PostgreSQL URL reaches the server
// through a pooler in transaction mode that does not keep pgx's prepared
// statements from one server connection to another, with pgx's default
// query mode, which prepares each statement once by name: most statements
// would fail. Open returns it, wrapped, with what to change in the URL.
var ErrStatementsNotKept = errors.New("database: PgBouncer does not keep prepared statements between its server connections " +
	"(PgBouncer before 1.21, or max_prepared_statements = 0), so most requests through it would fail: " +
	"add default_query_exec_mode=cache_describe to the database URL")

// codeNoSuchStatement is SQLSTATE invalid_sql_statement_name: a prepared
// statement that the server connection does not have.
const codeNoSuchStatement = "26000"

// statementsCheckTimeout bounds the check: a pooler that has no second
// server connection to hand out holds its last query.
const statementsCheckTimeout = 5 * time.Second

// checkStatements returns an error wrapping ErrStatementsNotKept when cc
// prepares statements by name (pgx's default query mode) and the pooler it
// reaches does not keep them, as PgBouncer in transaction mode before 1.21
// (or with max_prepared_statements = 0) does not. It prepares a statement
// on one client connection, pins the server connection that ran it to a
// transaction of a second client, and runs the statement again, which a
// transaction pooler then sends to another server connection. A direct
// connection, a session pooler and a pooler that keeps statements pass.
// So does another query mode, and every check that ends undecided: a
// server that cannot be reached (the pool reports it when it is used), a
// pooler that cannot hand out a second server connection.
func checkStatements(ctx context.Context, cc *pgx.ConnConfig) error {
	if cc.DefaultQueryExecMode != pgx.QueryExecModeCacheStatement {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, statementsCheckTimeout)
	defer cancel()
	conns := make([]*pgx.Conn, 2)
	for i := range conns {
		c, err := pgx.ConnectConfig(ctx, cc.Copy())
		if err != nil {
			return nil
		}
		defer c.Close(context.Background())
		conns[i] = c
	}
	// A statement of its own, which no server connection prepared for an
	// earlier check: pgx names a statement after its text.
	query := `SELECT $1::int + 1 AS ` + "probe_" + strings.ToLower(rand.Text())
	var n int
	if err := conns[0].QueryRow(ctx, query, 1).Scan(&n); err != nil {
		return nil
	}
	tx, err := conns[1].Begin(ctx)
	if err != nil {
		return nil
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(ctx, `SELECT 1`); err != nil {
		return nil
	}
	err = conns[0].QueryRow(ctx, query, 2).Scan(&n)
	if pgErr := (*pgconn.PgError)(nil); errors.As(err, &pgErr) && pgErr.Code == codeNoSuchStatement {
		return fmt.Errorf("%w (%v)", ErrStatementsNotKept, err)
	}
	return nil
}
