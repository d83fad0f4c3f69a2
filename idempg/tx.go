package idempg

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

type txKey struct{}

// TxFromContext returns the transaction that the idem middleware opened for
// the request whose context this is. Business writes made in it commit
// together with the stored response, or roll back with the key.
//
// In idem.ModeAtomic the transaction is the claim's. When the middleware's
// claim is deferred (see the package documentation, Round trips), the
// first statement sent through it carries the claim; if the key turns out
// to be held or completed, that statement and every later one fail with an
// error wrapping [ErrNotClaimed], without running. In idem.ModeTwoPhase it
// is opened on the first call, so a handler can call other systems before it
// holds a connection; that first call waits at most Config.AcquireTimeout
// for one, and fails with an error wrapping idemstore.ErrUnavailable after that.
// Its BEGIN is sent with the first statement, in the same round trip, when
// that statement is an Exec with arguments; other first uses send it on
// their own first. Until then, nothing has run on the connection.
//
// The lease commits the transaction or rolls it back: its Commit and
// Rollback return [ErrTxManaged]. Savepoints from its Begin work as usual,
// so pgx.BeginFunc(ctx, tx, ...) does too. Like any pgx transaction it is
// for one goroutine at a time. Statements sent through it are watched for
// serialization failures and deadlocks, which make the middleware run the
// request again (see idemstore.ConflictReporter); statements sent through
// tx.Conn() or tx.LargeObjects() are not.
func TxFromContext(ctx context.Context) (pgx.Tx, error) {
	lt, ok := ctx.Value(txKey{}).(*leaseTx)
	if !ok {
		return nil, ErrNoTx
	}
	lt.mu.Lock()
	if lt.ended.Load() {
		lt.mu.Unlock()
		return nil, ErrLeaseEnded
	}
	if lt.view == nil {
		conn, err := lt.store.acquire(ctx, "begin handler transaction")
		if err != nil {
			lt.mu.Unlock()
			return nil, err
		}
		lt.conn = conn
		lt.view = &observedTx{lt: lt, top: true}
	}
	view := lt.view
	lt.mu.Unlock()
	return view, nil
}

// leaseTx is a lease's transaction, opened with the claim or on first use.
//
// A two-phase lease's transaction is deferred: the first TxFromContext
// takes a connection, and BEGIN goes out with the first statement (see
// observedTx.Exec). Until then conn is set and tx is nil.
type leaseTx struct {
	store *Store

	mu   sync.Mutex
	conn *pgxpool.Conn // nil for a ClaimTx lease: the caller owns the connection
	tx   pgx.Tx        // nil until the deferred transaction begins
	view *observedTx   // what TxFromContext hands out

	// ended is set, under mu, when the lease completes or is released.
	// Views read it without mu: the transaction's connection may already
	// serve other requests, so they refuse to use it.
	ended      atomic.Bool
	conflicted atomic.Bool

	// claim is the claim of a deferred lease (lease_deferred.go), which
	// begin sends in front of BEGIN while it is pending; nil for other
	// leases. Guarded by mu until the lease ends.
	claim *deferredClaim

	// firstView is the view that open installs, in the lease's own
	// allocation. open is called once, when the lease is made; a view
	// made after a detach is a new one, so that a view taken before it
	// never reaches the transaction begun after it.
	firstView observedTx
}

// open installs tx, on conn, as the lease's transaction.
func (lt *leaseTx) open(conn *pgxpool.Conn, tx pgx.Tx) {
	lt.conn, lt.tx = conn, tx
	lt.firstView = observedTx{tx: tx, lt: lt, top: true}
	lt.view = &lt.firstView
}

