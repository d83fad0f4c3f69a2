package idemsqlite

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
var ErrNoTx = errors.New("idemsqlite: no idempotency transaction in context")

type txKey struct{}

// TxFromContext returns the transaction that the idem middleware opened for
// the request whose context this is. Business writes made in it commit
// together with the stored response, or roll back with the key.
//
// In ModeAtomic the transaction was opened with the claim. In ModeTwoPhase
// it is opened on the first call, so a handler can call other systems
// before it takes SQLite's single write lock. Do not commit or roll it back.
// Once the lease is completed or released, it returns an error wrapping
// idemstore.ErrLeaseEnded.
func TxFromContext(ctx context.Context) (*sql.Tx, error) {
	lt, ok := ctx.Value(txKey{}).(*leaseTx)
	if !ok {
		return nil, ErrNoTx
	}
	return lt.get(ctx)
}

// leaseTx is a lease's transaction, opened at once or on first use.
type leaseTx struct {
	store *Store
	mu    sync.Mutex
	tx    *writeTx
	ended bool
}

func (lt *leaseTx) get(ctx context.Context) (*sql.Tx, error) {
	lt.mu.Lock()
	defer lt.mu.Unlock()
	if lt.ended {
		return nil, fmt.Errorf("idemsqlite: %w", idemstore.ErrLeaseEnded)
	}
	if lt.tx == nil {
		tx, err := lt.store.begin(ctx)
		if err != nil {
			return nil, err
		}
		lt.tx = tx
	}
	return lt.tx.Tx, nil
}

// end takes the transaction out, so that nothing uses it after the lease
// ends. ended is true when the lease had already ended.
func (lt *leaseTx) end() (tx *writeTx, ended bool) {
	lt.mu.Lock()
	defer lt.mu.Unlock()
	if lt.ended {
		return nil, true
	}
	lt.ended = true
	tx = lt.tx
	lt.tx = nil
	return tx, false
}

// detach takes the transaction out and leaves the lease holding none, so
// that the next use begins a new one.
func (lt *leaseTx) detach() (tx *writeTx, ended bool) {
	lt.mu.Lock()
	defer lt.mu.Unlock()
	if lt.ended {
		return nil, true
	}
	tx, lt.tx = lt.tx, nil
	return tx, false
}

func (lt *leaseTx) hasEnded() bool {
	lt.mu.Lock()
	defer lt.mu.Unlock()
	return lt.ended
}

// lease is the ownership of a key's row, which the two kinds of lease
// embed, each in a file of its own with its claim, Complete and Release:
//
//   - atomicLease (lease_atomic.go): the claim's transaction stays open
//     from the claim to the stored response and holds the claimed row;
//     rolling it back frees the key.
//   - twoPhaseLease (lease_twophase.go): the claim is committed at once;
//     the handler's writes and the response run in later transactions,
//     fenced by the lease's token. It is the only lease that keeps
//     recovery points.
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

// complete stores resp in the lease's row, in tx, by the fenced update that
// changes the row only while the lease's token holds it, and commits; tx
// is rolled back when that fails.
func (l *lease) complete(ctx context.Context, tx *writeTx, resp *idemstore.Response) error {
	committed := false
	defer func() {
		if !committed {
			tx.rollback()
		}
	}()
	header, err := record.EncodeHeader(resp.Header)
	if err != nil {
		return fmt.Errorf("idemsqlite: %w", err)
	}
	res, err := tx.ExecContext(ctx, queryCompleteKey, resp.StatusCode, header, record.EncodeBody(resp.Body), time.Now().UnixMicro(),
		l.scope.ClientID, l.scope.Key, l.info.Token, l.createdAt)
	if err != nil {
		return fmt.Errorf("idemsqlite: complete key: %w", unavailable(err))
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		return fmt.Errorf("idemsqlite: complete key (token %d): %w", l.info.Token, idemstore.ErrLeaseLost)
	}
	committed = true
	if err := tx.commit(); err != nil {
		return fmt.Errorf("idemsqlite: commit: %w", unavailable(err))
	}
	return nil
}

// rollBack rolls back tx, the lease's transaction as Release took it out;
// nil means none was begun.
func rollBack(tx *writeTx) error {
	if tx == nil {
		return nil
	}
	if err := tx.rollback(); err != nil && !errors.Is(err, sql.ErrTxDone) {
		return fmt.Errorf("idemsqlite: roll back: %w", err)
	}
	return nil
}
