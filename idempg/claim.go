package idempg

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/idemkit/idem"
)

// claimAttempts bounds how often a claim starts over because the key changed
// between its read and its write. Each attempt is a few round trips and never
// waits for another request.
const claimAttempts = 3

// claimStep is how one step of a claim ended.
type claimStep struct {
	next   nextStep
	result idem.ClaimResult // the answer, when next is stepAnswer
	seen   *idem.Record     // the key past retention, when next is stepReplace
}

// nextStep is what Claim does after a step.
type nextStep int

const (
	// stepAnswer: the claim is decided; return the step's result.
	stepAnswer nextStep = iota
	// stepReadAgain: the step claimed nothing, or the key changed under
	// it; read the key and try again.
	stepReadAgain
	// stepReplace: the key is past retention; replace it (seen) in the
	// claim's transaction.
	stepReplace
)

func answer(res idem.ClaimResult) claimStep { return claimStep{next: stepAnswer, result: res} }

func answerLease(l *lease) claimStep { return answer(idem.ClaimResult{Lease: l}) }

func answerRecord(rec *idem.Record) claimStep { return answer(idem.ClaimResult{Record: rec}) }

func readAgain() claimStep { return claimStep{next: stepReadAgain} }

// Claim implements [idem.Store]. How each mode and isolation level claims
// a key, and in how many round trips, is told in the package documentation
// (Replays, Atomic mode, Two-phase mode).
//
// A key in flight whose row is not visible is answered with a Record whose
// Status is idem.StatusInFlight and whose request hash is unknown.
func (s *Store) Claim(ctx context.Context, p idem.ClaimParams) (idem.ClaimResult, error) {
	if err := ctx.Err(); err != nil {
		return idem.ClaimResult{}, fmt.Errorf("idempg: claim: %w", err)
	}
	if p.Mode != idem.ModeAtomic && p.Mode != idem.ModeTwoPhase {
		return idem.ClaimResult{}, fmt.Errorf("idempg: claim: unknown mode %d", p.Mode)
	}
	if p.Speculative && p.Mode == idem.ModeAtomic && s.deferredClaims() {
		return s.claimDeferred(ctx, p)
	}
	if p.Mode == idem.ModeTwoPhase {
		// Most keys are new: try to insert first, and read the key only if
		// that claimed nothing.
		step, err := s.claimTwoPhaseNew(ctx, p)
		if err != nil || step.next == stepAnswer {
			return step.result, err
		}
	}
	for range claimAttempts {
		step, err := s.claimOnce(ctx, p)
		if err != nil || step.next == stepAnswer {
			return step.result, err
		}
	}
	// The key changed under every attempt: other requests are working on it.
	return idem.ClaimResult{Record: inFlight(p.Scope)}, nil
}

// claimOnce reads the key and claims it if it may: by claimSession for an
// atomic claim that holds the key by a session-level lock, otherwise by a
// read without a lock (probe) and then claimTx.
func (s *Store) claimOnce(ctx context.Context, p idem.ClaimParams) (claimStep, error) {
	var seen *idem.Record
	if p.Mode == idem.ModeAtomic && s.sessionClaims() {
		step, err := s.claimSession(ctx, p)
		if err != nil || step.next != stepReplace {
			return step, err
		}
		seen = step.seen
	} else {
		rec, err := s.probe(ctx, p.Scope)
		if err != nil {
			return claimStep{}, err
		}
		if rec != nil && !p.MayReplace(rec) {
			return answerRecord(rec), nil
		}
		seen = rec
	}
	return s.claimTx(ctx, p, seen)
}

// sessionClaims reports whether atomic claims hold the key by a
// session-level lock and write no row until Complete (claimSession). That
// needs READ COMMITTED, because at REPEATABLE READ or SERIALIZABLE the
// insert of the key row would enter the transaction's predicate locks and
// requests for unrelated keys could fail each other, and a session that
// stays on one server connection, which a pooler in transaction mode does
// not promise. Otherwise atomic claims go through claimTx.
func (s *Store) sessionClaims() bool {
	return (s.cfg.IsoLevel == "" || s.cfg.IsoLevel == pgx.ReadCommitted) && !s.cfg.TransactionPooling
}

