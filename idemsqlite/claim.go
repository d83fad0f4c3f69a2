package idemsqlite

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/internal/record"
)

// ErrNoTx is returned by [TxFromContext] for a context that carries no lease.
var ErrNoTx = errors.New("idemsqlite: no idempotency transaction in context")

type txKey struct{}

// TxFromContext returns the transaction that the idem middleware opened for
// the request whose context this is. Business writes made in it commit
// together with the stored response, or roll back with the key.
//
// In ModeAtomic the transaction was opened with the claim. In ModeTwoPhase
// it is opened on the first call, so a handler can call other systems
// before it takes SQLite's single write lock. Do not commit or roll it back.
// Once the lease is completed or released, it returns an error wrapping
// idemstore.ErrLeaseEnded.
func TxFromContext(ctx context.Context) (*sql.Tx, error) {
	lt, ok := ctx.Value(txKey{}).(*leaseTx)
	if !ok {
		return nil, ErrNoTx
	}
	return lt.get(ctx)
}

// leaseTx is a lease's transaction, opened at once or on first use.
type leaseTx struct {
	store *Store
	mu    sync.Mutex
	tx    *writeTx
	ended bool
}

func (lt *leaseTx) get(ctx context.Context) (*sql.Tx, error) {
	lt.mu.Lock()
	defer lt.mu.Unlock()
	if lt.ended {
		return nil, fmt.Errorf("idemsqlite: %w", idemstore.ErrLeaseEnded)
	}
	if lt.tx == nil {
		tx, err := lt.store.begin(ctx)
		if err != nil {
			return nil, err
		}
		lt.tx = tx
	}
	return lt.tx.Tx, nil
}

// end takes the transaction out, so that nothing uses it after the lease
// ends. ended is true when the lease had already ended.
func (lt *leaseTx) end() (tx *writeTx, ended bool) {
	lt.mu.Lock()
	defer lt.mu.Unlock()
	if lt.ended {
		return nil, true
	}
	lt.ended = true
	tx = lt.tx
	lt.tx = nil
	return tx, false
}

// writeTx is a transaction on the write connection. The wait for the
// connection is bounded by the caller's context; the transaction itself
// lives until commit or rollback, whatever happens to that context.
type writeTx struct {
	*sql.Tx
	conn *sql.Conn
}

func (s *Store) begin(ctx context.Context) (*writeTx, error) {
	conn, err := s.write.Conn(ctx)
	if err != nil {
		return nil, fmt.Errorf("idemsqlite: wait for the write connection: %w", unavailable(err))
	}
	tx, err := conn.BeginTx(context.WithoutCancel(ctx), nil)
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("idemsqlite: begin: %w", unavailable(err))
	}
	return &writeTx{Tx: tx, conn: conn}, nil
}

func (t *writeTx) commit() error {
	defer t.conn.Close()
	err := t.Tx.Commit()
	if err != nil {
		// A COMMIT refused with SQLITE_BUSY leaves the transaction open on
		// the connection: roll it back, so that nothing of it can commit
		// later and the error keeps meaning "not committed". Any other
		// failed COMMIT has rolled back already, and this does nothing.
		_, _ = t.conn.ExecContext(context.Background(), "ROLLBACK")
	}
	return err
}

func (t *writeTx) rollback() error {
	defer t.conn.Close()
	return t.Tx.Rollback()
}

type querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// Claim implements [idemstore.Store].
func (s *Store) Claim(ctx context.Context, p idemstore.ClaimParams) (idemstore.ClaimResult, error) {
	if err := ctx.Err(); err != nil {
		return idemstore.ClaimResult{}, err
	}
	// Replays and keys in flight are answered from a read connection,
	// without the write lock.
	rec, err := load(ctx, s.read, p.Scope)
	if err != nil {
		return idemstore.ClaimResult{}, err
	}
	if rec != nil && !p.MayReplace(rec) {
		return idemstore.ClaimResult{Record: rec}, nil
	}

	s.mu.Lock()
	if held := s.inflight[p.Scope]; held != nil {
		c := *held
		s.mu.Unlock()
		return idemstore.ClaimResult{Record: &c}, nil
	}
	s.inflight[p.Scope] = &idemstore.Record{
		Scope: p.Scope, Method: p.Method, Path: p.Path,
		RequestHash: bytes.Clone(p.RequestHash), RequestFields: bytes.Clone(p.RequestFields),
		Status: idemstore.StatusInFlight, CreatedAt: p.Now, LockedAt: p.Now, LeaseExpires: p.LeaseExpires(),
	}
	s.mu.Unlock()

	res, err := s.claimTx(ctx, p)
	if err != nil || res.Lease == nil || p.TwoPhase {
		s.landed(p.Scope)
	}
	return res, err
}

