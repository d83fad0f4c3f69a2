package idempg

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/internal/record"
)

// holder is how a lease holds its key: one type per claim path, each in a
// file of its own, told in the package documentation (Round trips):
//
//   - sessionLock (lease_session.go): an atomic claim at READ COMMITTED
//     that holds the key by a session-level lock;
//   - claimTx (lease_claimtx.go): an atomic claim at REPEATABLE READ or
//     SERIALIZABLE, or behind a pooler in transaction mode, whose
//     transaction holds the key's started row;
//   - startedRow (lease_started.go): a two-phase claim, whose committed
//     started row holds the key;
//   - deferredClaim (lease_deferred.go): the middleware's speculative
//     atomic claim, sent with the lease transaction's first round trip;
//   - callerTx (lease_callertx.go): a claim of [Store.ClaimTx], in a
//     savepoint of the caller's transaction.
//
// The lease hands each method the connection and the transaction it took
// out of its leaseTx (either may be nil: see leaseTx).
type holder interface {
	// complete stores resp, with its header encoded as header (see
	// headerArg), and ends the lease's transaction.
	complete(ctx context.Context, l *lease, conn *pgxpool.Conn, tx pgx.Tx, resp *idemstore.Response, header any) error
	// end rolls back the lease's transaction, which undoes an atomic claim
	// and the handler's writes, and gives back its connection.
	end(ctx context.Context, l *lease, conn *pgxpool.Conn, tx pgx.Tx) error
	// release is Release: it frees the key, after end unless the lease had
	// already ended.
	release(ctx context.Context, l *lease, conn *pgxpool.Conn, tx pgx.Tx, ended bool) error
	// recovery and checkpoint are the lease's idemstore.RecoveryLease.
	recovery(ctx context.Context, l *lease) (idemstore.Recovery, error)
	checkpoint(ctx context.Context, l *lease, r idemstore.Recovery) error
}

// atomicLease is what the four atomic holders share: the claim is in the
// lease's transaction, so rolling that back frees the key, and the lease
// keeps no recovery point.
type atomicLease struct{}

func (atomicLease) release(ctx context.Context, l *lease, conn *pgxpool.Conn, tx pgx.Tx, ended bool) error {
	if ended {
		return fmt.Errorf("idempg: release key: %w", ErrLeaseEnded)
	}
	return l.h.end(ctx, l, conn, tx) // the claim was in what end rolls back
}

func (atomicLease) recovery(context.Context, *lease) (idemstore.Recovery, error) {
	return idemstore.Recovery{}, fmt.Errorf("idempg: read recovery point: %w", idemstore.ErrNoRecovery)
}

func (atomicLease) checkpoint(context.Context, *lease, idemstore.Recovery) error {
	return fmt.Errorf("idempg: checkpoint: %w", idemstore.ErrNoRecovery)
}

var (
	_ idemstore.ConflictReporter = (*lease)(nil)
	_ idemstore.RecoveryLease    = (*lease)(nil)
)

// lease is the ownership of a key.
type lease struct {
	store     *Store
	scope     idemstore.Scope
	h         holder
	info      idemstore.LeaseInfo
	claimedAt time.Time // the claim's Now, on the middleware's clock
	start     time.Time // when the claim returned, for completed_at
	tx        leaseTx   // in the lease's own allocation
	// completeFailed is set when Complete failed other than by losing the
	// lease; Release may then still free a two-phase claim.
	completeFailed bool
}

// newLease makes the lease for a claim of p that holds the key by h, with
// conn and tx, when not nil, as the lease's transaction (see leaseTx).
func (s *Store) newLease(p idemstore.ClaimParams, info idemstore.LeaseInfo, h holder, conn *pgxpool.Conn, tx pgx.Tx) *lease {
	l := &lease{info: info}
	s.initLease(l, &p, h)
	if conn != nil || tx != nil {
		l.tx.open(conn, tx)
	}
	return l
}

