package idemmysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/internal/record"
)

// ErrNoTx is returned by [TxFromContext] for a context that carries no lease.
var ErrNoTx = errors.New("idemmysql: no idempotency transaction in context")

type txKey struct{}

// TxFromContext returns the transaction that the idem middleware opened for
// the request whose context this is. Business writes made in it commit
// together with the stored response, or roll back with the key.
//
// In ModeAtomic the transaction was opened with the claim, and holds the
// key's row. In ModeTwoPhase it is opened on the first call, so a handler
// can call other systems before it holds a connection. Do not commit or
// roll it back. Once the lease is completed or released, it returns an
// error wrapping idemstore.ErrLeaseEnded.
func TxFromContext(ctx context.Context) (*sql.Tx, error) {
	lt, ok := ctx.Value(txKey{}).(*leaseTx)
	if !ok {
		return nil, ErrNoTx
	}
	return lt.get(ctx)
}

// leaseTx is a lease's transaction, on a connection of its own, opened at
// once or on first use.
type leaseTx struct {
	store *Store
	mu    sync.Mutex
	conn  *sql.Conn
	dc    *conn // the driver connection under conn, to ask whether the server rolled back
	tx    *sql.Tx
	ended bool
	// rolledBack is set once a transaction of the lease was rolled back by
	// the server (a deadlock): it is a conflict.
	rolledBack bool
}

// beginTx takes a connection from the pool and begins a transaction on it.
// The wait for the connection is bounded by ctx; the transaction lives
// until commit or rollback, whatever happens to ctx.
func (s *Store) beginTx(ctx context.Context) (*leaseTx, error) {
	lt := &leaseTx{store: s}
	if err := lt.begin(ctx); err != nil {
		return nil, err
	}
	return lt, nil
}

func (lt *leaseTx) begin(ctx context.Context) error {
	c, err := lt.store.db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("idemmysql: connect: %w", unavailable(err))
	}
	var dc *conn
	_ = c.Raw(func(d any) error { dc, _ = d.(*conn); return nil })
	tx, err := c.BeginTx(context.WithoutCancel(ctx), nil)
	if err != nil {
		c.Close()
		return fmt.Errorf("idemmysql: begin: %w", unavailable(err))
	}
	lt.conn, lt.dc, lt.tx = c, dc, tx
	return nil
}

func (lt *leaseTx) get(ctx context.Context) (*sql.Tx, error) {
	lt.mu.Lock()
	defer lt.mu.Unlock()
	if lt.ended {
		return nil, fmt.Errorf("idemmysql: %w", idemstore.ErrLeaseEnded)
	}
	if lt.tx == nil {
		if err := lt.begin(ctx); err != nil {
			return nil, err
		}
	}
	return lt.tx, nil
}

// serverRolledBack reports whether the server rolled back the open
// transaction under the lease.
func (lt *leaseTx) serverRolledBack() bool {
	return lt.dc != nil && lt.dc.rolledBack.Load()
}

// conflicted reports whether a transaction of the lease was rolled back by
// the server.
func (lt *leaseTx) conflicted() bool {
	lt.mu.Lock()
	defer lt.mu.Unlock()
	return lt.rolledBack || lt.tx != nil && lt.serverRolledBack()
}

// take takes the open transaction out of the lease (a copy of lt that
// holds it; nil when none is open): end also ends the lease; otherwise
// the next use begins a new transaction. ended is true when the lease had
// already ended.
func (lt *leaseTx) take(end bool) (open *leaseTx, ended bool) {
	lt.mu.Lock()
	defer lt.mu.Unlock()
	if lt.ended {
		return nil, true
	}
	lt.ended = end
	if lt.tx == nil {
		return nil, false
	}
	if lt.serverRolledBack() {
		lt.rolledBack = true
	}
	open = &leaseTx{store: lt.store, conn: lt.conn, dc: lt.dc, tx: lt.tx}
	lt.conn, lt.dc, lt.tx = nil, nil, nil
	return open, false
}

func (lt *leaseTx) hasEnded() bool {
	lt.mu.Lock()
	defer lt.mu.Unlock()
	return lt.ended
}

// rollback rolls the transaction back and gives its connection back to
// the pool; a connection whose rollback failed is closed, which rolls back
// on the server.
func (lt *leaseTx) rollback() error {
	err := lt.tx.Rollback()
	if err != nil && !errors.Is(err, sql.ErrTxDone) {
		discard(lt.conn)
	} else {
		err = nil
	}
	lt.conn.Close()
	return err
}

// commit commits the transaction and gives its connection back.
func (lt *leaseTx) commit() error {
	err := lt.tx.Commit()
	if err != nil {
		discard(lt.conn)
	}
	lt.conn.Close()
	return err
}

