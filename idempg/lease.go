package idempg

import (
	"context"
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

// leaseKind is how a lease holds its key. It decides how Complete stores
// the response and how Release frees the key.
type leaseKind int

const (
	// bySessionLock is an atomic claim at READ COMMITTED (claimSession):
	// the key's session-level advisory lock, on the connection the lease
	// keeps, holds the key, and no row exists yet. Complete inserts the
	// completed row (pending), commits and unlocks; Release rolls back and
	// unlocks.
	bySessionLock leaseKind = iota

	// byClaimTx is an atomic claim at REPEATABLE READ or SERIALIZABLE, or
	// with Config.TransactionPooling (claimTx): the claim's transaction,
	// left open for the handler, holds the key's transaction-scoped lock
	// and its started row, at ctid. Complete updates that row and commits;
	// Release rolls everything back.
	byClaimTx

	// byStartedRow is a two-phase claim: a committed started row with the
	// lease's token holds the key. Complete runs the fenced update in the
	// handler's transaction and commits; Release rolls that transaction
	// back and deletes the row, unless another request took it over.
	byStartedRow

	// byDeferredClaim is a speculative atomic claim at READ COMMITTED
	// (claimDeferred): the lease holds a connection and nothing else until
	// its claim goes out with its transaction's first statement, or with
	// Complete or Release (see deferredClaim). Once the claim passed, the
	// transaction holds the key's transaction-scoped lock, and no row
	// exists yet: Complete inserts the completed row (pending) and commits,
	// which unlocks; Release rolls back.
	byDeferredClaim

	// byCallerTx is a claim of [Store.ClaimTx]: a started row, at ctid, in a
	// savepoint of the caller's transaction. Complete updates the row and
	// releases the savepoint, and the caller commits; Release rolls back to
	// the savepoint.
	byCallerTx
)

// held is what a claim holds when it makes a lease.
type held struct {
	kind leaseKind
	info idem.LeaseInfo
	// conn and tx are the connection and the transaction that the lease
	// keeps: conn for bySessionLock, both for byClaimTx, tx (a savepoint)
	// for byCallerTx, neither for byStartedRow, whose handler transaction
	// opens on first use.
	conn *pgxpool.Conn
	tx   pgx.Tx
	// ctid is where the started row is, for byClaimTx and byCallerTx: only
	// the lease's transaction can change it.
	ctid pgtype.TID
	// created is the created_at of the started row, for byStartedRow:
	// with the token, the fence of the lease's writes to its committed
	// row, since a row made anew after it was deleted starts again at
	// token 1.
	created time.Time
	// pending is the row that Complete inserts, for bySessionLock and
	// byDeferredClaim.
	pending *pendingRow
	// claim is the claim still to be sent, for byDeferredClaim.
	claim *deferredClaim
}

// pendingRow is the key row that a session-locked lease inserts on
// Complete.
type pendingRow struct {
	method, path   string
	hash, fields   []byte
	replaceToken   int64 // the token of a row past retention to replace; -1 for none
	replaceCreated time.Time
}

var _ idem.ConflictReporter = (*lease)(nil)

// lease is the ownership of a key.
type lease struct {
	store     *Store
	scope     idem.Scope
	kind      leaseKind
	info      idem.LeaseInfo
	claimedAt time.Time // the claim's Now, on the middleware's clock
	start     time.Time // when the claim returned, for completed_at
	tx        *leaseTx
	ctid      pgtype.TID  // see held
	createdAt time.Time   // see held.created
	pending   *pendingRow // see held
	// completeFailed is set when Complete failed other than by losing the
	// lease; Release may then still free a two-phase claim.
	completeFailed bool
	// recovery is the key's recovery point, once read or saved (see
	// recovery.go).
	recovery *idem.Recovery
}

// newLease makes the lease for a claim of p that holds h.
func (s *Store) newLease(p idem.ClaimParams, h held) *lease {
	l := &lease{
		store:     s,
		scope:     p.Scope,
		kind:      h.kind,
		info:      h.info,
		claimedAt: p.Now,
		start:     time.Now(),
		tx:        &leaseTx{store: s, claim: h.claim},
		ctid:      h.ctid,
		createdAt: h.created,
		pending:   h.pending,
	}
	if h.conn != nil || h.tx != nil {
		l.tx.open(h.conn, h.tx)
	}
	// A claim that wrote no row yet (a session lock, a deferred claim)
	// will write the claim's Now, which PostgreSQL keeps in microseconds.
	if l.info.CreatedAt.IsZero() {
		l.info.CreatedAt = h.created
	}
	if l.info.CreatedAt.IsZero() {
		l.info.CreatedAt = p.Now.Truncate(time.Microsecond)
	}
	return l
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

// Complete implements [idem.Lease]. Besides the errors that idem.Lease
// names, it returns an error wrapping [ErrLeaseEnded] when the lease was
// already completed or released; the key is then left as that call left
// it.
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
	if l.kind == byDeferredClaim && l.tx.claim.state == claimRefused {
		conn.Release()
		return l.tx.claim.refusal
	}
	header, err := record.EncodeHeader(resp.Header)
	if err != nil {
		_ = l.end(context.WithoutCancel(ctx), conn, tx)
		return fmt.Errorf("idempg: %w", err)
	}
	query, args := l.completeQuery(resp, header)
	if l.kind == byCallerTx {
		return l.completeInCallerTx(ctx, tx, query, args)
	}
	return l.commit(ctx, conn, tx, query, args)
}

// commit sends the fenced statement that stores the response (query and
// args) and COMMIT in one round trip, followed by the unlock of a
// session-locked key. If the fence fails, the server skips the rest and the
// transaction stays aborted; commit then rolls it back. A handler whose
// transaction never began (tx is nil) gets one here, begun in the same
// round trip, on the connection it took if any.
func (l *lease) commit(ctx context.Context, conn *pgxpool.Conn, tx pgx.Tx, query string, args []any) (err error) {
	var after func(*pgx.Batch)
	if l.kind == bySessionLock {
		after = func(b *pgx.Batch) { b.Queue(queryUnlock, lockKey(l.scope)) }
	}
	claiming := l.kind == byDeferredClaim && l.tx.claim.state == claimPending
	if claiming && conn != nil && conn.Conn().IsClosed() {
		// The connection died under the handler's first round trip:
		// nothing is held on the server. commitRound takes another.
		conn.Release()
		conn, tx = nil, nil
	}
	conn, tx, committed, err := l.commitRound(ctx, conn, tx, "complete key", query, args, after)
	if conn == nil {
		return err // no connection could be had; nothing was sent
	}
	if claiming {
		if refusal := l.tx.claim.settle(ctx, conn, err, false); refusal != nil {
			conn.Release() // the server rolled the round trip back
			return refusal
		}
	}
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
	if l.kind == bySessionLock {
		_ = endSession(ctx, conn, lockKey(l.scope))
	} else {
		rollback(ctx, tx)
		conn.Release()
	}
	return l.completeError(ctx, err)
}

// commitRound sends, in one round trip, the fenced statement (query,
// args), COMMIT, then what after queues. The statements run on tx, or, when
// the handler's transaction never began (tx is nil), in one begun in the
// same round trip on conn, which is acquired for op when nil. It returns
// the connection and transaction it used and whether the COMMIT succeeded;
// conn is nil only when none could be acquired.
func (l *lease) commitRound(ctx context.Context, conn *pgxpool.Conn, tx pgx.Tx, op, query string, args []any, after func(*pgx.Batch)) (_ *pgxpool.Conn, _ pgx.Tx, committed bool, err error) {
	b := &pgx.Batch{}
	claiming := false
	if tx == nil {
		if conn == nil {
			if conn, err = l.store.acquire(ctx, op); err != nil {
				return nil, nil, false, err
			}
		}
		if dc := l.tx.claim; dc != nil && dc.state == claimPending {
			dc.queue(b, true) // the claim, then BEGIN
			claiming = true
		} else {
			b.BeginTx(pgx.TxOptions{IsoLevel: l.store.cfg.IsoLevel})
		}
	}
	b.Queue(query, args...)
	b.Queue(queryCommit).Exec(func(tag pgconn.CommandTag) error {
		if tag.String() != "COMMIT" {
			return errors.New("the transaction was rolled back instead of committed")
		}
		committed = true
		return nil
	})
	if after != nil {
		after(b)
	}
	var br pgx.BatchResults
	switch {
	case claiming:
		br = l.store.sendClaim(ctx, conn, b)
		tx = br.Tx()
	case tx == nil:
		br = conn.SendBatch(ctx, b)
		tx = br.Tx()
	default:
		br = tx.SendBatch(ctx, b)
	}
	err = br.Close() // runs the COMMIT's callback, which sets committed
	return conn, tx, committed, err
}

// completeError translates the error of a Complete whose transaction
// rolled back.
func (l *lease) completeError(ctx context.Context, err error) error {
	switch {
	case (l.kind == bySessionLock || l.kind == byDeferredClaim) && (isKeyTaken(err) || pgCode(err) == codeLeaseLost):
		// The lock held the key, yet a row for it appeared: a request that
		// did not take the lock completed it.
		return l.completedByAnother(ctx)
	case pgCode(err) == codeLeaseLost:
		return fmt.Errorf("idempg: complete key (token %d): %w", l.info.Token, idem.ErrLeaseLost)
	}
	return wrapErr(ctx, "complete key", err)
}

// completedByAnother reads the row that refused the lease's own and returns
// it in an idem.CompletedError, for the caller to answer from. A row that
// is not completed (a two-phase claim in flight) is a lost lease.
func (l *lease) completedByAnother(ctx context.Context) error {
	rec, err := l.store.probe(ctx, l.scope)
	switch {
	case err != nil:
		return fmt.Errorf("idempg: complete key: another request stored the key first: %w", err)
	case rec != nil && rec.Status == idem.StatusCompleted:
		return fmt.Errorf("idempg: complete key (token %d): %w", l.info.Token, &idem.CompletedError{Record: rec})
	}
	return fmt.Errorf("idempg: complete key (token %d): %w", l.info.Token, idem.ErrLeaseLost)
}

// completeQuery returns the fenced statement that stores resp.
func (l *lease) completeQuery(resp *idem.Response, header []byte) (string, []any) {
	body := resp.Body
	if body == nil {
		body = []byte{}
	}
	switch l.kind {
	case bySessionLock:
		r := l.pending
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
	case byDeferredClaim:
		r := l.pending
		fields := r.fields
		if len(fields) == 0 {
			fields = nil
		}
		if dc := l.tx.claim; dc.state == claimHeld && !dc.stale {
			// The claim's guard found no row for the key: a plain insert,
			// as for a session-locked lease that saw none.
			return queryInsertCompletedNew, []any{l.scope.ClientID, l.scope.Key, r.method, r.path, r.hash, fields,
				int64(1), resp.StatusCode, header, body, l.claimedAt, l.completedAt()}
		}
		return queryInsertCompletedDeferred, []any{l.scope.ClientID, l.scope.Key, r.method, r.path, r.hash, fields,
			resp.StatusCode, header, body, l.claimedAt, l.completedAt(), l.tx.claim.cutoff}
	case byClaimTx, byCallerTx:
		args := []any{l.scope.ClientID, l.scope.Key, l.info.Token, resp.StatusCode, header, body, l.completedAt(), l.ctid}
		return queryCompleteOwnKey, args
	default:
		args := []any{l.scope.ClientID, l.scope.Key, l.info.Token, resp.StatusCode, header, body, l.completedAt(), l.createdAt}
		return queryCompleteKey, args
	}
}

// completeInCallerTx sends the fenced statement that stores the response
// (query and args) in the savepoint of a ClaimTx lease and releases the
// savepoint; the caller commits.
func (l *lease) completeInCallerTx(ctx context.Context, sp pgx.Tx, query string, args []any) error {
	_, err := sp.Exec(ctx, query, args...)
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
	return l.completeError(ctx, err)
}

// Release implements [idem.Lease]. It returns an error wrapping
// [ErrLeaseEnded] when the lease was already completed or released, except
// after a two-phase Complete that failed other than by losing the lease:
// that Release deletes the committed claim.
func (l *lease) Release(ctx context.Context) error {
	conn, tx, ended := l.tx.end()
	if ended {
		if l.completeFailed && l.kind == byStartedRow {
			return l.deleteClaim(ctx)
		}
		return fmt.Errorf("idempg: release key: %w", ErrLeaseEnded)
	}
	if err := l.end(ctx, conn, tx); err != nil {
		return err
	}
	if l.kind == byStartedRow {
		return l.deleteClaim(ctx)
	}
	return nil // the claim was in what end rolled back
}

// end rolls back the lease's transaction, which undoes an atomic claim and
// the handler's writes, and gives back its connection.
func (l *lease) end(ctx context.Context, conn *pgxpool.Conn, tx pgx.Tx) error {
	switch l.kind {
	case bySessionLock:
		return endSession(ctx, conn, lockKey(l.scope))
	case byDeferredClaim:
		return l.tx.claim.release(ctx, conn, tx)
	case byCallerTx:
		// Back to the savepoint: the claim and the handler's writes go.
		if err := tx.Rollback(ctx); err != nil {
			return wrapErr(ctx, "release key: roll back to savepoint", err)
		}
		return nil
	default:
		return endTx(ctx, conn, tx)
	}
}

// deleteClaim deletes a two-phase claim's committed row, unless another
// request took it over.
func (l *lease) deleteClaim(ctx context.Context) error {
	conn, err := l.store.acquire(ctx, "release key")
	if err != nil {
		return err
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, queryReleaseKey, l.scope.ClientID, l.scope.Key, l.info.Token, l.createdAt); err != nil {
		return wrapErr(ctx, "release key", err)
	}
	return nil
}
