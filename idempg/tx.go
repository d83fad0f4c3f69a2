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
