package idempg

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

type txKey struct{}

// TxFromContext returns the transaction that the idem middleware opened for
// the request whose context this is. Business writes made in it commit
// together with the stored response, or roll back with the key.
//
// In idem.ModeAtomic the transaction is the claim's. In idem.ModeTwoPhase it
// is opened on the first call, so a handler can call other systems before it
// holds a connection; that first call waits at most Config.AcquireTimeout
// for one, and fails with an error wrapping idem.ErrUnavailable after that.
//
// The lease commits the transaction or rolls it back: its Commit and
// Rollback return [ErrTxManaged]. Savepoints from its Begin work as usual,
// so pgx.BeginFunc(ctx, tx, ...) does too. Like any pgx transaction it is
// for one goroutine at a time. Statements sent through it are watched for
// serialization failures and deadlocks, which make the middleware run the
// request again (see idem.ConflictReporter); statements sent through
// tx.Conn() or tx.LargeObjects() are not.
func TxFromContext(ctx context.Context) (pgx.Tx, error) {
	lt, ok := ctx.Value(txKey{}).(*leaseTx)
	if !ok {
		return nil, ErrNoTx
	}
	return lt.get(ctx)
}

// leaseTx is a lease's transaction, opened with the claim or on first use.
type leaseTx struct {
	store *Store

	mu    sync.Mutex
	conn  *pgxpool.Conn // nil for a ClaimTx lease: the caller owns the connection
	tx    pgx.Tx
	view  *observedTx // what TxFromContext hands out
	ended bool

	// done is ended, readable without mu: the transaction's connection
	// may already serve other requests, so the view refuses to use it.
	done       atomic.Bool
	conflicted atomic.Bool
}

// open installs tx, on conn, as the lease's transaction.
func (lt *leaseTx) open(conn *pgxpool.Conn, tx pgx.Tx) {
	lt.conn, lt.tx = conn, tx
	lt.view = &observedTx{tx: tx, lt: lt, top: true}
}

func (lt *leaseTx) get(ctx context.Context) (pgx.Tx, error) {
	lt.mu.Lock()
	defer lt.mu.Unlock()
	if lt.ended {
		return nil, ErrLeaseEnded
	}
	if lt.tx == nil {
		conn, tx, err := lt.store.begin(ctx, "begin handler transaction")
		if err != nil {
			return nil, err
		}
		lt.open(conn, tx)
	}
	return lt.view, nil
}

// end takes the transaction out, so that nothing uses it after the lease
// ends. ended is true when the lease had already ended.
func (lt *leaseTx) end() (conn *pgxpool.Conn, tx pgx.Tx, ended bool) {
	lt.mu.Lock()
	defer lt.mu.Unlock()
	if lt.ended {
		return nil, nil, true
	}
	lt.ended = true
	lt.done.Store(true)
	conn, tx = lt.conn, lt.tx
	lt.conn, lt.tx, lt.view = nil, nil, nil
	return conn, tx, false
}

// observe records a conflict in err.
func (lt *leaseTx) observe(err error) error {
	if err != nil && isConflict(err) {
		lt.conflicted.Store(true)
	}
	return err
}

// begin opens a handler transaction on a pooled connection. The wait for
// the connection is bounded by Config.AcquireTimeout; the transaction itself
// lives until it is committed or rolled back, whatever happens to ctx.
func (s *Store) begin(ctx context.Context, op string) (*pgxpool.Conn, pgx.Tx, error) {
	conn, err := s.acquire(ctx, op)
	if err != nil {
		return nil, nil, err
	}
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: s.cfg.IsoLevel})
	if err != nil {
		conn.Release()
		return nil, nil, wrapErr(ctx, op, err)
	}
	return conn, tx, nil
}

var _ pgx.Tx = (*observedTx)(nil)

// observedTx is a pgx.Tx that records serialization failures and deadlocks
// of its statements in its lease. The lease's own transaction (top) refuses
// Commit and Rollback; its savepoints do not.
type observedTx struct {
	tx  pgx.Tx
	lt  *leaseTx
	top bool
}