// landed forgets a scope's in-flight mark once the database shows the truth.
func (s *Store) landed(scope idemstore.Scope) {
	s.mu.Lock()
	delete(s.inflight, scope)
	s.mu.Unlock()
}

func (s *Store) claimTx(ctx context.Context, p idemstore.ClaimParams) (idemstore.ClaimResult, error) {
	// An atomic claim's transaction outlives the claim call; it ends with
	// Complete or Release.
	tx, err := s.begin(ctx)
	if err != nil {
		return idemstore.ClaimResult{}, err
	}
	keep := false
	defer func() {
		if !keep {
			tx.rollback()
		}
	}()
	rec, err := load(ctx, tx, p.Scope)
	if err != nil {
		return idemstore.ClaimResult{}, err
	}
	l := &lease{store: s, scope: p.Scope, twoPhase: p.TwoPhase, info: idemstore.LeaseInfo{Token: 1}}
	switch {
	case rec == nil || idemstore.Expired(rec.CreatedAt, p.Now, p.Retention):
		if rec != nil {
			l.info.Token = rec.Token + 1
		}
		now := p.Now.UnixMicro()
		l.createdAt = now
		if _, err := tx.ExecContext(ctx, queryInsertKey, p.Scope.ClientID, p.Scope.Key, p.Method, p.Path,
			p.RequestHash, nullBytes(p.RequestFields), l.info.Token, now, now, leaseExpires(p)); err != nil {
			return idemstore.ClaimResult{}, fmt.Errorf("idemsqlite: insert key: %w", unavailable(err))
		}
	case p.CanTakeOver(rec):
		if _, err := tx.ExecContext(ctx, queryTakeOverKey, p.Now.UnixMicro(), leaseExpires(p), p.Scope.ClientID, p.Scope.Key, rec.Token); err != nil {
			return idemstore.ClaimResult{}, fmt.Errorf("idemsqlite: take over key: %w", unavailable(err))
		}
		l.info = idemstore.LeaseInfo{Token: rec.Token + 1, TakenOver: true}
		l.createdAt = rec.CreatedAt.UnixMicro()
	default:
		return idemstore.ClaimResult{Record: rec}, nil
	}
	l.info.CreatedAt = time.UnixMicro(l.createdAt).UTC()
	if !p.TwoPhase {
		keep = true
		l.tx = &leaseTx{store: s, tx: tx}
		return idemstore.ClaimResult{Lease: l}, nil
	}
	keep = true
	if err := tx.commit(); err != nil {
		return idemstore.ClaimResult{}, fmt.Errorf("idemsqlite: commit claim: %w", unavailable(err))
	}
	l.tx = &leaseTx{store: s}
	return idemstore.ClaimResult{Lease: l}, nil
}

// leaseExpires is the lease expiry that p's claim records: NULL when it
// has none.
func leaseExpires(p idemstore.ClaimParams) any {
	if t := p.LeaseExpires(); !t.IsZero() {
		return t.UnixMicro()
	}
	return nil
}

func nullBytes(b []byte) any {
	if len(b) == 0 {
		return nil
	}
	return b
}

// load reads a key's record; nil when there is none.
func load(ctx context.Context, q querier, scope idemstore.Scope) (*idemstore.Record, error) {
	var (
		rec                    = idemstore.Record{Scope: scope}
		status                 string
		respStatus             sql.NullInt64
		respHeader, respBody   []byte
		createdAt              int64
		lockedAt, leaseExpires sql.NullInt64
		requestHash, reqFields []byte
	)
	err := q.QueryRowContext(ctx, querySelectKey, scope.ClientID, scope.Key).Scan(
		&rec.Method, &rec.Path, &requestHash, &reqFields, &status, &rec.Token,
		&respStatus, &respHeader, &respBody, &createdAt, &lockedAt, &leaseExpires)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("idemsqlite: read key: %w", unavailable(err))
	}
	rec.RequestHash, rec.RequestFields = requestHash, reqFields
	rec.Status = idemstore.Status(status)
	rec.CreatedAt = time.UnixMicro(createdAt).UTC()
	rec.LockedAt, rec.LeaseExpires = leaseTimes(lockedAt, leaseExpires)
	if rec.Status == idemstore.StatusCompleted {
		if rec.Response, err = record.DecodeResponse(int(respStatus.Int64), respHeader, respBody); err != nil {
			return nil, fmt.Errorf("idemsqlite: %w", err)
		}
	}
	return &rec, nil
}