// begin begins the deferred transaction of view, the lease's top view,
// unless it has begun. With sql set, it sends sql and args in the same
// round trip as BEGIN, as Exec does, and returns their result; ran reports
// whether it did. The lock is held for the round trip, so that the lease
// cannot end, and its connection go back to the pool, in the middle of it.
func (lt *leaseTx) begin(ctx context.Context, view *observedTx, sql string, args []any) (tag pgconn.CommandTag, ran bool, err error) {
	withSQL := sql != ""
	lt.mu.Lock()
	defer lt.mu.Unlock()
	if lt.ended.Load() {
		return pgconn.CommandTag{}, false, pgx.ErrTxClosed
	}
	if lt.tx != nil {
		view.tx = lt.tx
		return pgconn.CommandTag{}, false, nil
	}
	if lt.conn == nil {
		// A view taken before a checkpoint, used after it and before the
		// next TxFromContext: its transaction has committed.
		return pgconn.CommandTag{}, false, pgx.ErrTxClosed
	}
	dc := lt.claim
	if refusal := dc.refused(); refusal != nil {
		// Nothing runs for a request whose claim was refused.
		return pgconn.CommandTag{}, withSQL, refusal
	}
	claiming := dc.pending()
	var b *batch
	if claiming {
		b = dc.claimBatch() // the claim, then BEGIN: one round trip
	} else {
		b = newBatch()
		b.BeginTx(pgx.TxOptions{IsoLevel: lt.store.cfg.IsoLevel})
	}
	if withSQL {
		b.add(sql, args...)
	}
	var br pgx.BatchResults
	if claiming {
		br, err = dc.sendBegin(ctx, lt.conn, b) // the guard and BEGIN
	} else {
		br = lt.conn.SendBatch(ctx, &b.Batch)
		_, err = br.Exec() // BEGIN
	}
	tx := br.Tx()
	if err == nil && withSQL {
		tag, err = br.Exec()
	}
	// Close reads what is left and returns the first error, if any, in
	// the order sent (see deferredClaim.readGuard).
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	// The transaction exists once BEGIN ran, even if the statement after it
	// failed and aborted it; Complete or Release ends it. If BEGIN did not
	// run, the next use tries again.
	pg := lt.conn.Conn().PgConn()
	inTx := !pg.IsClosed() && inTransaction(pg)
	if inTx {
		lt.tx, view.tx = tx, tx
	}
	if claiming {
		if refusal := dc.settle(ctx, lt.conn, err, inTx); refusal != nil {
			return pgconn.CommandTag{}, withSQL, refusal
		}
	}
	if !withSQL && err != nil {
		err = wrapErr(ctx, "begin handler transaction", err)
	}
	return tag, withSQL, err
}

// deferrable reports whether an Exec of args can go out in a batch with
// BEGIN and behave as it would on its own: pgx sends a statement without
// arguments by the simple protocol, which allows several statements in one
// string, and reads an execution mode or a query rewriter from the front of
// args, which a batch does not.
func deferrable(args []any) bool {
	if len(args) == 0 {
		return false
	}
	switch args[0].(type) {
	case string, []byte, int64, int, int32, bool, float64, time.Time:
		// The usual first arguments, which are not pgx's options. They
		// are listed first because a case of concrete types compares the
		// type alone, while QueryRewriter, an interface, costs a call
		// into the runtime's type switch (about 150 instructions).
		return true
	case pgx.QueryExecMode, pgx.QueryRewriter:
		return false
	}
	return true
}

// end takes the transaction out, so that nothing uses it after the lease
// ends. ended is true when the lease had already ended.
func (lt *leaseTx) end() (conn *pgxpool.Conn, tx pgx.Tx, ended bool) {
	lt.mu.Lock()
	if lt.ended.Load() {
		lt.mu.Unlock()
		return nil, nil, true
	}
	lt.ended.Store(true)
	conn, tx = lt.conn, lt.tx
	lt.conn, lt.tx, lt.view = nil, nil, nil
	lt.mu.Unlock()
	return conn, tx, false
}

// detach takes the transaction out and leaves the lease holding none, so
// that the next use begins a new one.
func (lt *leaseTx) detach() (conn *pgxpool.Conn, tx pgx.Tx, ended bool) {
	lt.mu.Lock()
	defer lt.mu.Unlock()
	if lt.ended.Load() {
		return nil, nil, true
	}
	conn, tx = lt.conn, lt.tx
	lt.conn, lt.tx, lt.view = nil, nil, nil
	return conn, tx, false
}

// observe records a conflict in err. It is inlined: most statements
// return no error.
func (lt *leaseTx) observe(err error) error {
	if err != nil {
		lt.observeErr(err)
	}
	return err
}

// observeErr is observe's rare half, kept out of line so that observe is
// inlined.
//
//go:noinline
func (lt *leaseTx) observeErr(err error) {
	if isConflict(err) {
		lt.conflicted.Store(true)
	}
}

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

// ClaimKey sends the claim of the request's key now, if the lease in ctx
// is one whose claim waits for its transaction's first statement (see
// the package documentation, Round trips): with BEGIN, in one round trip,
// so that the key is held before the handler does anything that is not a
// statement of the transaction, such as calling another system. It
// returns an error wrapping [ErrNotClaimed] (and an *idemstore.ExistsError)
// when the key is held by another request or completed; the handler then
// stops, and the middleware answers from the key. For any other lease,
// and once the claim has gone out, it does nothing and returns nil, or
// the refusal. It returns [ErrNoTx] for a context without a lease of this
// package.
func ClaimKey(ctx context.Context) error {
	lt, ok := ctx.Value(txKey{}).(*leaseTx)
	if !ok {
		return ErrNoTx
	}
	lt.mu.Lock()
	view := lt.view
	pending := lt.claim.pending() && view != nil
	refusal := lt.claim.refused()
	lt.mu.Unlock()
	if !pending {
		// Nothing to send: in particular no connection is taken for a
		// two-phase lease, whose transaction waits for its first use.
		return refusal
	}
	_, _, err := lt.begin(ctx, view, "", nil) // refuses an ended lease
	return err
}