// initLease sets l, a lease that the caller allocated (as part of a
// deferredLease, say) with its info set, for a claim of p that holds the
// key by h. Its transaction is the caller's to open.
func (s *Store) initLease(l *lease, p *idemstore.ClaimParams, h holder) {
	l.store, l.scope, l.h = s, p.Scope, h
	l.claimedAt, l.start = p.Now, time.Now()
	l.tx.store = s
	// A claim that wrote no row yet (a session lock, a deferred claim)
	// will write the claim's Now, which PostgreSQL keeps in microseconds.
	if l.info.CreatedAt.IsZero() {
		l.info.CreatedAt = p.Now.Truncate(time.Microsecond)
	}
}

func (l *lease) Context(ctx context.Context) context.Context {
	return context.WithValue(ctx, txKey{}, &l.tx)
}

func (l *lease) Info() idemstore.LeaseInfo { return l.info }

// Conflicted implements [idemstore.ConflictReporter]: it reports whether a
// statement of the handler's transaction, or its commit, failed with a
// serialization failure (40001) or a deadlock (40P01).
func (l *lease) Conflicted() bool { return l.tx.conflicted.Load() }

// completedAt is the time of completion on the claim's clock.
func (l *lease) completedAt() time.Time {
	return l.claimedAt.Add(time.Since(l.start))
}

// Complete implements [idemstore.Lease]. Besides the errors that idemstore.Lease
// names, it returns an error wrapping [ErrLeaseEnded] when the lease was
// already completed or released; the key is then left as that call left
// it.
func (l *lease) Complete(ctx context.Context, resp *idemstore.Response) error {
	if resp == nil {
		return l.completeFailedWith(errors.New("idempg: complete key: no response"))
	}
	conn, tx, ended := l.tx.end()
	if ended {
		return fmt.Errorf("idempg: complete key: %w", ErrLeaseEnded)
	}
	header, err := record.EncodeHeader(resp.Header)
	if err != nil {
		_ = l.h.end(context.WithoutCancel(ctx), l, conn, tx)
		return l.completeFailedWith(fmt.Errorf("idempg: %w", err))
	}
	if err := l.h.complete(ctx, l, conn, tx, resp, headerArg(header, l.store.typedArgs)); err != nil {
		return l.completeFailedWith(err)
	}
	return nil
}

// completeFailedWith returns err, the error of a Complete, after noting
// what it leaves for Release: a two-phase claim is committed, and a Release
// after a failure other than losing the lease frees it (see
// idemstore.Lease).
func (l *lease) completeFailedWith(err error) error {
	if !errors.Is(err, idemstore.ErrLeaseLost) && !errors.Is(err, ErrLeaseEnded) {
		l.completeFailed = true
	}
	return err
}

// Release implements [idemstore.Lease]. It returns an error wrapping
// [ErrLeaseEnded] when the lease was already completed or released, except
// after a two-phase Complete that failed other than by losing the lease:
// that Release deletes the committed claim.
func (l *lease) Release(ctx context.Context) error {
	conn, tx, ended := l.tx.end()
	return l.h.release(ctx, l, conn, tx, ended)
}

// Recovery implements [idemstore.RecoveryLease]. Only two-phase leases keep
// recovery points (lease_started.go).
func (l *lease) Recovery(ctx context.Context) (idemstore.Recovery, error) {
	return l.h.recovery(ctx, l)
}

// Checkpoint implements [idemstore.RecoveryLease]. Only two-phase leases keep
// recovery points (lease_started.go).
func (l *lease) Checkpoint(ctx context.Context, r idemstore.Recovery) error {
	return l.h.checkpoint(ctx, l, r)
}

// body is resp's body as stored: never NULL.
func body(resp *idemstore.Response) []byte {
	if resp.Body == nil {
		return []byte{}
	}
	return resp.Body
}