// lease is the ownership of a key's row, which the two kinds of lease
// embed:
//
//   - atomicLease: the claim's transaction stays open from the claim to
//     the stored response and holds the claimed row; rolling it back
//     frees the key.
//   - twoPhaseLease (lease_twophase.go): the claim is committed at once;
//     the handler's writes and the response run in later transactions,
//     fenced by the lease's token and the row's created_at. It is the
//     only lease that keeps recovery points.
type lease struct {
	store *Store
	scope idemstore.Scope
	info  idemstore.LeaseInfo
	// createdAt is the created_at of the row the lease claimed
	// (microseconds): with the token, the fence of every write the lease
	// makes to its row, since a row made anew after this one was deleted
	// starts again at token 1.
	createdAt int64
	tx        *leaseTx
}

func (l *lease) Context(ctx context.Context) context.Context {
	return context.WithValue(ctx, txKey{}, l.tx)
}

func (l *lease) Info() idemstore.LeaseInfo { return l.info }

// Conflicted implements [idemstore.ConflictReporter]: the server rolled
// back the lease's transaction, a deadlock (error 1213) or, with
// innodb_rollback_on_timeout on, a lock wait timeout (1205). A rerun may
// succeed.
func (l *lease) Conflicted() bool { return l.tx.conflicted() }

// complete stores resp in the lease's row, in tx, by the fenced update that
// changes the row only while the lease's token holds it, and commits; tx
// is rolled back when that fails. lost is the error when the update
// changes no row.
func (l *lease) complete(ctx context.Context, tx *leaseTx, resp *idemstore.Response, lost func(context.Context) error) error {
	committed := false
	defer func() {
		if !committed {
			tx.rollback()
		}
	}()
	header, err := record.EncodeHeader(resp.Header)
	if err != nil {
		return fmt.Errorf("idemmysql: %w", err)
	}
	res, err := tx.tx.ExecContext(ctx, queryCompleteKey, resp.StatusCode, header, record.EncodeBody(resp.Body), time.Now().UnixMicro(),
		l.scope.ClientID, l.scope.Key, l.info.Token, l.createdAt)
	if err != nil {
		if errNumber(err) == errDeadlock {
			l.tx.mu.Lock()
			l.tx.rolledBack = true
			l.tx.mu.Unlock()
		}
		return fmt.Errorf("idemmysql: complete key: %w", unavailable(err))
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		return lost(ctx)
	}
	committed = true
	if err := tx.commit(); err != nil {
		return fmt.Errorf("idemmysql: commit: %w", commitErr(err))
	}
	return nil
}

// completedByAnother is the error of a completion that found the lease's
// row gone or changed: an *idemstore.CompletedError that carries the key
// when another request completed it, else idemstore.ErrLeaseLost.
func (l *lease) completedByAnother(ctx context.Context) error {
	rec, err := load(ctx, l.store.db, l.scope)
	switch {
	case err != nil:
		return fmt.Errorf("idemmysql: complete key: the lease's row changed: %w", err)
	case rec != nil && rec.Status == idemstore.StatusCompleted:
		return fmt.Errorf("idemmysql: complete key (token %d): %w", l.info.Token, &idemstore.CompletedError{Record: rec})
	}
	return fmt.Errorf("idemmysql: complete key (token %d): %w", l.info.Token, idemstore.ErrLeaseLost)
}

var _ idemstore.Lease = (*atomicLease)(nil)

// atomicLease holds a key by the claim's transaction, left open for the
// handler: the claimed row lives in it, so Complete stores the response and
// commits the row, the handler's writes and the response together, and
// Release rolls everything back. It keeps no recovery points.
type atomicLease struct {
	lease
}

// Complete implements [idemstore.Lease]: it stores resp in the claim's
// transaction and commits it.
func (l *atomicLease) Complete(ctx context.Context, resp *idemstore.Response) error {
	tx, ended := l.tx.take(true)
	if ended || tx == nil {
		return fmt.Errorf("idemmysql: complete key: %w", idemstore.ErrLeaseEnded)
	}
	return l.complete(ctx, tx, resp, func(context.Context) error {
		// No other transaction can change a row this one inserted or
		// updated and still holds: the server rolled the transaction back
		// (a deadlock), the claim with it.
		l.tx.mu.Lock()
		l.tx.rolledBack = true
		l.tx.mu.Unlock()
		return fmt.Errorf("idemmysql: complete key: the server rolled back the transaction: %w", idemstore.ErrLeaseLost)
	})
}

// Release implements [idemstore.Lease]: it rolls the claim's transaction
// back, the claim with it.
func (l *atomicLease) Release(context.Context) error {
	tx, ended := l.tx.take(true)
	if ended || tx == nil {
		return fmt.Errorf("idemmysql: release key: %w", idemstore.ErrLeaseEnded)
	}
	if err := tx.rollback(); err != nil {
		return fmt.Errorf("idemmysql: roll back: %w", err)
	}
	return nil
}