// claimSession is the atomic claim at READ COMMITTED, in one round trip
// outside any transaction (querySessionClaim, described in the package
// documentation under Atomic mode). Its lease (bySessionLock) keeps the
// connection, which never goes back to the pool holding the key's lock:
// the lease unlocks the key when it ends (endSession), and closes the
// connection if that fails, which frees the lock on the server.
//
// Its step answers with a lease or a record, or, for a key past retention
// that the statement's clock and the middleware's disagree on at the
// boundary, asks Claim to replace it the way of claimTx.
func (s *Store) claimSession(ctx context.Context, p idem.ClaimParams) (claimStep, error) {
	lock := lockKey(p.Scope)
	var cutoff *time.Time // keys created at or before it are past retention
	if p.Retention > 0 {
		c := p.Now.Add(-p.Retention)
		cutoff = &c
	}
	for attempt := 0; ; attempt++ {
		conn, err := s.acquire(ctx, "claim")
		if err != nil {
			return claimStep{}, err
		}
		// querySessionClaim's snapshot is taken before it tries the lock,
		// so a holder may commit the key and unlock in between, and the
		// key look new. querySessionRecheck, in the same round trip, reads
		// again with a snapshot taken after the lock.
		var (
			rec             *idem.Record
			locked, current bool
		)
		b := &pgx.Batch{}
		b.Queue(s.sessionClaimQuery(), p.Scope.ClientID, p.Scope.Key, lock, cutoff).QueryRow(func(row pgx.Row) (err error) {
			rec, locked, err = scanKey(row, p.Scope)
			return err
		})
		b.Queue(querySessionRecheck, p.Scope.ClientID, p.Scope.Key, cutoff).QueryRow(func(row pgx.Row) error {
			return row.Scan(&current)
		})
		if err := conn.SendBatch(ctx, b).Close(); err != nil {
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
		expired := rec != nil && idem.Expired(rec.CreatedAt, p.Now, p.Retention)
		switch {
		case locked && current && (rec == nil || expired):
			// A key was committed after the read began, by the lock's
			// previous holder: unlock, and read the key again, which
			// answers from its row.
			_ = endSession(ctx, conn, lock) // on failure it closes the connection, which unlocks
			return readAgain(), nil
		case locked && (rec == nil || expired):
			row := &pendingRow{method: p.Method, path: p.Path, hash: p.RequestHash, fields: p.RequestFields, replaceToken: -1}
			token := int64(1)
			if rec != nil { // Complete replaces it, if it is still there
				token = rec.Token + 1
				row.replaceToken, row.replaceCreated = rec.Token, rec.CreatedAt
			}
			return answerLease(s.newLease(p, held{
				kind: bySessionLock, info: idem.LeaseInfo{Token: token}, conn: conn, pending: row,
			})), nil
		case locked: // the clocks disagree at the retention boundary
			_ = endSession(ctx, conn, lock) // on failure it closes the connection, which unlocks
			return answerRecord(rec), nil
		}
		conn.Release()
		switch {
		case rec == nil:
			return answerRecord(inFlight(p.Scope)), nil
		case expired:
			return claimStep{next: stepReplace, seen: rec}, nil
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

// inFlight is the answer for a key whose holder's transaction is open: its
// request is not visible, so only the status is known.
func inFlight(scope idem.Scope) *idem.Record {
	return &idem.Record{Scope: scope, Status: idem.StatusInFlight}
}

// probe is the fast path: it reads a key on a pooled connection, nil when
// there is none, with no lock: a completed row never changes until it
// expires, and whether a key is in flight is decided by the claim, which
// takes the lock. A read is safe to repeat, so one that failed because the
// pooled connection had died while idle (the server restarted, say) is
// tried once more on another.
func (s *Store) probe(ctx context.Context, scope idem.Scope) (*idem.Record, error) {
	for attempt := 0; ; attempt++ {
		conn, err := s.acquire(ctx, "read key")
		if err != nil {
			return nil, err
		}
		rec, err := loadKey(ctx, conn, scope)
		broken := conn.Conn().IsClosed()
		conn.Release()
		if err == nil {
			return rec, nil
		}
		if !broken || attempt > 0 || ctx.Err() != nil {
			return nil, wrapErr(ctx, "read key", err)
		}
	}
}

// claimStatement queues on b the statement that claims the key: insert it,
// replace it (seen is past retention) or take it over (seen's lease
// expired), with lockTimeout as the transaction's lock_timeout from then
// on. It returns whether the claim is a takeover.
func claimStatement(b *pgx.Batch, p idem.ClaimParams, seen *idem.Record, lockTimeout string) (qq *pgx.QueuedQuery, takeover bool) {
	lock := lockKey(p.Scope)
	fields := p.RequestFields
	if len(fields) == 0 {
		fields = nil
	}
	switch {
	case seen == nil:
		return b.Queue(queryClaimInsert, lock, p.Scope.ClientID, p.Scope.Key, p.Method, p.Path,
			p.RequestHash, fields, p.Now, lockTimeout, leaseExpires(p)), false
	case idem.Expired(seen.CreatedAt, p.Now, p.Retention):
		return b.Queue(queryClaimReplace, lock, p.Scope.ClientID, p.Scope.Key, p.Method, p.Path,
			p.RequestHash, fields, p.Now, seen.Token, seen.CreatedAt, lockTimeout, leaseExpires(p)), false
	default:
		return b.Queue(queryClaimTakeOver, lock, p.Scope.ClientID, p.Scope.Key, p.Now, seen.Token, lockTimeout, leaseExpires(p)), true
	}
}

// leaseExpires is the lease expiry that p's claim records: NULL when it
// has none.
func leaseExpires(p idem.ClaimParams) *time.Time {
	if t := p.LeaseExpires(); !t.IsZero() {
		return &t
	}
	return nil
}

// claimRow is what the claim statement answered.
type claimRow struct {
	acquired bool       // the advisory lock was free
	token    *int64     // the new lease's token; nil when no row changed
	ctid     pgtype.TID // where the claimed row version is
	created  *time.Time // the claimed row's created_at; nil when no row changed
}

// createdOf returns the claimed row's created_at, zero when the claim
// statement answered none.
func createdOf(out claimRow) time.Time {
	if out.created == nil {
		return time.Time{}
	}
	return *out.created
}

// scanFrom has the claim statement's row, queued as qq, scanned into out.
func (out *claimRow) scanFrom(qq *pgx.QueuedQuery) {
	qq.QueryRow(func(row pgx.Row) error { return row.Scan(&out.acquired, &out.token, &out.ctid, &out.created) })
}

// claimTwoPhaseNew is the first try of a two-phase claim, sent before any
// read of the key: in one round trip and one implicit transaction, it
// takes the key's advisory lock without waiting and, only if it got it,
// inserts a started row unless the key exists (ON CONFLICT DO NOTHING,
// which leaves no dead row behind for a retry); the insert commits at once.
// Its step asks Claim to read the key and go on from there whenever it
// claimed nothing: the key exists, its lock is taken, a row lock held it
// past ClaimLockTimeout, or the pooled connection turned out to be dead (it
// died while idle).
func (s *Store) claimTwoPhaseNew(ctx context.Context, p idem.ClaimParams) (claimStep, error) {
	conn, err := s.acquire(ctx, "claim")
	if err != nil {
		return claimStep{}, err
	}
	defer conn.Release()
	b := &pgx.Batch{}
	var out claimRow
	qq, _ := claimStatement(b, p, nil, s.claimLockTimeout)
	out.scanFrom(qq)
	err = conn.SendBatch(ctx, b).Close()
	switch {
	case err == nil && out.token != nil:
		return answerLease(s.newLease(p, held{kind: byStartedRow, info: idem.LeaseInfo{Token: *out.token}, created: *out.created})), nil
	case err == nil, pgCode(err) == codeLockNotAvailable, ctx.Err() == nil && conn.Conn().IsClosed():
		return readAgain(), nil
	}
	return claimStep{}, wrapErr(ctx, "claim", err)
}

// claimTx runs the claim's transaction, in one round trip: it inserts,
// replaces or takes over the key that Claim read (seen, nil for none). Its
// step asks Claim to start over when the key changed since seen was read.
func (s *Store) claimTx(ctx context.Context, p idem.ClaimParams, seen *idem.Record) (claimStep, error) {
	conn, err := s.acquire(ctx, "claim")
	if err != nil {
		return claimStep{}, err
	}
	atomicMode := p.Mode == idem.ModeAtomic
	keep := false
	defer func() {
		if !keep {
			conn.Release()
		}
	}()

	// Two-phase claims commit in the same round trip; an atomic claim's
	// transaction stays open for the handler, with its lock_timeout back
	// to what it was.
	b := &pgx.Batch{}
	if atomicMode {
		b.BeginTx(pgx.TxOptions{IsoLevel: s.cfg.IsoLevel})
		b.Queue(querySaveLockTimeout)
	} else {
		b.BeginTx(pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	}
	var out claimRow
	qq, takeover := claimStatement(b, p, seen, s.claimLockTimeout)
	out.scanFrom(qq)
	if atomicMode {
		b.Queue(queryRestoreLockTimeout)
	} else {
		b.Queue(queryCommit)
	}
	br := conn.SendBatch(ctx, b)
	tx := br.Tx()
	if err := br.Close(); err != nil {
		rollback(ctx, tx)
		switch {
		case ctx.Err() != nil:
			return claimStep{}, wrapErr(ctx, "claim", err)
		case pgCode(err) == codeLockNotAvailable:
			// A statement that does not take the advisory lock holds the row
			// for a moment, such as a response being stored right now.
			return answerRecord(inFlight(p.Scope)), nil
		case isConflict(err):
			// A serializable claim whose snapshot predates the row.
			return readAgain(), nil
		}
		return claimStep{}, wrapErr(ctx, "claim", err)
	}
	if !out.acquired || out.token == nil {
		if atomicMode {
			if err := tx.Rollback(ctx); err != nil {
				return claimStep{}, wrapErr(ctx, "claim: roll back", err)
			}
		}
		if !out.acquired {
			return answerRecord(inFlight(p.Scope)), nil
		}
		return readAgain(), nil // the row changed since seen
	}

	info := idem.LeaseInfo{Token: *out.token, TakenOver: takeover, CreatedAt: createdOf(out)}
	if !atomicMode {
		return answerLease(s.newLease(p, held{kind: byStartedRow, info: info, created: *out.created})), nil
	}
	keep = true
	return answerLease(s.newLease(p, held{kind: byClaimTx, info: info, conn: conn, tx: tx, ctid: out.ctid})), nil
}

// ClaimTx claims a key inside tx, a transaction of the caller's, for work
// that must commit in the caller's transaction. The claim is atomic:
// p.Mode must be idem.ModeAtomic.
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
func (s *Store) ClaimTx(ctx context.Context, tx pgx.Tx, p idem.ClaimParams) (idem.ClaimResult, error) {
	if err := ctx.Err(); err != nil {
		return idem.ClaimResult{}, fmt.Errorf("idempg: claim: %w", err)
	}
	if tx == nil {
		return idem.ClaimResult{}, errors.New("idempg: ClaimTx needs a transaction")
	}
	if p.Mode != idem.ModeAtomic {
		return idem.ClaimResult{}, fmt.Errorf("idempg: ClaimTx claims atomically; got mode %s", p.Mode)
	}
	for range claimAttempts {
		step, err := s.claimInCallerTx(ctx, tx, p)
		if err != nil || step.next == stepAnswer {
			return step.result, err
		}
	}
	return idem.ClaimResult{Record: inFlight(p.Scope)}, nil
}

// claimInCallerTx is one attempt of ClaimTx, in a savepoint of tx.
func (s *Store) claimInCallerTx(ctx context.Context, tx pgx.Tx, p idem.ClaimParams) (claimStep, error) {
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
	qq, _ := claimStatement(b, p, seen, s.claimLockTimeout)
	out.scanFrom(qq)
	b.Queue(queryRestoreLockTimeout)
	if err := sp.SendBatch(ctx, b).Close(); err != nil {
		if pgCode(err) == codeLockNotAvailable && ctx.Err() == nil {
			return answerRecord(inFlight(p.Scope)), nil
		}
		return claimStep{}, wrapErr(ctx, "claim", err)
	}
	switch {
	case !out.acquired:
		return answerRecord(inFlight(p.Scope)), nil
	case out.token == nil:
		return readAgain(), nil
	}
	keep = true
	return answerLease(s.newLease(p, held{
		kind: byCallerTx, info: idem.LeaseInfo{Token: *out.token, CreatedAt: createdOf(out)}, tx: sp, ctid: out.ctid,
	})), nil
}
