package idempg

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

var _ pgx.Tx = (*observedTx)(nil)

// observedTx is a pgx.Tx that records serialization failures and deadlocks
// of its statements in its lease. The lease's own transaction (top) refuses
// Commit and Rollback; its savepoints do not.
//
// tx is nil while the lease's transaction is deferred; it is set, by the
// goroutine using the view, when the transaction begins.
type observedTx struct {
	tx  pgx.Tx
	lt  *leaseTx
	top bool
}

// current returns the transaction to send a statement in, beginning the
// deferred one first.
func (t *observedTx) current(ctx context.Context) (pgx.Tx, error) {
	if t.tx != nil {
		return t.tx, nil
	}
	if _, _, err := t.lt.begin(ctx, t, "", nil); err != nil {
		return nil, err
	}
	return t.tx, nil
}

// use is the preamble of every statement sent through the view: it
// returns the transaction to send it in, or pgx.ErrTxClosed once the lease
// has ended, or the error of beginning the deferred transaction, recorded
// in the lease if it is a conflict.
func (t *observedTx) use(ctx context.Context) (pgx.Tx, error) {
	if t.lt.ended.Load() {
		return nil, pgx.ErrTxClosed
	}
	tx, err := t.current(ctx)
	if err != nil {
		return nil, t.lt.observe(err)
	}
	return tx, nil
}

func (t *observedTx) Begin(ctx context.Context) (pgx.Tx, error) {
	tx, err := t.use(ctx)
	if err != nil {
		return nil, err
	}
	inner, err := tx.Begin(ctx)
	if err != nil {
		return nil, t.lt.observe(err)
	}
	return &observedTx{tx: inner, lt: t.lt}, nil
}

func (t *observedTx) Commit(ctx context.Context) error {
	if t.top {
		return ErrTxManaged
	}
	if t.lt.ended.Load() {
		return pgx.ErrTxClosed
	}
	return t.lt.observe(t.tx.Commit(ctx))
}

func (t *observedTx) Rollback(ctx context.Context) error {
	if t.top {
		return ErrTxManaged
	}
	if t.lt.ended.Load() {
		return pgx.ErrTxClosed
	}
	return t.tx.Rollback(ctx)
}

func (t *observedTx) CopyFrom(ctx context.Context, tableName pgx.Identifier, columnNames []string, rowSrc pgx.CopyFromSource) (int64, error) {
	tx, err := t.use(ctx)
	if err != nil {
		return 0, err
	}
	n, err := tx.CopyFrom(ctx, tableName, columnNames, rowSrc)
	return n, t.lt.observe(err)
}

func (t *observedTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	tx, err := t.use(ctx)
	if err != nil {
		return pgx.FailedBatchResults(b, err)
	}
	return &observedBatch{BatchResults: tx.SendBatch(ctx, b), lt: t.lt}
}

// LargeObjects begins the deferred transaction first, waiting at most
// beginTimeout; if that fails, the large objects fail with pgx.ErrTxClosed.
func (t *observedTx) LargeObjects() pgx.LargeObjects {
	tx, err := t.currentNoContext()
	if err != nil {
		return closedTx().LargeObjects()
	}
	return tx.LargeObjects()
}

func (t *observedTx) Prepare(ctx context.Context, name, sql string) (*pgconn.StatementDescription, error) {
	tx, err := t.use(ctx)
	if err != nil {
		return nil, err
	}
	sd, err := tx.Prepare(ctx, name, sql)
	return sd, t.lt.observe(err)
}

func (t *observedTx) Exec(ctx context.Context, sql string, arguments ...any) (pgconn.CommandTag, error) {
	if t.tx == nil && deferrable(arguments) {
		// BEGIN and the statement in one round trip; begin refuses an
		// ended lease.
		tag, ran, err := t.lt.begin(ctx, t, sql, arguments)
		if ran || err != nil {
			return tag, t.lt.observe(err)
		}
	}
	tx, err := t.use(ctx)
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	tag, err := tx.Exec(ctx, sql, arguments...)
	return tag, t.lt.observe(err)
}

func (t *observedTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	tx, err := t.use(ctx)
	if err != nil {
		return nil, err
	}
	rows, err := tx.Query(ctx, sql, args...)
	if rows != nil {
		rows = &observedRows{Rows: rows, lt: t.lt}
	}
	return rows, t.lt.observe(err)
}

func (t *observedTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	tx, err := t.use(ctx)
	if err != nil {
		return errRow{err}
	}
	return observedRow{row: tx.QueryRow(ctx, sql, args...), lt: t.lt}
}

// Conn begins the deferred transaction first, waiting at most
// beginTimeout, so that statements sent on the connection run in it. It
// returns nil if that fails.
func (t *observedTx) Conn() *pgx.Conn {
	tx, err := t.currentNoContext()
	if err != nil {
		return nil
	}
	return tx.Conn()
}

// beginTimeout bounds the BEGIN that Conn and LargeObjects send for a
// deferred transaction: they take no context.
const beginTimeout = 5 * time.Second

func (t *observedTx) currentNoContext() (pgx.Tx, error) {
	if t.tx != nil {
		return t.tx, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), beginTimeout)
	defer cancel()
	return t.current(ctx)
}

// closedTx returns a transaction whose methods fail with pgx.ErrTxClosed.
func closedTx() pgx.Tx {
	b := &pgx.Batch{}
	b.BeginTx(pgx.TxOptions{})
	return pgx.FailedBatchResults(b, pgx.ErrTxClosed).Tx()
}

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
