package idempg

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/record"
)

// claimAttempts bounds how often a claim starts over because the key changed
// between its read and its write. Each attempt is a few round trips and never
// waits for another request.
const claimAttempts = 3

// cleanupTimeout bounds a rollback made after a failure, whose context may
// already be done.
const cleanupTimeout = 5 * time.Second

// Claim implements [idem.Store].
//
// In idem.ModeAtomic at READ COMMITTED (the default) a claim is one round
// trip outside any transaction: one statement reads the key by its primary
// key and, only if there is none (or it is past retention), tries the key's
// session-level advisory lock without waiting. A completed key is a replay;
// a key whose lock another request holds is in flight; otherwise the lock
// is the claim. The claim writes no row: the handler's transaction begins
// with its first statement, and Complete inserts the completed row, commits
// and unlocks in one round trip (see claimAtomic).
//
// In idem.ModeTwoPhase it first sends, in one round trip, the transaction
// that takes the key's advisory lock without waiting and inserts a started
// row unless the key exists: a new key is claimed at once. Only when that
// claims nothing does it read the key on a pooled connection, outside any
// transaction and without any lock, and answer a completed key, or a
// started one that cannot be taken over, from that read; otherwise it
// sends, in one more round trip, the transaction that takes the key's lock
// and replaces or takes over the row. Atomic claims at REPEATABLE READ or
// SERIALIZABLE, or with Config.TransactionPooling, go the same way, after
// the read, with the claim's transaction left open for the handler.
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
	if p.Mode == idem.ModeTwoPhase {
		// Most keys are new: try to insert first, and read the key only if
		// that claimed nothing.
		res, again, err := s.claimTwoPhaseNew(ctx, p)
		if err != nil || !again {
			return res, err
		}
	}
	for range claimAttempts {
		var rec *idem.Record
		if p.Mode == idem.ModeAtomic && s.sessionClaims() {
			res, seen, err := s.claimAtomic(ctx, p)
			if err != nil || res.Lease != nil || res.Record != nil {
				return res, err
			}
			rec = seen // past retention; replaced in a transaction, below
		} else {
			var err error
			if rec, err = s.probe(ctx, p.Scope); err != nil {
				return idem.ClaimResult{}, err
			}
		}
		if rec != nil && !replaceable(rec, p) {
			return idem.ClaimResult{Record: rec}, nil
		}
		res, again, err := s.claimTx(ctx, p, rec)
		if err != nil || !again {
			return res, err
		}
	}
	// The key changed under every attempt: other requests are working on it.
	return idem.ClaimResult{Record: inFlight(p.Scope)}, nil
}

// sessionClaims reports whether atomic claims hold the key by a
// session-level lock and write no row until Complete (claimAtomic). That
// needs READ COMMITTED, because at REPEATABLE READ or SERIALIZABLE the
// insert of the key row would enter the transaction's predicate locks and
// requests for unrelated keys could fail each other, and a session that
// stays on one server connection, which a pooler in transaction mode does
// not promise. Otherwise atomic claims go through claimTx.
func (s *Store) sessionClaims() bool {
	return (s.cfg.IsoLevel == "" || s.cfg.IsoLevel == pgx.ReadCommitted) && !s.cfg.TransactionPooling
}

