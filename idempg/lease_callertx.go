package idempg

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem/idemstore"
)

// callerTx holds a key claimed by [Store.ClaimTx]: a started row, at ctid,
// in a savepoint of the caller's transaction (see the package
// documentation, Round trips and Inside the caller's transaction).
// Complete updates the row and releases the savepoint, and the caller
// commits; Release rolls back to the savepoint.
type callerTx struct {
	atomicLease
	ctid pgtype.TID
}

// ClaimTx claims a key inside tx, a transaction of the caller's, for work
// that must commit in the caller's transaction. The claim is atomic:
// p.TwoPhase must be false.
//
// ClaimTx opens a savepoint in tx for the lease. The lease's Context carries
// that savepoint for [TxFromContext]; Complete stores the response in it and
// releases it, without committing: the caller commits tx, and until it does
// the key is in flight to everyone else. Release rolls back to the savepoint,
// undoing the claim and every write made through the lease since, and leaves
// tx open and usable. If tx rolls back, so does the key.
//
// Existing keys are read through tx, so a caller's REPEATABLE READ or
// SERIALIZABLE snapshot may miss a key committed after it was taken; the
// claim then fails with the serialization error and the caller must run its
// transaction again.
func (s *Store) ClaimTx(ctx context.Context, tx pgx.Tx, p idemstore.ClaimParams) (idemstore.ClaimResult, error) {
	if err := ctx.Err(); err != nil {
		return idemstore.ClaimResult{}, fmt.Errorf("idempg: claim: %w", err)
	}
	if tx == nil {
		return idemstore.ClaimResult{}, errors.New("idempg: ClaimTx needs a transaction")
	}
	if p.TwoPhase {
		return idemstore.ClaimResult{}, errors.New("idempg: ClaimTx claims atomically; got a two-phase claim")
	}
	for range claimAttempts {
		step, err := s.claimInCallerTx(ctx, tx, p)
		if err != nil || step.next == stepAnswer {
			return step.result, err
		}
	}
	return idemstore.ClaimResult{Record: inFlight(p.Scope)}, nil
}

// claimInCallerTx is one attempt of ClaimTx, in a savepoint of tx.
func (s *Store) claimInCallerTx(ctx context.Context, tx pgx.Tx, p idemstore.ClaimParams) (claimStep, error) {
	sp, err := tx.Begin(ctx)
	if err != nil {
		return claimStep{}, wrapErr(ctx, "claim: savepoint", err)
	}
	keep := false
	defer func() {
		if !keep {
			_ = sp.Rollback(context.WithoutCancel(ctx))
		}
	}()
	seen, err := loadKey(ctx, sp, p.Scope)
	if err != nil {
		return claimStep{}, wrapErr(ctx, "claim: read key", err)
	}
	if seen != nil && !p.MayReplace(seen) {
		return answerRecord(seen), nil
	}
	b := &pgx.Batch{}
	b.Queue(querySaveLockTimeout)
	var out claimRow
	qq, _ := s.claimStatement(b, p, seen)
	out.scanFrom(qq)
	b.Queue(queryRestoreLockTimeout)
	if err := sp.SendBatch(ctx, b).Close(); err != nil {
		if pgCode(err) == codeLockNotAvailable && ctx.Err() == nil {
			return answerRecord(inFlight(p.Scope)), nil
		}
		return claimStep{}, wrapErr(ctx, "claim", err)
	}
	if !out.claimed() {
		return out.unclaimed(p), nil
	}
	keep = true
	info := idemstore.LeaseInfo{Token: out.token.Int64, CreatedAt: createdOf(out)}
	return answerLease(s.newLease(p, info, &callerTx{ctid: out.ctid}, nil, sp)), nil
}

// complete sends the fenced update of the started row, at ctid, in the
// lease's savepoint (sp) and releases the savepoint; the caller commits.
func (h *callerTx) complete(ctx context.Context, l *lease, _ *pgxpool.Conn, sp pgx.Tx, resp *idemstore.Response, header any) error {
	_, err := sp.Exec(ctx, queryCompleteOwnKey,
		l.scope.ClientID, l.scope.Key, l.info.Token, resp.StatusCode, header, body(resp), l.completedAt(), h.ctid)
	if err == nil {
		err = sp.Commit(ctx)
	}
	if err == nil {
		return nil
	}
	if isConflict(err) {
		l.tx.conflicted.Store(true)
	}
	_ = sp.Rollback(context.WithoutCancel(ctx))
	return l.completeError(ctx, err, false)
}

// end rolls back to the savepoint: the claim and the handler's writes go,
// and the caller's transaction stays open.
func (h *callerTx) end(ctx context.Context, _ *lease, _ *pgxpool.Conn, sp pgx.Tx) error {
	if err := sp.Rollback(ctx); err != nil {
		return wrapErr(ctx, "release key: roll back to savepoint", err)
	}
	return nil
}
