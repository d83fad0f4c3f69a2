package idempg

import (
	"context"
	"time"

	"github.com/idemkit/idem/idemstore"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// sessionLock holds a key by its session-level advisory lock, on the
// connection that the lease keeps; no row exists until Complete inserts
// the completed one (row), commits and unlocks. Release rolls back and
// unlocks. See the package documentation, Round trips (not deferred) and
// Atomic mode.
type sessionLock struct {
	atomicLease
	row pendingRow
	// replaceToken and replaceCreated are the token and created_at of a row
	// past retention that Complete replaces, if it is still there;
	// replaceToken is -1 for none.
	replaceToken   int64
	replaceCreated time.Time
}

// sessionClaims reports whether atomic claims hold the key by a
// session-level lock and write no row until Complete (claimSession). That
// needs READ COMMITTED, because at REPEATABLE READ or SERIALIZABLE the
// insert of the key row would enter the transaction's predicate locks and
// requests for unrelated keys could fail each other, and a session that
// stays on one server connection, which a pooler in transaction mode does
// not promise. Otherwise atomic claims go through claimTx.
func (s *Store) sessionClaims() bool {
	return (s.cfg.IsoLevel == "" || s.cfg.IsoLevel == pgx.ReadCommitted) && !s.cfg.TransactionPooling && !s.cfg.NoAdvisoryLocks
}

// claimSession is the atomic claim at READ COMMITTED, in one round trip
// outside any transaction (querySessionClaim, described in the package
// documentation under Atomic mode). Its lease (sessionLock) keeps the
// connection, which never goes back to the pool holding the key's lock:
// the lease unlocks the key when it ends (endSession), and closes the
// connection if that fails, which frees the lock on the server.
//
// Its step answers with a lease or a record, or, for a key past retention
// that the statement's clock and the middleware's disagree on at the
// boundary, asks Claim to replace it the way of claimTx.
func (s *Store) claimSession(ctx context.Context, p idemstore.ClaimParams) (claimStep, error) {
	lock := lockKey(p.Scope)
	var cutoff time.Time // keys created at or before it are past retention
	if p.Retention > 0 {
		cutoff = p.Now.Add(-p.Retention)
	}
	var args []any // made once the pool gave a connection
	for attempt := 0; ; attempt++ {
		conn, err := s.acquire(ctx, "claim")
		if err != nil {
			return claimStep{}, err
		}
		// querySessionClaim's snapshot is taken before it tries the lock,
		// so a holder may commit the key and unlock in between, and the key
		// look new: idem_session_lock reads it again after the lock, and
		// raises IDEM3, unlocked, if it is there.
		if args == nil {
			args = s.sessionClaimArgs(p.Scope, lock, cutoff, p.Retention > 0)
		}
		rec, locked, err := scanKey(conn.QueryRow(ctx, s.sessionClaimQuery(), args...), p.Scope)
		if pgCode(err) == codeKeyExists {
			// The lock's previous holder committed the key after the read
			// began: read it again, which answers from its row.
			conn.Release()
			return readAgain(), nil
		}
		if err != nil {
			// The lock may or may not be held: only closing the connection
			// is sure to free it.
			broken := conn.Conn().IsClosed()
			closeConn(conn)
			// A pooled connection that died while idle (the server
			// restarted, say) is worth one more try on another.
			if broken && attempt == 0 && ctx.Err() == nil {
				continue
			}
			return claimStep{}, wrapErr(ctx, "claim", err)
		}
		// An atomic claim may have a key past retention only.
		replace := rec != nil && p.MayReplace(rec)
		switch {
		case locked && (rec == nil || replace):
			h := &sessionLock{replaceToken: -1}
			h.row.init(&p)
			token := int64(1)
			if rec != nil { // Complete replaces it, if it is still there
				token = rec.Token + 1
				h.replaceToken, h.replaceCreated = rec.Token, rec.CreatedAt
			}
			return answerLease(s.newLease(p, idemstore.LeaseInfo{Token: token}, h, conn, nil)), nil
		case locked: // the clocks disagree at the retention boundary
			_ = endSession(ctx, conn, lock) // on failure it closes the connection, which unlocks
			return answerRecord(rec), nil
		}
		conn.Release()
		switch {
		case rec == nil:
			return answerRecord(inFlight(p.Scope)), nil
		case replace:
			return claimStep{next: stepClaim, seen: rec}, nil
		}
		return answerRecord(rec), nil
	}
}

// sessionClaimQuery is querySessionClaim, unless a test replaced it.
func (s *Store) sessionClaimQuery() string {
	if q := s.testHooks.sessionClaimQuery; q != "" {
		return q
	}
	return querySessionClaim
}

// complete inserts the completed row, or replaces the row past retention
// that the claim saw, commits and unlocks, in one round trip (commitRound).
// If a request that did not take the lock stored the key meanwhile, the
// insert fails on the unique key, and Complete answers from that row.
func (h *sessionLock) complete(ctx context.Context, l *lease, conn *pgxpool.Conn, tx pgx.Tx, resp *idemstore.Response, header any) error {
	lock := lockKey(l.scope)
	query, args := h.row.insertNew(l, l.info.Token, resp, header)
	if h.replaceToken >= 0 {
		query, args = queryInsertCompleted, append(args, h.replaceToken, h.replaceCreated)
	}
	unlock := func(b *pgx.Batch) { b.Queue(queryUnlock, lock) }
	conn, tx, committed, err := l.commitRound(ctx, newBatch(), conn, tx, "complete key", query, args, nil, unlock)
	if conn == nil {
		return err // no connection could be had; nothing was sent
	}
	return l.settleCommit(ctx, conn, tx, committed, err, true, func() { _ = endSession(ctx, conn, lock) })
}

// end rolls back and unlocks in one round trip (endSession).
func (h *sessionLock) end(ctx context.Context, l *lease, conn *pgxpool.Conn, _ pgx.Tx) error {
	return endSession(ctx, conn, lockKey(l.scope))
}
