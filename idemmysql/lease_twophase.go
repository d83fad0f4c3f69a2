package idemmysql

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/internal/record"
)

var _ idemstore.RecoveryLease = (*twoPhaseLease)(nil)

// twoPhaseLease holds a key by a committed started row with the lease's
// token: the claim of ModeTwoPhase. The handler's transaction opens on its
// first TxFromContext. Complete runs the fenced update in it and commits;
// Release rolls it back and frees the row, unless another request took it
// over. It is the only lease that keeps recovery points.
type twoPhaseLease struct {
	lease
	// completeFailed is set when Complete failed other than by losing the
	// lease; Release may then still free the committed claim.
	completeFailed bool
	// recovery is the key's recovery point, once read or saved.
	recovery *idemstore.Recovery
}

// open returns tx, the lease's transaction as take gave it, or a new one
// when the handler wrote nothing.
func (l *twoPhaseLease) open(ctx context.Context, tx *leaseTx) (*leaseTx, error) {
	if tx != nil {
		return tx, nil
	}
	return l.store.beginTx(ctx)
}

// Complete implements [idemstore.Lease]: it stores resp in the handler's
// transaction, begun now if the handler wrote nothing, and commits.
func (l *twoPhaseLease) Complete(ctx context.Context, resp *idemstore.Response) (err error) {
	tx, ended := l.tx.take(true)
	if ended {
		return fmt.Errorf("idemmysql: complete key: %w", idemstore.ErrLeaseEnded)
	}
	defer func() {
		// The claim is committed: a Release after this failure frees it
		// (see idemstore.Lease).
		if err != nil && !errors.Is(err, idemstore.ErrLeaseLost) {
			l.completeFailed = true
		}
	}()
	if tx == nil {
		// The handler wrote nothing: the fenced update alone, committed
		// as it runs.
		return l.completeAlone(ctx, resp)
	}
	return l.complete(ctx, tx, resp, l.completedByAnother)
}

// completeAlone stores resp by the fenced update in autocommit mode, one
// round trip. A connection that broke once the statement was sent leaves
// its outcome unknown.
func (l *twoPhaseLease) completeAlone(ctx context.Context, resp *idemstore.Response) error {
	header, err := record.EncodeHeader(resp.Header)
	if err != nil {
		return fmt.Errorf("idemmysql: %w", err)
	}
	res, err := l.store.db.ExecContext(ctx, queryCompleteKey, resp.StatusCode, header, record.EncodeBody(resp.Body), time.Now().UnixMicro(),
		l.scope.ClientID, l.scope.Key, l.info.Token, l.createdAt)
	if err != nil {
		return fmt.Errorf("idemmysql: complete key: %w", commitErr(err))
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		return l.completedByAnother(ctx)
	}
	return nil
}

// Release implements [idemstore.Lease]: it rolls back the handler's
// transaction and frees the committed claim (deleteClaim). After a
// Complete that failed other than by losing the lease, it still frees the
// claim.
func (l *twoPhaseLease) Release(ctx context.Context) error {
	tx, ended := l.tx.take(true)
	if ended {
		if l.completeFailed {
			l.completeFailed = false
			return l.deleteClaim(ctx)
		}
		return fmt.Errorf("idemmysql: release key: %w", idemstore.ErrLeaseEnded)
	}
	if tx != nil {
		if err := tx.rollback(); err != nil {
			return fmt.Errorf("idemmysql: roll back: %w", err)
		}
	}
	return l.deleteClaim(ctx)
}

// deleteClaim frees the committed claim's row, unless another request
// took it over: a key that passed a recovery point keeps it, with no
// holder; one that did not is deleted.
func (l *twoPhaseLease) deleteClaim(ctx context.Context) error {
	for _, q := range []string{queryUnlockLease, queryDeleteLease} {
		if _, err := l.store.db.ExecContext(ctx, q, l.scope.ClientID, l.scope.Key, l.info.Token, l.createdAt); err != nil {
			return fmt.Errorf("idemmysql: release key: %w", unavailable(err))
		}
	}
	return nil
}

// Recovery implements [idemstore.RecoveryLease]. A key that this lease
// claimed new has no recovery point; a key it took over is read once.
func (l *twoPhaseLease) Recovery(ctx context.Context) (idemstore.Recovery, error) {
	if l.tx.hasEnded() {
		return idemstore.Recovery{}, fmt.Errorf("idemmysql: read recovery point: %w", idemstore.ErrLeaseEnded)
	}
	if l.recovery == nil && !l.info.TakenOver {
		l.recovery = &idemstore.Recovery{Point: idemstore.RecoveryStarted}
	}
	if l.recovery == nil {
		var (
			point sql.NullString
			state []byte
		)
		err := l.store.db.QueryRowContext(ctx, queryLoadRecovery, l.scope.ClientID, l.scope.Key, l.info.Token, l.createdAt).Scan(&point, &state)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			return idemstore.Recovery{}, fmt.Errorf("idemmysql: read recovery point (token %d): %w", l.info.Token, idemstore.ErrLeaseLost)
		case err != nil:
			return idemstore.Recovery{}, fmt.Errorf("idemmysql: read recovery point: %w", unavailable(err))
		}
		r := idemstore.Recovery{Point: idemstore.RecoveryStarted}
		if point.Valid {
			r.Point = point.String
			if len(state) > 0 {
				if err := json.Unmarshal(state, &r.State); err != nil {
					return idemstore.Recovery{}, fmt.Errorf("idemmysql: decode recovery state: %w", err)
				}
			}
		}
		l.recovery = &r
	}
	return l.recovery.Clone(), nil
}

// Checkpoint implements [idemstore.RecoveryLease]: it saves the recovery
// point in the lease's transaction (begun now if the phase wrote nothing)
// and commits; the next TxFromContext begins a new transaction.
func (l *twoPhaseLease) Checkpoint(ctx context.Context, r idemstore.Recovery) error {
	var state []byte
	if len(r.State) > 0 {
		var err error
		if state, err = json.Marshal(r.State); err != nil {
			return fmt.Errorf("idemmysql: checkpoint: encode state: %w", err)
		}
	}
	tx, ended := l.tx.take(false)
	if ended {
		return fmt.Errorf("idemmysql: checkpoint: %w", idemstore.ErrLeaseEnded)
	}
	tx, err := l.open(ctx, tx)
	if err != nil {
		return err
	}
	res, err := tx.tx.ExecContext(ctx, queryCheckpoint, r.Point, state, l.scope.ClientID, l.scope.Key, l.info.Token, l.createdAt)
	if err != nil {
		tx.rollback()
		return fmt.Errorf("idemmysql: checkpoint: %w", unavailable(err))
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		tx.rollback()
		return fmt.Errorf("idemmysql: checkpoint %q (token %d): %w", r.Point, l.info.Token, idemstore.ErrLeaseLost)
	}
	if err := tx.commit(); err != nil {
		return fmt.Errorf("idemmysql: checkpoint: commit: %w", commitErr(err))
	}
	c := r.Clone()
	l.recovery = &c
	return nil
}