// leaseTimes converts a key's locked_at and lease_expires_at. The expiry is
// left zero for a key without a holder.
func leaseTimes(lockedAt, expires sql.NullInt64) (locked, expiry time.Time) {
	if !lockedAt.Valid {
		return time.Time{}, time.Time{}
	}
	locked = time.UnixMicro(lockedAt.Int64).UTC()
	if expires.Valid {
		expiry = time.UnixMicro(expires.Int64).UTC()
	}
	return locked, expiry
}

// unavailable marks errors that mean the database could not be used now.
func unavailable(err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return errors.Join(idemstore.ErrUnavailable, err)
}

type lease struct {
	store    *Store
	scope    idemstore.Scope
	twoPhase bool
	info     idemstore.LeaseInfo
	// createdAt is the created_at of the row the lease claimed
	// (microseconds): with the token, the fence of every write the lease
	// makes to its row, since a row made anew after this one was deleted
	// starts again at token 1.
	createdAt int64
	tx        *leaseTx
	// completeFailed is set when Complete failed other than by losing the
	// lease; Release may then still free a two-phase claim.
	completeFailed bool
	// recovery is the key's recovery point, once read or saved (see
	// recovery.go).
	recovery *idemstore.Recovery
}

func (l *lease) Context(ctx context.Context) context.Context {
	return context.WithValue(ctx, txKey{}, l.tx)
}

func (l *lease) Info() idemstore.LeaseInfo { return l.info }

func (l *lease) Complete(ctx context.Context, resp *idemstore.Response) (err error) {
	tx, ended := l.tx.end()
	if ended {
		return fmt.Errorf("idemsqlite: complete key: %w", idemstore.ErrLeaseEnded)
	}
	defer l.finish()
	defer func() {
		// A two-phase claim is committed: a Release after this failure
		// frees it (see idemstore.Lease).
		if err != nil && !errors.Is(err, idemstore.ErrLeaseLost) {
			l.completeFailed = true
		}
	}()
	if tx == nil { // a two-phase handler that wrote nothing
		var err error
		if tx, err = l.store.begin(ctx); err != nil {
			return err
		}
	}
	committed := false
	defer func() {
		if !committed {
			tx.rollback()
		}
	}()
	header, err := record.EncodeHeader(resp.Header)
	if err != nil {
		return fmt.Errorf("idemsqlite: %w", err)
	}
	res, err := tx.ExecContext(ctx, queryCompleteKey, resp.StatusCode, header, record.EncodeBody(resp.Body), time.Now().UnixMicro(),
		l.scope.ClientID, l.scope.Key, l.info.Token, l.createdAt)
	if err != nil {
		return fmt.Errorf("idemsqlite: complete key: %w", unavailable(err))
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		return fmt.Errorf("idemsqlite: complete key (token %d): %w", l.info.Token, idemstore.ErrLeaseLost)
	}
	committed = true
	if err := tx.commit(); err != nil {
		return fmt.Errorf("idemsqlite: commit: %w", unavailable(err))
	}
	return nil
}

func (l *lease) Release(ctx context.Context) error {
	tx, ended := l.tx.end()
	if ended {
		if l.completeFailed && l.twoPhase {
			return l.deleteClaim(ctx)
		}
		return fmt.Errorf("idemsqlite: release key: %w", idemstore.ErrLeaseEnded)
	}
	defer l.finish()
	if tx != nil {
		if err := tx.rollback(); err != nil && !errors.Is(err, sql.ErrTxDone) {
			return fmt.Errorf("idemsqlite: roll back: %w", err)
		}
	}
	if !l.twoPhase {
		return nil // the claim was in the rolled-back transaction
	}
	return l.deleteClaim(ctx)
}

// deleteClaim deletes a two-phase claim's committed row, unless another
// request took it over.
func (l *lease) deleteClaim(ctx context.Context) error {
	// A key that passed a recovery point keeps it, with no holder; one
	// that did not is deleted.
	for _, q := range []string{queryUnlockLease, queryDeleteLease} {
		if _, err := l.store.write.ExecContext(ctx, q, l.scope.ClientID, l.scope.Key, l.info.Token, l.createdAt); err != nil {
			return fmt.Errorf("idemsqlite: release key: %w", unavailable(err))
		}
	}
	return nil
}

// finish forgets the in-flight mark of an atomic lease.
func (l *lease) finish() {
	if !l.twoPhase {
		l.store.landed(l.scope)
	}
}