// claimAtomic is the atomic claim at READ COMMITTED, in one round trip and
// one statement outside any transaction (querySessionClaim): the read of
// the key, and the key's session-level advisory lock tried without waiting
// when there is no key or it is past retention. The lock is the claim: no
// other claim can take it while the handler runs, so the claim writes no
// row. The connection stays with the lease; the handler's transaction
// begins with its first statement (see leaseTx.begin), and Complete
// inserts the completed row, commits and unlocks in one round trip. The
// unique key stays the final fence: if a completed row appears anyway,
// Complete fails and everything rolls back.
//
// A connection that holds a key's lock never goes back to the pool: the
// lease unlocks the key when it ends (endSession), and closes the
// connection if that fails, which frees the lock on the server. A process
// that dies frees its locks the same way.
//
// It returns a lease, a record to answer with, or, for a key past
// retention that the statement's clock and the middleware's disagree on at
// the boundary, seen for Claim to replace the old way.
func (s *Store) claimAtomic(ctx context.Context, p idem.ClaimParams) (res idem.ClaimResult, seen *idem.Record, err error) {
	lock := lockKey(p.Scope)
	var cutoff *time.Time // keys created at or before it are past retention
	if p.Retention > 0 {
		c := p.Now.Add(-p.Retention)
		cutoff = &c
	}
	for attempt := 0; ; attempt++ {
		conn, err := s.acquire(ctx, "claim")
		if err != nil {
			return idem.ClaimResult{}, nil, err
		}
		rec, locked, err := scanKey(conn.QueryRow(ctx, querySessionClaim, p.Scope.ClientID, p.Scope.Key, lock, cutoff), p.Scope)
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
			return idem.ClaimResult{}, nil, wrapErr(ctx, "claim", err)
		}
		expired := rec != nil && idem.Expired(rec.CreatedAt, p.Now, p.Retention)
		switch {
		case locked && (rec == nil || expired):
			row := &pendingRow{method: p.Method, path: p.Path, hash: p.RequestHash, fields: p.RequestFields, replaceToken: -1}
			token := int64(1)
			if rec != nil { // Complete replaces it, if it is still there
				token = rec.Token + 1
				row.replaceToken, row.replaceCreated = rec.Token, rec.CreatedAt
			}
			l := &lease{
				store: s, scope: p.Scope, mode: idem.ModeAtomic,
				info:      idem.LeaseInfo{Token: token},
				claimedAt: p.Now, start: time.Now(),
				tx:      &leaseTx{store: s},
				pending: row,
				lock:    lock,
			}
			l.tx.open(conn, nil)
			return idem.ClaimResult{Lease: l}, nil, nil
		case locked: // the clocks disagree at the retention boundary
			_ = endSession(ctx, conn, lock) // on failure it closes the connection, which unlocks
			return idem.ClaimResult{Record: rec}, nil, nil
		}
		conn.Release()
		switch {
		case rec == nil:
			return idem.ClaimResult{Record: inFlight(p.Scope)}, nil, nil
		case expired:
			return idem.ClaimResult{}, rec, nil
		}
		return idem.ClaimResult{Record: rec}, nil, nil
	}
}