func (t *observedTx) Begin(ctx context.Context) (pgx.Tx, error) {
	if t.lt.done.Load() {
		return nil, pgx.ErrTxClosed
	}
	inner, err := t.tx.Begin(ctx)
	if err != nil {
		return nil, t.lt.observe(err)
	}
	return &observedTx{tx: inner, lt: t.lt}, nil
}

func (t *observedTx) Commit(ctx context.Context) error {
	if t.top {
		return ErrTxManaged
	}
	if t.lt.done.Load() {
		return pgx.ErrTxClosed
	}
	return t.lt.observe(t.tx.Commit(ctx))
}

func (t *observedTx) Rollback(ctx context.Context) error {
	if t.top {
		return ErrTxManaged
	}
	if t.lt.done.Load() {
		return pgx.ErrTxClosed
	}
	return t.tx.Rollback(ctx)
}

func (t *observedTx) CopyFrom(ctx context.Context, tableName pgx.Identifier, columnNames []string, rowSrc pgx.CopyFromSource) (int64, error) {
	if t.lt.done.Load() {
		return 0, pgx.ErrTxClosed
	}
	n, err := t.tx.CopyFrom(ctx, tableName, columnNames, rowSrc)
	return n, t.lt.observe(err)
}

func (t *observedTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	if t.lt.done.Load() {
		return pgx.FailedBatchResults(b, pgx.ErrTxClosed)
	}
	return &observedBatch{BatchResults: t.tx.SendBatch(ctx, b), lt: t.lt}
}

func (t *observedTx) LargeObjects() pgx.LargeObjects { return t.tx.LargeObjects() }

func (t *observedTx) Prepare(ctx context.Context, name, sql string) (*pgconn.StatementDescription, error) {
	if t.lt.done.Load() {
		return nil, pgx.ErrTxClosed
	}
	sd, err := t.tx.Prepare(ctx, name, sql)
	return sd, t.lt.observe(err)
}

func (t *observedTx) Exec(ctx context.Context, sql string, arguments ...any) (pgconn.CommandTag, error) {
	if t.lt.done.Load() {
		return pgconn.CommandTag{}, pgx.ErrTxClosed
	}
	tag, err := t.tx.Exec(ctx, sql, arguments...)
	return tag, t.lt.observe(err)
}

func (t *observedTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if t.lt.done.Load() {
		return nil, pgx.ErrTxClosed
	}
	rows, err := t.tx.Query(ctx, sql, args...)
	if rows != nil {
		rows = &observedRows{Rows: rows, lt: t.lt}
	}
	return rows, t.lt.observe(err)
}

func (t *observedTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if t.lt.done.Load() {
		return errRow{pgx.ErrTxClosed}
	}
	return observedRow{row: t.tx.QueryRow(ctx, sql, args...), lt: t.lt}
}

func (t *observedTx) Conn() *pgx.Conn { return t.tx.Conn() }

// observedRows records the error that ends an iteration.
type observedRows struct {
	pgx.Rows
	lt *leaseTx
}

func (r *observedRows) Next() bool {
	if r.Rows.Next() {
		return true
	}
	r.lt.observe(r.Rows.Err())
	return false
}

func (r *observedRows) Close() {
	r.Rows.Close()
	r.lt.observe(r.Rows.Err())
}

func (r *observedRows) Err() error { return r.lt.observe(r.Rows.Err()) }

type observedRow struct {
	row pgx.Row
	lt  *leaseTx
}

func (r observedRow) Scan(dest ...any) error { return r.lt.observe(r.row.Scan(dest...)) }

type observedBatch struct {
	pgx.BatchResults
	lt *leaseTx
}

func (b *observedBatch) Exec() (pgconn.CommandTag, error) {
	tag, err := b.BatchResults.Exec()
	return tag, b.lt.observe(err)
}

func (b *observedBatch) Query() (pgx.Rows, error) {
	rows, err := b.BatchResults.Query()
	if rows != nil {
		rows = &observedRows{Rows: rows, lt: b.lt}
	}
	return rows, b.lt.observe(err)
}

func (b *observedBatch) QueryRow() pgx.Row {
	return observedRow{row: b.BatchResults.QueryRow(), lt: b.lt}
}

func (b *observedBatch) Close() error { return b.lt.observe(b.BatchResults.Close()) }

// errRow is a pgx.Row that fails.
type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }
