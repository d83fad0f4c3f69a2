package idempg

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/idemkit/idem/idemstore"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// startedRow holds a key by a committed started row with the lease's token:
// a two-phase claim (see the package documentation, Round trips and
// Two-phase mode). The handler's transaction opens on its first use.
// Complete runs the fenced update in it and commits; Release rolls it back
// and deletes the row, unless another request took it over. It is the only
// lease that keeps recovery points.
type startedRow struct {
	// created is the created_at of the started row: with the token, the
	// fence of the lease's writes to its committed row, since a row made
	// anew after it was deleted starts again at token 1.
	created time.Time
	// point is the key's recovery point, once read or saved.
	point *idemstore.Recovery

	// complete's arguments, and what they point to, in the holder's
	// allocation (arg.go).
	token, status int64
	body          []byte
	completed     time.Time
	args          [8]any
}

// newStartedLease makes the lease of a started row that a claim of p
// committed, as out tells.
func (s *Store) newStartedLease(p idemstore.ClaimParams, out claimRow, takeover bool) *lease {
	info := idemstore.LeaseInfo{Token: out.token.Int64, TakenOver: takeover, CreatedAt: out.created.Time}
	return s.newLease(p, info, &startedRow{created: out.created.Time}, nil, nil)
}

// claimTwoPhaseNew is the first try of a two-phase claim, sent before any
// read of the key: in one round trip and one implicit transaction, it
// takes the key's advisory lock without waiting and, only if it got it,
// inserts a started row unless the key exists (ON CONFLICT DO NOTHING,
// which leaves no dead row behind for a retry); the insert commits at once.
// Its step asks Claim to read the key and go on from there (claimStarted)
// whenever it claimed nothing: the key exists, its lock is taken, a row
// lock held it past ClaimLockTimeout, or the pooled connection turned out
// to be dead (it died while idle).
func (s *Store) claimTwoPhaseNew(ctx context.Context, p idemstore.ClaimParams) (claimStep, error) {
	conn, err := s.acquire(ctx, "claim")
	if err != nil {
		return claimStep{}, err
	}
	defer conn.Release()
	b := &pgx.Batch{}
	var out claimRow
	qq, _ := s.claimStatement(b, p, nil)
	out.scanFrom(qq)
	err = conn.SendBatch(ctx, b).Close()
	switch {
	case err == nil && out.token.Valid:
		return answerLease(s.newStartedLease(p, out, false)), nil
	case err == nil, pgCode(err) == codeLockNotAvailable, ctx.Err() == nil && conn.Conn().IsClosed():
		return readAgain(), nil
	case isConflict(err):
		return claimStep{next: stepConflict}, nil
	}
	return claimStep{}, wrapErr(ctx, "claim", err)
}

