package idempg

import (
	"context"

	"github.com/idemkit/idem/idemstore"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
)

// claimTx holds a key by the claim's transaction, left open for the
// handler: it holds the key's transaction-scoped lock and its started row,
// at ctid, which only that transaction can change. Complete updates the row
// and commits; Release rolls everything back. It is the atomic claim at
// REPEATABLE READ or SERIALIZABLE, or with Config.TransactionPooling when
// the claim is not deferred (see the package documentation, Round trips).
type claimTx struct {
	atomicLease
	ctid pgtype.TID
}

// claimTx runs the atomic claim's transaction, in one round trip: it
// inserts, replaces or takes over the key that Claim read (seen, nil for
// none), and stays open for the handler, with its lock_timeout back to
// what it was. Its step asks Claim to start over when the key changed since
// seen was read.
func (s *Store) claimTx(ctx context.Context, p idemstore.ClaimParams, seen *idemstore.Record) (claimStep, error) {
	conn, err := s.acquire(ctx, "claim")
	if err != nil {
		return claimStep{}, err
	}
	b := &pgx.Batch{}
	b.BeginTx(pgx.TxOptions{IsoLevel: s.cfg.IsoLevel})
	b.Queue(querySaveLockTimeout)
	var out claimRow
	qq, takeover := s.claimStatement(b, p, seen)
	out.scanFrom(qq)
	b.Queue(queryRestoreLockTimeout)
	tx, ok, step, err := sendClaimTx(ctx, conn, b, p)
	if !ok {
		conn.Release()
		return step, err
	}
	if !out.claimed() {
		err := tx.Rollback(ctx)
		conn.Release()
		if err != nil {
			return claimStep{}, wrapErr(ctx, "claim: roll back", err)
		}
		return out.unclaimed(p), nil
	}
	info := idemstore.LeaseInfo{Token: out.token.Int64, TakenOver: takeover, CreatedAt: createdOf(out)}
	return answerLease(s.newLease(p, info, &claimTx{ctid: out.ctid}, conn, tx)), nil
}

// complete updates the lease's started row, at ctid, and commits, in one
// round trip (commitUpdate).
func (h *claimTx) complete(ctx context.Context, l *lease, conn *pgxpool.Conn, tx pgx.Tx, resp *idemstore.Response, header any) error {
	return l.commitUpdate(ctx, conn, tx, queryCompleteOwnKey,
		l.scope.ClientID, l.scope.Key, l.info.Token, resp.StatusCode, header, body(resp), l.completedAt(), h.ctid)
}

// end rolls the claim's transaction back, the claim with it.
func (h *claimTx) end(ctx context.Context, _ *lease, conn *pgxpool.Conn, tx pgx.Tx) error {
	return endTx(ctx, conn, tx)
}
