package idempg

import (
	"context"
	"fmt"
	"time"

	"github.com/idemkit/idem/idemstore"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// SQLSTATE codes raised by idem_claim_guard (migrations 004 and 005).
const (
	codeKeyInFlight = "IDEM2" // another transaction holds the key's lock
	codeKeyExists   = "IDEM3" // the key exists and is not past retention
)

// deferredClaims reports whether, under cfg, a speculative atomic claim
// (idemstore.ClaimParams.Speculative) is deferred to the lease's first round
// trip: at READ COMMITTED, where each statement of the claim's round trip
// takes a snapshot of its own. The claim holds the key by a
// transaction-scoped lock, so it suits poolers in transaction mode too,
// but not Config.NoAdvisoryLocks. New keeps the answer for the store's
// configuration, read on every claim.
func deferredClaims(cfg *Config) bool {
	return (cfg.IsoLevel == "" || cfg.IsoLevel == pgx.ReadCommitted) && !cfg.NoAdvisoryLocks
}

// claimState is how far a deferred claim got.
type claimState int

const (
	// claimPending: the claim has not been answered yet.
	claimPending claimState = iota
	// claimHeld: the guard passed, and the lease's transaction holds the
	// key's lock.
	claimHeld
	// claimRefused: the key is held by another request or exists; refusal
	// says which.
	claimRefused
)

// deferredClaim holds a key by a speculative atomic claim at READ
// COMMITTED: the lease holds a connection and nothing else until its claim
// goes out with its transaction's first statement (queue, in front of the
// lease's first round trip), or with Complete or Release. Once the claim
// passed, the transaction holds the key's transaction-scoped lock, and no
// row exists yet: Complete inserts the completed row and commits, which
// unlocks; Release rolls back. How the claim holds the key is told in the
// package documentation (Round trips). The lease's leaseTx asks it, under
// its lock, whether the claim is pending or refused; its state is read and
// written in this file only.
type deferredClaim struct {
	atomicLease
	store  *Store
	scope  *idemstore.Scope // the lease's
	lock   int64
	cutoff *time.Time // keys created at or before it are past retention; nil for none
	row    pendingRow // what Complete inserts
	// cutoffAt is where cutoff points, in dc's allocation.
	cutoffAt time.Time

	state   claimState
	refusal error // wraps ErrNotClaimed and an *idemstore.ExistsError, once refused
	// stale reports that the guard found the key's row past retention,
	// which Complete replaces; false when it found no row.
	stale bool

	// The lease's round trips, one at a time (see batch), reuse one batch
	// and the guard's arguments.
	b         batch
	guardArgs [4]any
	staleDest [1]any // &stale, what readGuard scans into, set once
}

// deferredLease is a deferred claim's lease and its holder in one
// allocation.
type deferredLease struct {
	lease
	claim deferredClaim
}

// batch returns dc's batch, emptied, for its lease's next round trip: the
// claim's (leaseTx.begin, under the lease's lock, or checkFree) or
// Complete's (commitRound, once the lease has ended, so after the other).
// A batch is done with once its results are closed, which each round trip
// does before it returns.
func (dc *deferredClaim) batch() *batch {
	dc.b.reset()
	return &dc.b
}

// claimBatch returns dc's batch with the claim and BEGIN queued on it
// (queue(b, true)), for the claim's round trip in leaseTx.begin. That
// BEGIN sets the whole batch, which needs no emptying first.
func (dc *deferredClaim) claimBatch() *batch {
	dc.queue(&dc.b, true)
	return &dc.b
}

// claimDeferred returns a lease that has not claimed the key: it holds a
// pooled connection, on which the claim goes out with the lease
// transaction's first statement (leaseTx.begin), or with Complete or
// Release if the handler sends none. No round trip is made here.
func (s *Store) claimDeferred(ctx context.Context, p *idemstore.ClaimParams) (idemstore.ClaimResult, error) {
	conn, err := s.acquire(ctx, "claim")
	if err != nil {
		return idemstore.ClaimResult{}, err
	}
	dl := &deferredLease{}
	dc, l := &dl.claim, &dl.lease
	dc.store, dc.scope, dc.lock = s, &l.scope, lockKey(p.Scope)
	dc.row.init(p)
	dc.staleDest[0] = &dc.stale
	l.info.Token = 1
	s.initLease(l, p, dc)
	l.tx.open(conn, nil)
	l.tx.claim = dc
	if p.Retention > 0 {
		// Truncated as pgx sends it, so that Go and the server compare
		// created_at with the same instant. A retention of whole
		// microseconds (any but a contrived one) keeps the truncated Now's
		// remainder: the cutoff is then the lease's CreatedAt less it.
		if p.Retention%time.Microsecond == 0 {
			dc.cutoffAt = l.info.CreatedAt.Add(-p.Retention)
		} else {
			dc.cutoffAt = p.Now.Add(-p.Retention).Truncate(time.Microsecond)
		}
		dc.cutoff = &dc.cutoffAt
	}
	return idemstore.ClaimResult{Lease: l}, nil
}

// pending reports whether the claim of dc, if any, is still to be sent.
func (dc *deferredClaim) pending() bool { return dc != nil && dc.state == claimPending }

// refused returns the refusal of the claim of dc, if any, once refused;
// nil otherwise.
func (dc *deferredClaim) refused() error {
	if dc == nil || dc.state != claimRefused {
		return nil
	}
	return dc.refusal
}

// queue queues the claim's guard on b, which must be empty unless begin
// is set; with begin, which replaces what b held, BEGIN after it, which
// turns the round trip's implicit transaction, where the guard took the
// key's lock, into the explicit one that the handler's statements run in.
// b then carries a transaction for BatchResults.Tx: its begin query is the
// guard. The round trip's results are read with readGuard first (with
// begin, sendBegin sends it and reads both).
func (dc *deferredClaim) queue(b *batch, begin bool) {
	if dc.store.typedArgs {
		dc.guardArgs = [4]any{(*intArg)(&dc.lock), (*textArg)(&dc.scope.ClientID), (*textArg)(&dc.scope.Key), (*timeArg)(dc.cutoff)}
	} else {
		dc.guardArgs = [4]any{dc.lock, dc.scope.ClientID, dc.scope.Key, dc.cutoff}
	}
	args := dc.guardArgs[:]
	dc.stale = false
	if !begin {
		b.add(queryClaimGuard, args...)
		return
	}
	b.beginGuard(args)
	b.add(queryBegin)
}

// readGuard reads the result of the guard that queue queued, the first of
// br's.
//
// The round trips of this file and of leaseTx.begin and commitRound read
// their results one by one, in the order sent, and then Close br, which
// reads what is left and returns the first error again: the same as
// callbacks (QueuedQuery.Exec, QueryRow) that Close would run, without
// the two closures that each of those costs.
func (dc *deferredClaim) readGuard(br pgx.BatchResults) error {
	return br.QueryRow().Scan(dc.staleDest[:]...)
}

// sendBegin sends b, which queue(b, true) began, on conn (sendClaim), and
// reads the guard's result and BEGIN's, the first two of the round trip's.
func (dc *deferredClaim) sendBegin(ctx context.Context, conn *pgxpool.Conn, b *batch) (pgx.BatchResults, error) {
	br := dc.store.sendClaim(ctx, conn, &b.Batch)
	// readGuard's statement, written out: a call fewer on every new key.
	if err := br.QueryRow().Scan(dc.staleDest[:]...); err != nil {
		return br, err
	}
	_, err := br.Exec()
	return br, err
}

// settle records what the round trip that carried the claim, on conn,
// decided: it ended with err, and inTx reports whether conn is now inside a
// transaction, which only BEGIN, after the guard passed, opens. It returns
// the refusal when the guard refused, else nil.
func (dc *deferredClaim) settle(ctx context.Context, conn *pgxpool.Conn, err error, inTx bool) error {
	if err == nil {
		// The common case, apart so that it is inlined: the guard passed.
		if inTx {
			dc.state = claimHeld
		}
		return nil
	}
	return dc.settleFailed(ctx, conn, err, inTx)
}

// settleFailed is settle for a round trip that ended with an error.
func (dc *deferredClaim) settleFailed(ctx context.Context, conn *pgxpool.Conn, err error, inTx bool) error {
	switch code := pgCode(err); {
	case code == codeKeyInFlight || code == codeKeyExists:
		dc.state = claimRefused
		rec, rerr := dc.existing(ctx, conn, code)
		if rerr != nil {
			dc.refusal = fmt.Errorf("%w; reading the key failed: %w", ErrNotClaimed, rerr)
		} else {
			dc.refusal = fmt.Errorf("%w: %w", ErrNotClaimed, &idemstore.ExistsError{Record: rec})
		}
		return dc.refusal
	case inTx:
		dc.state = claimHeld
	}
	return nil
}

// existing is the key that refused the claim with code. A key in flight
// needs no read: it is answered 409. A key that exists is read on conn, a
// second round trip, which the claim's own round trip does not carry so
// that a new key, the common case, does not pay for a read it never uses.
// conn is idle again: the refusal rolled its round trip back.
func (dc *deferredClaim) existing(ctx context.Context, conn *pgxpool.Conn, code string) (*idemstore.Record, error) {
	if code == codeKeyInFlight {
		return inFlight(*dc.scope), nil
	}
	var (
		rec *idemstore.Record
		err error
	)
	if conn.Conn().IsClosed() {
		rec, err = dc.store.probe(ctx, *dc.scope)
	} else {
		rec, err = loadKey(ctx, conn, *dc.scope)
	}
	if err != nil || rec != nil {
		return rec, err
	}
	// Gone again (purged, or deleted by an operator): it was there a moment
	// ago, so answer as for a key in flight, which the retry settles.
	return inFlight(*dc.scope), nil
}

// checkFree settles a deferred claim that Release ends before anything was
// sent: it sends the claim alone, whose implicit transaction commits and
// frees the lock at once, to learn whether the key is held or exists (the
// refusal is returned) or is free (nil). The connection goes back to the
// pool, or is closed if its state is unknown.
func (dc *deferredClaim) checkFree(ctx context.Context, conn *pgxpool.Conn) error {
	b := dc.batch()
	dc.queue(b, false)
	br := dc.store.sendClaim(ctx, conn, &b.Batch)
	err := dc.readGuard(br)
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if refusal := dc.settle(ctx, conn, err, false); refusal != nil {
		conn.Release()
		return refusal
	}
	if err != nil {
		closeConn(conn)
		return wrapErr(ctx, "release key: read key", err)
	}
	conn.Release()
	return nil
}

// complete inserts the completed row and commits, in one round trip
// (commitRound), which carries the claim in front if it is still pending.
// A claim that was refused stores nothing and returns its refusal.
func (dc *deferredClaim) complete(ctx context.Context, l *lease, conn *pgxpool.Conn, tx pgx.Tx, resp *idemstore.Response, header any) error {
	if dc.state == claimRefused {
		conn.Release()
		return dc.refusal
	}
	var (
		query string
		args  []any
	)
	if dc.state == claimHeld && !dc.stale {
		// The claim's guard found no row for the key: a plain insert, as
		// for a session-locked lease that saw none.
		query, args = dc.row.insertFirst(l, resp, header)
	} else {
		r := &dc.row
		query, args = queryInsertCompletedDeferred, []any{l.scope.ClientID, l.scope.Key, r.method, r.path, r.hash, r.fields,
			resp.StatusCode, header, body(resp), l.claimedAt, l.completedAt(), dc.cutoff, r.traceContext()}
	}
	var claim *deferredClaim // the claim to send in front, if pending
	if dc.state == claimPending {
		claim = dc
		if conn != nil && conn.Conn().IsClosed() {
			// The connection died under the handler's first round trip:
			// nothing is held on the server. commitRound takes another.
			conn.Release()
			conn, tx = nil, nil
		}
	}
	conn, tx, committed, err := l.commitRound(ctx, dc.batch(), conn, tx, "complete key", query, args, claim, nil)
	if conn == nil {
		return err // no connection could be had; nothing was sent
	}
	if err == nil {
		// Stored and committed, the common case: what settle and
		// settleCommit do for it.
		conn.Release()
		return nil
	}
	if claim != nil {
		if refusal := dc.settleFailed(ctx, conn, err, false); refusal != nil {
			conn.Release() // the server rolled the round trip back
			return refusal
		}
	}
	return l.settleCommit(ctx, conn, tx, committed, err, true, nil)
}

// end ends the lease without storing a response: a refused claim returns
// its refusal, a held one rolls back (which frees the lock), and one never
// sent is checked (checkFree), so that the caller answers a key that
// exists from it rather than with the handler's response.
func (dc *deferredClaim) end(ctx context.Context, _ *lease, conn *pgxpool.Conn, tx pgx.Tx) error {
	switch {
	case dc.state == claimRefused:
		conn.Release()
		return dc.refusal
	case tx != nil || dc.state == claimHeld:
		return endTx(ctx, conn, tx)
	case conn.Conn().IsClosed():
		// The connection died under the handler's first round trip: nothing
		// is held on the server. Check on another.
		conn.Release()
		fresh, err := dc.store.acquire(ctx, "release key")
		if err != nil {
			return err
		}
		conn = fresh
	}
	return dc.checkFree(ctx, conn)
}

// sendClaim sends b, which carries a deferred claim, on conn. When the
// guard refuses, the whole batch fails, and pgx drops every statement of a
// failed batch from the connection's statement cache: the next use of the
// connection would pay a round trip to deallocate them and one to prepare
// them again, after every replay and every 409. So with pgx's default
// QueryExecModeCacheStatement, the batch's statements are first prepared
// by their text (conn.Prepare with the text as name), which pgx keeps
// apart from that cache and never drops: a statement already prepared on
// the connection costs nothing, a new one the round trip that the cache
// would have spent on it. Those are the claim's own statements and the
// first statement of each handler, a small set. (Whether the mode is
// pgx's default is read once, in New: the connection's Config copies the
// whole configuration on each call.)
func (s *Store) sendClaim(ctx context.Context, conn *pgxpool.Conn, b *pgx.Batch) pgx.BatchResults {
	c := conn.Conn()
	if s.prepareClaims {
		for _, qq := range b.QueuedQueries {
			if _, err := c.Prepare(ctx, qq.SQL, qq.SQL); err != nil {
				return pgx.FailedBatchResults(b, err)
			}
		}
	}
	return c.SendBatch(ctx, b)
}