// commitRound sends, in one round trip, the fenced statement (query,
// args), COMMIT, then what after queues, on b, an empty batch (a deferred
// claim's own, deferredClaim.batch, or newBatch). The statements run on tx, or, when
// the handler's transaction never began (tx is nil), in one begun in the
// same round trip on conn, which is acquired for op when nil; claim, when
// not nil, is a deferred claim still to be sent, which then goes out in
// front of them (lease_deferred.go). It returns the connection and
// transaction it used and whether the COMMIT succeeded; conn is nil only
// when none could be acquired.
func (l *lease) commitRound(ctx context.Context, b *batch, conn *pgxpool.Conn, tx pgx.Tx, op, query string, args []any, claim *deferredClaim, after func(*pgx.Batch)) (_ *pgxpool.Conn, _ pgx.Tx, committed bool, err error) {
	claiming, began := false, false
	if tx == nil {
		if conn == nil {
			if conn, err = l.store.acquire(ctx, op); err != nil {
				return nil, nil, false, err
			}
		}
		if claim != nil {
			claim.queue(b, true) // the claim, then BEGIN
			claiming = true
		} else {
			b.BeginTx(pgx.TxOptions{IsoLevel: l.store.cfg.IsoLevel})
			began = true
		}
	}
	b.add(query, args...)
	b.add(queryCommit)
	if after != nil {
		after(&b.Batch)
	}
	var br pgx.BatchResults
	switch {
	case claiming:
		br, err = claim.sendBegin(ctx, conn, b)
		tx = br.Tx()
	case began:
		br = conn.SendBatch(ctx, &b.Batch)
		tx = br.Tx()
		_, err = br.Exec() // BEGIN
	default:
		br = tx.SendBatch(ctx, &b.Batch)
	}
	// The results in the order sent (see deferredClaim.readGuard): the
	// statement, then COMMIT; Close reads what after queued.
	if err == nil {
		_, err = br.Exec()
	}
	if err == nil {
		var tag pgconn.CommandTag
		if tag, err = br.Exec(); err == nil {
			if tag.String() == "COMMIT" {
				committed = true
			} else {
				err = errors.New("the transaction was rolled back instead of committed")
			}
		}
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return conn, tx, committed, err
}

// commitUpdate stores the response by query, with args, the fenced update
// of the started row that the lease holds, and commits, in one round trip
// (commitRound).
func (l *lease) commitUpdate(ctx context.Context, conn *pgxpool.Conn, tx pgx.Tx, query string, args ...any) error {
	conn, tx, committed, err := l.commitRound(ctx, newBatch(), conn, tx, "complete key", query, args, nil, nil)
	if conn == nil {
		return err // no connection could be had; nothing was sent
	}
	return l.settleCommit(ctx, conn, tx, committed, err, false, nil)
}

// settleCommit ends a Complete whose commitRound, on conn and tx, ended
// with err. If the COMMIT failed, the server skipped the rest and the
// transaction stays aborted: rollBack then ends it and gives the
// connection back (when nil, a rollback does), and the error is translated
// by completeError, for a statement that inserts the key row when inserts
// is set.
func (l *lease) settleCommit(ctx context.Context, conn *pgxpool.Conn, tx pgx.Tx, committed bool, err error, inserts bool, rollBack func()) error {
	switch {
	case err == nil:
		conn.Release()
		return nil
	case committed:
		// Only what came after the COMMIT failed (a session lock's unlock):
		// the response is stored, and closing the connection frees the lock.
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
	if rollBack != nil {
		rollBack()
	} else {
		rollback(ctx, tx)
		conn.Release()
	}
	return l.completeError(ctx, err, inserts)
}

// completeError translates the error of a Complete whose transaction
// rolled back; inserts reports whether its statement inserts the key row,
// which only a lock holds until then.
func (l *lease) completeError(ctx context.Context, err error, inserts bool) error {
	switch {
	case inserts && (isKeyTaken(err) || pgCode(err) == codeLeaseLost):
		// The lock held the key, yet a row for it appeared: a request that
		// did not take the lock completed it.
		return l.completedByAnother(ctx)
	case pgCode(err) == codeLeaseLost:
		return fmt.Errorf("idempg: complete key (token %d): %w", l.info.Token, idemstore.ErrLeaseLost)
	}
	return wrapErr(ctx, "complete key", err)
}

// completedByAnother reads the row that refused the lease's own and returns
// it in an idemstore.CompletedError, for the caller to answer from. A row that
// is not completed (a two-phase claim in flight) is a lost lease.
func (l *lease) completedByAnother(ctx context.Context) error {
	rec, err := l.store.probe(ctx, l.scope)
	switch {
	case err != nil:
		return fmt.Errorf("idempg: complete key: another request stored the key first: %w", err)
	case rec != nil && rec.Status == idemstore.StatusCompleted:
		return fmt.Errorf("idempg: complete key (token %d): %w", l.info.Token, &idemstore.CompletedError{Record: rec})
	}
	return fmt.Errorf("idempg: complete key (token %d): %w", l.info.Token, idemstore.ErrLeaseLost)
}

// pendingRow is the key row that an atomic lease whose claim wrote no row
// (sessionLock, deferredClaim) inserts on Complete.
type pendingRow struct {
	method, path string
	hash, fields []byte
	trace        string // the claim's trace context; "" for none (NULL)

	// What insertNew fills in, and its arguments, in the holder's
	// allocation, which the arguments point into (arg.go).
	token, status int64
	body          []byte
	completed     time.Time
	args          [13]any
}

// init sets r to the row that p's claim inserts on Complete.
func (r *pendingRow) init(p *idemstore.ClaimParams) {
	r.method, r.path, r.hash, r.trace = p.Method, p.Path, p.RequestHash, p.TraceContext
	if len(p.RequestFields) > 0 {
		r.fields = p.RequestFields
	}
}

// traceContext is r's trace context as stored: nil for NULL.
func (r *pendingRow) traceContext() *string {
	if r.trace == "" {
		return nil
	}
	return &r.trace
}

// insertNew returns queryInsertCompletedNew, which inserts the row with
// token and resp, for a key that had no row. Its arguments are in r's
// array, which a lease's Complete, sent once, is the only user of.
func (r *pendingRow) insertNew(l *lease, token int64, resp *idemstore.Response, header any) (string, []any) {
	return queryInsertCompletedNew, r.fill(l, token, resp, header, true)
}

// insertFirst is insertNew at token 1: queryInsertCompletedFirst, whose
// arguments are insertNew's without the token.
func (r *pendingRow) insertFirst(l *lease, resp *idemstore.Response, header any) (string, []any) {
	return queryInsertCompletedFirst, r.fill(l, 1, resp, header, false)
}

// fill sets r.args to insertNew's arguments, without the token unless
// withToken is set, and returns them. They are appended into the array in
// place, in the queries' order, so that insertFirst needs no second copy
// without the token.
func (r *pendingRow) fill(l *lease, token int64, resp *idemstore.Response, header any, withToken bool) []any {
	r.token, r.status, r.body, r.completed = token, int64(resp.StatusCode), body(resp), l.completedAt()
	a := r.args[:0]
	if l.store.typedArgs {
		a = append(a, (*textArg)(&l.scope.ClientID), (*textArg)(&l.scope.Key), (*textArg)(&r.method), (*textArg)(&r.path),
			(*bytesArg)(&r.hash), (*bytesArg)(&r.fields))
		if withToken {
			a = append(a, (*intArg)(&r.token))
		}
		return append(a, (*intArg)(&r.status), header, (*bytesArg)(&r.body),
			(*timeArg)(&l.claimedAt), (*timeArg)(&r.completed), (*textArg)(r.traceContext()))
	}
	a = append(a, l.scope.ClientID, l.scope.Key, r.method, r.path, r.hash, r.fields)
	if withToken {
		a = append(a, token)
	}
	return append(a, resp.StatusCode, header, r.body, l.claimedAt, r.completed, r.traceContext())
}