// claimStarted is the two-phase claim of a key that exists or whose lock
// was taken when claimTwoPhaseNew tried it. It reads the key without a lock
// (readKey) and answers from it unless p may have it; then, in one round
// trip, a transaction inserts the started row (the key is gone), replaces
// it (past retention) or takes it over (its lease expired: the token grows
// by one), and commits. Its step asks Claim to start over when the key
// changed since it was read.
func (s *Store) claimStarted(ctx context.Context, p idemstore.ClaimParams) (claimStep, error) {
	step, err := s.readKey(ctx, p)
	if err != nil || step.next != stepClaim {
		return step, err
	}
	seen := step.seen
	conn, err := s.acquire(ctx, "claim")
	if err != nil {
		return claimStep{}, err
	}
	defer conn.Release()
	b := &pgx.Batch{}
	b.BeginTx(pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	var out claimRow
	qq, takeover := s.claimStatement(b, p, seen)
	out.scanFrom(qq)
	b.Queue(queryCommit)
	if _, ok, step, err := sendClaimTx(ctx, conn, b, p); !ok {
		return step, err
	}
	if !out.claimed() {
		return out.unclaimed(p), nil
	}
	return answerLease(s.newStartedLease(p, out, takeover)), nil
}

// complete runs the fenced update of the started row (queryCompleteKey) in
// the handler's transaction and commits, in one round trip (commitUpdate);
// a handler whose transaction never began gets one in that round trip. A
// lease taken over since matches no row, and its writes roll back.
func (h *startedRow) complete(ctx context.Context, l *lease, conn *pgxpool.Conn, tx pgx.Tx, resp *idemstore.Response, header any) error {
	if !l.store.typedArgs {
		return l.commitUpdate(ctx, conn, tx, queryCompleteKey,
			l.scope.ClientID, l.scope.Key, l.info.Token, resp.StatusCode, header, body(resp), l.completedAt(), h.created)
	}
	h.token, h.status, h.body, h.completed = l.info.Token, int64(resp.StatusCode), body(resp), l.completedAt()
	h.args = [8]any{(*textArg)(&l.scope.ClientID), (*textArg)(&l.scope.Key), (*intArg)(&h.token), (*intArg)(&h.status),
		header, (*bytesArg)(&h.body), (*timeArg)(&h.completed), (*timeArg)(&h.created)}
	return l.commitUpdate(ctx, conn, tx, queryCompleteKey, h.args[:]...)
}

// end rolls back the handler's transaction, if it began; the started row
// stays, committed.
func (h *startedRow) end(ctx context.Context, _ *lease, conn *pgxpool.Conn, tx pgx.Tx) error {
	return endTx(ctx, conn, tx)
}

// release rolls back the handler's transaction and deletes the started
// row. A lease that ended may still delete it, after a Complete that failed
// other than by losing the lease.
func (h *startedRow) release(ctx context.Context, l *lease, conn *pgxpool.Conn, tx pgx.Tx, ended bool) error {
	switch {
	case ended && !l.completeFailed:
		return fmt.Errorf("idempg: release key: %w", ErrLeaseEnded)
	case !ended:
		if err := h.end(ctx, l, conn, tx); err != nil {
			return err
		}
	}
	return h.deleteClaim(ctx, l)
}

// deleteClaim deletes the committed started row, unless another request
// took it over.
func (h *startedRow) deleteClaim(ctx context.Context, l *lease) error {
	conn, err := l.store.acquire(ctx, "release key")
	if err != nil {
		return err
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, queryReleaseKey, l.scope.ClientID, l.scope.Key, l.info.Token, h.created); err != nil {
		return wrapErr(ctx, "release key", err)
	}
	return nil
}

// recovery is the lease's Recovery. A key that this lease claimed new has
// no recovery point, and it answers without a round trip; a key it took
// over is read once.
func (h *startedRow) recovery(ctx context.Context, l *lease) (idemstore.Recovery, error) {
	if l.tx.ended.Load() {
		return idemstore.Recovery{}, fmt.Errorf("idempg: read recovery point: %w", ErrLeaseEnded)
	}
	if h.point == nil && !l.info.TakenOver {
		h.point = &idemstore.Recovery{Point: idemstore.RecoveryStarted}
	}
	if h.point == nil {
		r, err := h.loadRecovery(ctx, l)
		if err != nil {
			return idemstore.Recovery{}, err
		}
		h.point = &r
	}
	return h.point.Clone(), nil
}

func (h *startedRow) loadRecovery(ctx context.Context, l *lease) (idemstore.Recovery, error) {
	conn, err := l.store.acquire(ctx, "read recovery point")
	if err != nil {
		return idemstore.Recovery{}, err
	}
	defer conn.Release()
	var (
		point *string
		state []byte
	)
	err = conn.QueryRow(ctx, queryLoadRecovery, l.scope.ClientID, l.scope.Key, l.info.Token, h.created).Scan(&point, &state)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return idemstore.Recovery{}, fmt.Errorf("idempg: read recovery point (token %d): %w", l.info.Token, idemstore.ErrLeaseLost)
	case err != nil:
		return idemstore.Recovery{}, wrapErr(ctx, "read recovery point", err)
	}
	return decodeRecovery(point, state)
}

// checkpoint is the lease's Checkpoint: in one round trip it sends the
// fenced update of the recovery point and COMMIT in the lease's
// transaction (begun in the same round trip if the phase wrote nothing),
// and gives the connection back; the next TxFromContext begins a new
// transaction.
func (h *startedRow) checkpoint(ctx context.Context, l *lease, r idemstore.Recovery) error {
	var state []byte
	if len(r.State) > 0 {
		var err error
		if state, err = json.Marshal(r.State); err != nil {
			return fmt.Errorf("idempg: checkpoint: encode state: %w", err)
		}
	}
	conn, tx, ended := l.tx.detach()
	if ended {
		return fmt.Errorf("idempg: checkpoint: %w", ErrLeaseEnded)
	}
	if err := h.commitPhase(ctx, l, conn, tx, r.Point, state); err != nil {
		return err
	}
	c := r.Clone()
	h.point = &c
	return nil
}

// commitPhase commits the phase's transaction (tx on conn; nil when it
// never began) with the fenced update of the recovery point.
func (h *startedRow) commitPhase(ctx context.Context, l *lease, conn *pgxpool.Conn, tx pgx.Tx, point string, state []byte) error {
	conn, tx, _, err := l.commitRound(ctx, newBatch(), conn, tx, "checkpoint", queryCheckpoint,
		[]any{l.scope.ClientID, l.scope.Key, l.info.Token, point, state, h.created}, nil, nil)
	if conn == nil {
		return err // no connection could be had; nothing was sent
	}
	switch {
	case err == nil:
		conn.Release()
		return nil
	case commitOutcomeUnknown(err):
		closeConn(conn)
		return errOutcomeUnknown("checkpoint", err)
	}
	if isConflict(err) {
		l.tx.conflicted.Store(true)
	}
	rollback(ctx, tx)
	conn.Release()
	if pgCode(err) == codeLeaseLost {
		return fmt.Errorf("idempg: checkpoint %q (token %d): %w", point, l.info.Token, idemstore.ErrLeaseLost)
	}
	return wrapErr(ctx, "checkpoint", err)
}
