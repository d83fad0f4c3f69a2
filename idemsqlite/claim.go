package idemsqlite

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/internal/record"
)

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
		// A COMMIT refused with SQLITE_BUSY, or for a deferred foreign key,
		// leaves the transaction open on the connection: roll it back, so
		// that nothing of it can commit later and the error keeps meaning
		// "not committed". modernc.org/sqlite does it itself since v1.46.1
		// (this module requires a later one), and then, like any other
		// failed COMMIT, which has rolled back already, this does nothing;
		// it stays for a driver that does not.
		// TestRefusedCommitCommitsNothingLater fails when neither does.
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

	if p.TwoPhase {
		return s.claimTwoPhase(ctx, p)
	}
	return s.claimAtomic(ctx, p)
}

// landed forgets a scope's in-flight mark once the database shows the truth:
// a two-phase claim's once it committed, an atomic one's once its lease
// ended, and either's once it claimed nothing.
func (s *Store) landed(scope idemstore.Scope) {
	s.mu.Lock()
	delete(s.inflight, scope)
	s.mu.Unlock()
}

// claimKey begins the claim's transaction and, in it, claims the key that
// p names: it inserts the key's row (there is none, or the one there is
// past retention) or takes it over (its lease expired: the token grows by
// one). It returns the transaction, still open, and the lease of the
// claimed row, which claimAtomic and claimTwoPhase make theirs; when p may
// not have the key, it rolls back and returns no lease and the key's
// record.
func (s *Store) claimKey(ctx context.Context, p idemstore.ClaimParams) (*writeTx, *lease, *idemstore.Record, error) {
	tx, err := s.begin(ctx)
	if err != nil {
		return nil, nil, nil, err
	}
	keep := false
	defer func() {
		if !keep {
			tx.rollback()
		}
	}()
	rec, err := load(ctx, tx, p.Scope)
	if err != nil {
		return nil, nil, nil, err
	}
	l := &lease{store: s, scope: p.Scope, info: idemstore.LeaseInfo{Token: 1}}
	switch {
	case rec == nil || idemstore.Expired(rec.CreatedAt, p.Now, p.Retention):
		if rec != nil {
			l.info.Token = rec.Token + 1
		}
		now := p.Now.UnixMicro()
		l.createdAt = now
		if _, err := tx.ExecContext(ctx, queryInsertKey, p.Scope.ClientID, p.Scope.Key, p.Method, p.Path,
			p.RequestHash, nullBytes(p.RequestFields), l.info.Token, now, now, leaseExpires(p), nullString(p.TraceContext)); err != nil {
			return nil, nil, nil, fmt.Errorf("idemsqlite: insert key: %w", unavailable(err))
		}
	case p.CanTakeOver(rec):
		res, err := tx.ExecContext(ctx, queryTakeOverKey, p.Now.UnixMicro(), leaseExpires(p), nullString(p.TraceContext), p.Scope.ClientID, p.Scope.Key, rec.Token)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("idemsqlite: take over key: %w", unavailable(err))
		}
		// The write transaction serialises claims, so the row is the one
		// just read; were it not, another claim took the key over first:
		// this one answers with the key as it is now, never with a lease
		// on a token another holder has.
		n, err := res.RowsAffected()
		if err != nil {
			return nil, nil, nil, fmt.Errorf("idemsqlite: take over key: %w", unavailable(err))
		}
		if n != 1 {
			rec, err := load(ctx, tx, p.Scope)
			if err == nil && rec == nil {
				err = fmt.Errorf("idemsqlite: take over key: the key at token %d is gone", rec.Token)
			}
			return nil, nil, rec, err
		}
		l.info = idemstore.LeaseInfo{Token: rec.Token + 1, TakenOver: true}
		l.createdAt = rec.CreatedAt.UnixMicro()
	default:
		return nil, nil, rec, nil
	}
	l.info.CreatedAt = time.UnixMicro(l.createdAt).UTC()
	keep = true
	return tx, l, nil, nil
}

// leaseExpires is the lease expiry that p's claim records: NULL when it
// has none.
func leaseExpires(p idemstore.ClaimParams) any {
	if t := p.LeaseExpires(); !t.IsZero() {
		return t.UnixMicro()
	}
	return nil
}

func nullString(s string) any {
	if s == "" {
		return nil
	}
	return s
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
		traceContext           sql.NullString
	)
	err := q.QueryRowContext(ctx, querySelectKey, scope.ClientID, scope.Key).Scan(
		&rec.Method, &rec.Path, &requestHash, &reqFields, &status, &rec.Token,
		&respStatus, &respHeader, &respBody, &createdAt, &lockedAt, &leaseExpires, &traceContext)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("idemsqlite: read key: %w", unavailable(err))
	}
	rec.RequestHash, rec.RequestFields, rec.TraceContext = requestHash, reqFields, traceContext.String
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