// endSession ends an atomic lease that holds its key by the session-level
// lock: it rolls back the transaction, if one is open, and unlocks the key
// in one round trip, and returns the connection to the pool. A connection
// on which that fails, or whose state is unknown, is closed instead: the
// server then ends the transaction and frees the lock. A connection that
// already died needs nothing.
func endSession(ctx context.Context, conn *pgxpool.Conn, lock int64) error {
	pg := conn.Conn().PgConn()
	if pg.IsClosed() {
		conn.Release()
		return nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	b := &pgx.Batch{}
	if pg.TxStatus() != 'I' {
		b.Queue(queryRollback)
	}
	b.Queue(queryUnlock, lock)
	if err := conn.SendBatch(ctx, b).Close(); err != nil || pg.TxStatus() != 'I' {
		closeConn(conn)
		if err == nil {
			err = errors.New("the connection is still in a transaction")
		}
		return wrapErr(ctx, "release key: unlock", err)
	}
	conn.Release()
	return nil
}

// closeConn closes a pooled connection and hands it back, so that the pool
// drops it: the way to be sure that the server ends its session, with the
// session's transaction and advisory locks.
func closeConn(conn *pgxpool.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	_ = conn.Conn().Close(ctx)
	conn.Release()
}

// pendingRow is the key row that an atomic lease inserts on Complete.
type pendingRow struct {
	method, path   string
	hash, fields   []byte
	replaceToken   int64 // the token of a row past retention to replace; -1 for none
	replaceCreated time.Time
}

// inFlight is the answer for a key whose holder's transaction is open: its
// request is not visible, so only the status is known.
func inFlight(scope idem.Scope) *idem.Record {
	return &idem.Record{Scope: scope, Status: idem.StatusInFlight}
}

// replaceable reports whether a claim may replace rec (past retention) or
// take it over (a two-phase lease that expired, for the same request).
func replaceable(rec *idem.Record, p idem.ClaimParams) bool {
	return idem.Expired(rec.CreatedAt, p.Now, p.Retention) || p.CanTakeOver(rec)
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

type queryRower interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// loadKey reads a key through q, without its lock; rec is nil when there
// is none.
func loadKey(ctx context.Context, q queryRower, scope idem.Scope) (*idem.Record, error) {
	rec, _, err := scanKey(q.QueryRow(ctx, queryLoadKey, scope.ClientID, scope.Key), scope)
	return rec, err
}

// scanKey scans a row of querySessionClaim or queryLoadKey; rec is nil
// when there is no key. locked is the first column: whether
// querySessionClaim took the key's lock (true for queryLoadKey).
func scanKey(row pgx.Row, scope idem.Scope) (rec *idem.Record, locked bool, err error) {
	var (
		method, path, status *string
		hash, fields         []byte
		token                *int64
		respStatus           *int32
		respHeader, respBody []byte
		createdAt, lockedAt  *time.Time
	)
	err = row.Scan(
		&locked, &method, &path, &hash, &fields, &status, &token,
		&respStatus, &respHeader, &respBody, &createdAt, &lockedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, true, nil
	}
	if err != nil {
		return nil, false, err
	}
	if method == nil { // the probe's outer join found no key
		return nil, locked, nil
	}
	rec = &idem.Record{
		Scope: scope, Method: *method, Path: *path,
		RequestHash: hash, RequestFields: fields,
		Status: idem.Status(*status), Token: *token, CreatedAt: createdAt.UTC(),
	}
	if lockedAt != nil {
		rec.LockedAt = lockedAt.UTC()
	}
	if rec.Status == idem.StatusCompleted {
		code := 0
		if respStatus != nil {
			code = int(*respStatus)
		}
		if rec.Response, err = record.DecodeResponse(code, respHeader, respBody); err != nil {
			return nil, false, err
		}
	}
	return rec, locked, nil
}

// claimStatement queues on b the statement that claims the key: insert it,
// replace it (seen is past retention) or take it over (seen's lease
// expired). It returns whether the claim is a takeover.
func claimStatement(b *pgx.Batch, p idem.ClaimParams, seen *idem.Record) (qq *pgx.QueuedQuery, takeover bool) {
	lock := lockKey(p.Scope)
	fields := p.RequestFields
	if len(fields) == 0 {
		fields = nil
	}
	switch {
	case seen == nil:
		return b.Queue(queryClaimInsert, lock, p.Scope.ClientID, p.Scope.Key, p.Method, p.Path,
			p.RequestHash, fields, p.Now), false
	case idem.Expired(seen.CreatedAt, p.Now, p.Retention):
		return b.Queue(queryClaimReplace, lock, p.Scope.ClientID, p.Scope.Key, p.Method, p.Path,
			p.RequestHash, fields, p.Now, seen.Token, seen.CreatedAt), false
	default:
		return b.Queue(queryClaimTakeOver, lock, p.Scope.ClientID, p.Scope.Key, p.Now, seen.Token), true
	}
}

// claimOutcome is what the claim statement answered.
type claimOutcome struct {
	acquired bool       // the advisory lock was free
	token    *int64     // the new lease's token; nil when no row changed
	ctid     pgtype.TID // where the claimed row version is
}

// claimTwoPhaseNew is the first try of a two-phase claim, sent before any
// read of the key: in one round trip and one implicit transaction, it
// takes the key's advisory lock without waiting and, only if it got it,
// inserts a started row unless the key exists (ON CONFLICT DO NOTHING,
// which leaves no dead row behind for a retry); the insert commits at once.
// It returns again, for Claim to read the key and go on from there,
// whenever it claimed nothing: the key exists, its lock is taken, a row
// lock held it past ClaimLockTimeout, or the pooled connection turned out
// to be dead (it died while idle).
func (s *Store) claimTwoPhaseNew(ctx context.Context, p idem.ClaimParams) (res idem.ClaimResult, again bool, err error) {
	conn, err := s.acquire(ctx, "claim")
	if err != nil {
		return idem.ClaimResult{}, false, err
	}
	defer conn.Release()
	b := &pgx.Batch{}
	b.Queue(querySetLockTimeout, s.claimLockTimeout)
	var out claimOutcome
	qq, _ := claimStatement(b, p, nil)
	qq.QueryRow(func(row pgx.Row) error { return row.Scan(&out.acquired, &out.token, &out.ctid) })
	err = conn.SendBatch(ctx, b).Close()
	switch {
	case err == nil && out.token != nil:
		return idem.ClaimResult{Lease: &lease{
			store: s, scope: p.Scope, mode: p.Mode,
			info:      idem.LeaseInfo{Token: *out.token},
			claimedAt: p.Now, start: time.Now(),
			tx: &leaseTx{store: s},
		}}, false, nil
	case err == nil, pgCode(err) == codeLockNotAvailable, ctx.Err() == nil && conn.Conn().IsClosed():
		return idem.ClaimResult{}, true, nil
	}
	return idem.ClaimResult{}, false, wrapErr(ctx, "claim", err)
}

// claimTx runs the claim's transaction, in one round trip: it inserts,
// replaces or takes over the key that Claim read (seen, nil for none). It
// returns again when the key changed since seen was read, so that Claim
// starts over.
func (s *Store) claimTx(ctx context.Context, p idem.ClaimParams, seen *idem.Record) (res idem.ClaimResult, again bool, err error) {
	conn, err := s.acquire(ctx, "claim")
	if err != nil {
		return idem.ClaimResult{}, false, err
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
	b.Queue(querySetLockTimeout, s.claimLockTimeout)
	var out claimOutcome
	qq, takeover := claimStatement(b, p, seen)
	qq.QueryRow(func(row pgx.Row) error { return row.Scan(&out.acquired, &out.token, &out.ctid) })
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
			return idem.ClaimResult{}, false, wrapErr(ctx, "claim", err)
		case pgCode(err) == codeLockNotAvailable:
			// A statement that does not take the advisory lock holds the row
			// for a moment, such as a response being stored right now.
			return idem.ClaimResult{Record: inFlight(p.Scope)}, false, nil
		case isConflict(err):
			// A serializable claim whose snapshot predates the row.
			return idem.ClaimResult{}, true, nil
		}
		return idem.ClaimResult{}, false, wrapErr(ctx, "claim", err)
	}
	if !out.acquired || out.token == nil {
		if atomicMode {
			if err := tx.Rollback(ctx); err != nil {
				return idem.ClaimResult{}, false, wrapErr(ctx, "claim: roll back", err)
			}
		}
		if !out.acquired {
			return idem.ClaimResult{Record: inFlight(p.Scope)}, false, nil
		}
		return idem.ClaimResult{}, true, nil // the row changed since seen
	}

	l := &lease{
		store:     s,
		scope:     p.Scope,
		mode:      p.Mode,
		info:      idem.LeaseInfo{Token: *out.token, TakenOver: takeover},
		claimedAt: p.Now,
		start:     time.Now(),
		tx:        &leaseTx{store: s},
	}
	if atomicMode {
		keep = true
		l.ctid = out.ctid
		l.tx.open(conn, tx)
	}
	return idem.ClaimResult{Lease: l}, false, nil
}

// rollback rolls tx back after a failure, when tx is open. The connection
// is released by its owner; a connection left inside a transaction is
// closed by the pool rather than reused.
func rollback(ctx context.Context, tx pgx.Tx) {
	if tx == nil || tx.Conn() == nil || tx.Conn().IsClosed() || tx.Conn().PgConn().TxStatus() == 'I' {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	_ = tx.Rollback(ctx)
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
		res, again, err := s.claimInTx(ctx, tx, p)
		if err != nil || !again {
			return res, err
		}
	}
	return idem.ClaimResult{Record: inFlight(p.Scope)}, nil
}

func (s *Store) claimInTx(ctx context.Context, tx pgx.Tx, p idem.ClaimParams) (res idem.ClaimResult, again bool, err error) {
	sp, err := tx.Begin(ctx)
	if err != nil {
		return idem.ClaimResult{}, false, wrapErr(ctx, "claim: savepoint", err)
	}
	keep := false
	defer func() {
		if !keep {
			_ = sp.Rollback(context.WithoutCancel(ctx))
		}
	}()
	seen, err := loadKey(ctx, sp, p.Scope)
	if err != nil {
		return idem.ClaimResult{}, false, wrapErr(ctx, "claim: read key", err)
	}
	if seen != nil && !replaceable(seen, p) {
		return idem.ClaimResult{Record: seen}, false, nil
	}
	b := &pgx.Batch{}
	b.Queue(querySaveLockTimeout)
	b.Queue(querySetLockTimeout, s.claimLockTimeout)
	var out claimOutcome
	qq, _ := claimStatement(b, p, seen)
	qq.QueryRow(func(row pgx.Row) error { return row.Scan(&out.acquired, &out.token, &out.ctid) })
	b.Queue(queryRestoreLockTimeout)
	if err := sp.SendBatch(ctx, b).Close(); err != nil {
		if pgCode(err) == codeLockNotAvailable && ctx.Err() == nil {
			return idem.ClaimResult{Record: inFlight(p.Scope)}, false, nil
		}
		return idem.ClaimResult{}, false, wrapErr(ctx, "claim", err)
	}
	switch {
	case !out.acquired:
		return idem.ClaimResult{Record: inFlight(p.Scope)}, false, nil
	case out.token == nil:
		return idem.ClaimResult{}, true, nil
	}
	keep = true
	l := &lease{
		store:     s,
		scope:     p.Scope,
		mode:      idem.ModeAtomic,
		info:      idem.LeaseInfo{Token: *out.token},
		claimedAt: p.Now,
		start:     time.Now(),
		tx:        &leaseTx{store: s},
		inTx:      true,
		ctid:      out.ctid,
	}
	l.tx.open(nil, sp)
	return idem.ClaimResult{Lease: l}, false, nil
}

var _ idem.ConflictReporter = (*lease)(nil)

// lease is the ownership of a key.
type lease struct {
	store     *Store
	scope     idem.Scope
	mode      idem.Mode
	info      idem.LeaseInfo
	claimedAt time.Time // the claim's Now, on the middleware's clock
	start     time.Time // when the claim returned, for completed_at
	tx        *leaseTx
	inTx      bool // claimed by ClaimTx: tx is a savepoint of the caller's
	// ctid is where the claimed row is, when the lease's transaction
	// claimed it (atomic mode): only that transaction can change it.
	ctid pgtype.TID
	// pending is the row that Complete inserts, for an atomic claim that
	// holds the key by lock alone, a session-level advisory lock on the
	// lease's connection, which endSession frees (see claimAtomic).
	pending *pendingRow
	lock    int64
	// completeFailed is set when Complete failed other than by losing the
	// lease; Release may then still free a two-phase claim.
	completeFailed bool
}

func (l *lease) Context(ctx context.Context) context.Context {
	return context.WithValue(ctx, txKey{}, l.tx)
}

func (l *lease) Info() idem.LeaseInfo { return l.info }

// Conflicted implements [idem.ConflictReporter]: it reports whether a
// statement of the handler's transaction, or its commit, failed with a
// serialization failure (40001) or a deadlock (40P01).
func (l *lease) Conflicted() bool { return l.tx.conflicted.Load() }

// completedAt is the time of completion on the claim's clock.
func (l *lease) completedAt() time.Time {
	return l.claimedAt.Add(time.Since(l.start))
}

func (l *lease) Complete(ctx context.Context, resp *idem.Response) (err error) {
	defer func() {
		// A two-phase claim is committed: a Release after this failure
		// frees it (see idem.Lease).
		if err != nil && !errors.Is(err, idem.ErrLeaseLost) && !errors.Is(err, ErrLeaseEnded) {
			l.completeFailed = true
		}
	}()
	if resp == nil {
		return errors.New("idempg: complete key: no response")
	}
	conn, tx, ended := l.tx.end()
	if ended {
		return fmt.Errorf("idempg: complete key: %w", ErrLeaseEnded)
	}
	if l.inTx {
		return l.completeInTx(ctx, tx, resp)
	}
	header, err := json.Marshal(resp.Header)
	if err != nil {
		_ = l.end(ctx, conn, tx)
		return fmt.Errorf("idempg: encode headers: %w", err)
	}
	// The fenced update and COMMIT go in one round trip, followed by the
	// unlock of a session-locked key. If the fence fails, the server skips
	// the rest and the transaction stays aborted. A handler whose
	// transaction never began gets one here, begun in the same round trip,
	// on the connection it took if any.
	b := &pgx.Batch{}
	if tx == nil {
		if conn == nil {
			if conn, err = l.store.acquire(ctx, "complete key"); err != nil {
				return err
			}
		}
		b.BeginTx(pgx.TxOptions{IsoLevel: l.store.cfg.IsoLevel})
	}
	query, args := l.completeQuery(resp, header)
	b.Queue(query, args...)
	committed := false
	b.Queue(queryCommit).Exec(func(tag pgconn.CommandTag) error {
		if tag.String() != "COMMIT" {
			return errors.New("the transaction was rolled back instead of committed")
		}
		committed = true
		return nil
	})
	if l.pending != nil {
		b.Queue(queryUnlock, l.lock)
	}
	var br pgx.BatchResults
	if tx == nil {
		br = conn.SendBatch(ctx, b)
		tx = br.Tx()
	} else {
		br = tx.SendBatch(ctx, b)
	}
	err = br.Close()
	switch {
	case err == nil:
		conn.Release()
		return nil
	case committed:
		// Only the unlock failed: the response is stored, and closing the
		// connection frees the lock.
		closeConn(conn)
		return nil
	}
	if commitOutcomeUnknown(err) {
		// The COMMIT may have reached the server; the connection is of no
		// further use, and its session's lock ends with it.
		closeConn(conn)
		return errOutcomeUnknown("complete key", err)
	}
	if isConflict(err) {
		l.tx.conflicted.Store(true)
	}
	if l.pending != nil {
		_ = endSession(ctx, conn, l.lock)
	} else {
		rollback(ctx, tx)
		conn.Release()
	}
	if pgCode(err) == codeLeaseLost || (l.pending != nil && isKeyTaken(err)) {
		return fmt.Errorf("idempg: complete key (token %d): %w", l.info.Token, idem.ErrLeaseLost)
	}
	return wrapErr(ctx, "complete key", err)
}

// end rolls back the lease's transaction and returns its connection:
// endSession for a session-locked key, endTx otherwise.
func (l *lease) end(ctx context.Context, conn *pgxpool.Conn, tx pgx.Tx) error {
	if l.pending != nil {
		return endSession(ctx, conn, l.lock)
	}
	return endTx(ctx, conn, tx)
}

// completeQuery returns the fenced statement that stores resp.
func (l *lease) completeQuery(resp *idem.Response, header []byte) (string, []any) {
	body := resp.Body
	if body == nil {
		body = []byte{}
	}
	if r := l.pending; r != nil {
		fields := r.fields
		if len(fields) == 0 {
			fields = nil
		}
		args := []any{l.scope.ClientID, l.scope.Key, r.method, r.path, r.hash, fields,
			l.info.Token, resp.StatusCode, header, body, l.claimedAt, l.completedAt()}
		if r.replaceToken < 0 {
			return queryInsertCompletedNew, args
		}
		return queryInsertCompleted, append(args, r.replaceToken, r.replaceCreated)
	}
	args := []any{l.scope.ClientID, l.scope.Key, l.info.Token, resp.StatusCode, header, body, l.completedAt()}
	if l.ctid.Valid {
		return queryCompleteOwnKey, append(args, l.ctid)
	}
	return queryCompleteKey, args
}

// completeInTx stores the response in the savepoint of a ClaimTx lease and
// releases the savepoint; the caller commits.
func (l *lease) completeInTx(ctx context.Context, sp pgx.Tx, resp *idem.Response) error {
	header, err := json.Marshal(resp.Header)
	if err != nil {
		_ = sp.Rollback(context.WithoutCancel(ctx))
		return fmt.Errorf("idempg: encode headers: %w", err)
	}
	query, args := l.completeQuery(resp, header)
	_, err = sp.Exec(ctx, query, args...)
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
	if pgCode(err) == codeLeaseLost {
		return fmt.Errorf("idempg: complete key (token %d): %w", l.info.Token, idem.ErrLeaseLost)
	}
	return wrapErr(ctx, "complete key", err)
}

func (l *lease) Release(ctx context.Context) error {
	conn, tx, ended := l.tx.end()
	if ended {
		if l.completeFailed && l.mode == idem.ModeTwoPhase && !l.inTx {
			return l.deleteClaim(ctx)
		}
		return fmt.Errorf("idempg: release key: %w", ErrLeaseEnded)
	}
	if l.inTx {
		// Back to the savepoint: the claim and the handler's writes go.
		if err := tx.Rollback(ctx); err != nil {
			return wrapErr(ctx, "release key: roll back to savepoint", err)
		}
		return nil
	}
	if err := l.end(ctx, conn, tx); err != nil {
		return err
	}
	if l.mode == idem.ModeAtomic {
		return nil // the claim was in the rolled-back transaction
	}
	return l.deleteClaim(ctx)
}

// deleteClaim deletes a two-phase claim's committed row, unless another
// request took it over.
func (l *lease) deleteClaim(ctx context.Context) error {
	conn, err := l.store.acquire(ctx, "release key")
	if err != nil {
		return err
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, queryReleaseKey, l.scope.ClientID, l.scope.Key, l.info.Token); err != nil {
		return wrapErr(ctx, "release key", err)
	}
	return nil
}

// endTx rolls tx back and returns its connection to the pool. A connection
// that has died needs no rollback: the server ended the transaction. conn
// may be nil (no connection was taken), and tx nil (the deferred
// transaction never began).
func endTx(ctx context.Context, conn *pgxpool.Conn, tx pgx.Tx) error {
	if conn == nil {
		return nil
	}
	defer conn.Release()
	if tx == nil {
		return nil
	}
	err := tx.Rollback(ctx)
	if err != nil && !conn.Conn().IsClosed() {
		return wrapErr(ctx, "release key: roll back", err)
	}
	return nil
}
