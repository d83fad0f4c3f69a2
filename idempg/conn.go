package idempg

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// cleanupTimeout bounds a rollback or an unlock made after a failure, whose
// context may already be done.
const cleanupTimeout = 5 * time.Second

// inTransaction reports whether the server session of pg is inside a
// transaction, open or aborted, as its last ReadyForQuery said.
func inTransaction(pg *pgconn.PgConn) bool {
	return pg.TxStatus() != 'I'
}

// cleanupContext is a context for cleaning up after ctx: not cancelled with
// it, and bounded by cleanupTimeout.
func cleanupContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
}

// endSession ends a lease that holds its key by the session-level lock: it
// rolls back the transaction, if one is open, and unlocks the key in one
// round trip, and returns the connection to the pool. A connection on which
// that fails, or whose state is unknown, is closed instead: the server then
// ends the transaction and frees the lock. A connection that already died
// needs nothing.
func endSession(ctx context.Context, conn *pgxpool.Conn, lock int64) error {
	pg := conn.Conn().PgConn()
	if pg.IsClosed() {
		conn.Release()
		return nil
	}
	ctx, cancel := cleanupContext(ctx)
	defer cancel()
	b := &pgx.Batch{}
	if inTransaction(pg) {
		b.Queue(queryRollback)
	}
	b.Queue(queryUnlock, lock)
	if err := conn.SendBatch(ctx, b).Close(); err != nil || inTransaction(pg) {
		closeConn(conn)
		if err == nil {
			err = errors.New("the connection is still in a transaction")
		}
		return wrapErr(ctx, "release key: unlock", err)
	}
	conn.Release()
	return nil
}

// endTx rolls tx back and returns its connection to the pool. A connection
// that has died needs no rollback: the server ended the transaction. conn
// may be nil (no connection was taken), and tx nil (the deferred
// transaction never began).
func endTx(ctx context.Context, conn *pgxpool.Conn, tx pgx.Tx) error {
	if conn == nil {
		return nil
	}
	defer conn.Release()
	if tx == nil {
		return nil
	}
	err := tx.Rollback(ctx)
	if err != nil && !conn.Conn().IsClosed() {
		return wrapErr(ctx, "release key: roll back", err)
	}
	return nil
}

// rollback rolls tx back after a failure, when tx is open. The connection
// is released by its owner; a connection left inside a transaction is
// closed by the pool rather than reused.
func rollback(ctx context.Context, tx pgx.Tx) {
	if tx == nil || tx.Conn() == nil || tx.Conn().IsClosed() || !inTransaction(tx.Conn().PgConn()) {
		return
	}
	ctx, cancel := cleanupContext(ctx)
	defer cancel()
	_ = tx.Rollback(ctx)
}

// closeConn closes a pooled connection and hands it back, so that the pool
// drops it: the way to be sure that the server ends its session, with the
// session's transaction and advisory locks.
func closeConn(conn *pgxpool.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	_ = conn.Conn().Close(ctx)
	conn.Release()
}
