package idemmysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/internal/record"
)

// claimAttempts bounds how often a claim starts over because the key changed
// between its read and its write. Each attempt is a few round trips and never
// waits for another request.
const claimAttempts = 3

// Claim implements [idemstore.Store]. How each mode claims a key, and in
// how many round trips, is told in the package documentation.
//
// A key in flight whose row is not visible (an atomic claim's, uncommitted)
// is answered with a Record whose Status is idemstore.StatusInFlight and
// whose request hash is unknown.
func (s *Store) Claim(ctx context.Context, p idemstore.ClaimParams) (idemstore.ClaimResult, error) {
	if err := ctx.Err(); err != nil {
		return idemstore.ClaimResult{}, fmt.Errorf("idemmysql: claim: %w", err)
	}
	if p.TwoPhase || p.Speculative {
		// Most keys are new: insert first, and read the key only if that
		// found one. The middleware asks for a speculative atomic claim
		// unless the key is likely to exist (it claimed it lately), which
		// is read first.
		res, again, err := s.claimNew(ctx, p)
		if err != nil || !again {
			return res, err
		}
	}
	for range claimAttempts {
		rec, err := load(ctx, s.db, p.Scope)
		if err != nil {
			return idemstore.ClaimResult{}, err
		}
		if rec != nil && !p.MayReplace(rec) {
			return idemstore.ClaimResult{Record: rec}, nil
		}
		var (
			res   idemstore.ClaimResult
			again bool
		)
		res, again, err = s.claimKey(ctx, p, rec)
		if err != nil || !again {
			return res, err
		}
	}
	// The key changed under every attempt: other requests are working on it.
	return idemstore.ClaimResult{Record: inFlight(p.Scope)}, nil
}

// claimNew claims p's key as a new one, without reading it first.
func (s *Store) claimNew(ctx context.Context, p idemstore.ClaimParams) (idemstore.ClaimResult, bool, error) {
	return s.claimKey(ctx, p, nil)
}

// claimKey claims p's key in p's mode, seen being the key as read (nil
// for none).
func (s *Store) claimKey(ctx context.Context, p idemstore.ClaimParams, seen *idemstore.Record) (idemstore.ClaimResult, bool, error) {
	if p.TwoPhase {
		return s.claimTwoPhase(ctx, p, seen)
	}
	return s.claimAtomic(ctx, p, seen)
}

// inFlight is the answer for a key whose holder's transaction is open: its
// request is not visible, so only the status is known.
func inFlight(scope idemstore.Scope) *idemstore.Record {
	return &idemstore.Record{Scope: scope, Status: idemstore.StatusInFlight}
}

// execer is a pool, connection or transaction.
type execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// claimStatement claims the key that p names on ex, without waiting for
// a row lock (noWait): it inserts the key's row (seen is nil), replaces it
// (seen is past retention) or takes it over (seen's lease expired). It
// returns the new lease (claimed true), again true when the key changed
// since it was read, and an in-flight record when another transaction
// holds the row. The lease is returned as a value, which the caller's
// lease of its mode embeds: one allocation for both.
func (s *Store) claimStatement(ctx context.Context, ex execer, p idemstore.ClaimParams, seen *idemstore.Record) (l lease, claimed bool, rec *idemstore.Record, again bool, err error) {
	now := p.Now.UnixMicro()
	l = lease{store: s, scope: p.Scope, createdAt: now, info: idemstore.LeaseInfo{Token: 1}}
	nowArg := any(now) // boxed once for the two columns it goes to
	var res sql.Result
	switch {
	case seen == nil:
		res, err = ex.ExecContext(ctx, s.noWait(queryInsertKey), p.Scope.ClientID, p.Scope.Key, p.Method, p.Path,
			p.RequestHash, nullBytes(p.RequestFields), nowArg, nowArg, leaseExpires(p), nullString(p.TraceContext))
	case idemstore.Expired(seen.CreatedAt, p.Now, p.Retention):
		l.info.Token = seen.Token + 1
		res, err = ex.ExecContext(ctx, s.noWait(queryReplaceKey), p.Method, p.Path, p.RequestHash, nullBytes(p.RequestFields),
			nowArg, nowArg, leaseExpires(p), nullString(p.TraceContext), p.Scope.ClientID, p.Scope.Key, seen.Token, seen.CreatedAt.UnixMicro())
	default: // p.CanTakeOver(seen), since the caller asked p.MayReplace
		l.createdAt = seen.CreatedAt.UnixMicro()
		l.info = idemstore.LeaseInfo{Token: seen.Token + 1, TakenOver: true}
		res, err = ex.ExecContext(ctx, s.noWait(queryTakeOverKey), nowArg, leaseExpires(p), nullString(p.TraceContext),
			p.Scope.ClientID, p.Scope.Key, seen.Token, l.createdAt)
	}
	switch n := errNumber(err); {
	case err == nil:
	case n == errDupEntry || n == errDeadlock:
		return lease{}, false, nil, true, nil
	case n == errLockWaitTimeout:
		return lease{}, false, inFlight(p.Scope), false, nil
	default:
		return lease{}, false, nil, false, fmt.Errorf("idemmysql: claim: %w", unavailable(err))
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		return lease{}, false, nil, true, nil
	}
	l.info.CreatedAt = time.UnixMicro(l.createdAt).UTC()
	return l, true, nil, false, nil
}

// claimAtomic is the claim of ModeAtomic: it begins the lease's
// transaction on a connection of its own and claims the key in it; the
// transaction stays open for the handler and holds the claimed row, which
// no other transaction sees until it commits.
func (s *Store) claimAtomic(ctx context.Context, p idemstore.ClaimParams, seen *idemstore.Record) (idemstore.ClaimResult, bool, error) {
	lt, err := s.beginTx(ctx)
	if err != nil {
		return idemstore.ClaimResult{}, false, err
	}
	l, claimed, rec, again, err := s.claimStatement(ctx, lt.tx, p, seen)
	if !claimed {
		lt.rollback()
		return idemstore.ClaimResult{Record: rec}, again, err
	}
	l.tx = lt
	return idemstore.ClaimResult{Lease: &atomicLease{lease: l}}, false, nil
}

// claimTwoPhase is the claim of ModeTwoPhase: one statement, committed at
// once (autocommit); the handler's transaction begins on its first
// TxFromContext.
func (s *Store) claimTwoPhase(ctx context.Context, p idemstore.ClaimParams, seen *idemstore.Record) (idemstore.ClaimResult, bool, error) {
	l, claimed, rec, again, err := s.claimStatement(ctx, s.db, p, seen)
	if !claimed {
		return idemstore.ClaimResult{Record: rec}, again, err
	}
	l.tx = &leaseTx{store: s}
	return idemstore.ClaimResult{Lease: &twoPhaseLease{lease: l}}, false, nil
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

type querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// load reads a key's record; nil when there is none.
func load(ctx context.Context, q querier, scope idemstore.Scope) (*idemstore.Record, error) {
	rec := idemstore.Record{Scope: scope}
	err := scanKey(q.QueryRowContext(ctx, querySelectKey, scope.ClientID, scope.Key).Scan, &rec)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("idemmysql: read key: %w", unavailable(err))
	}
	return &rec, nil
}

// scanKey scans keyColumns into rec.
func scanKey(scan func(...any) error, rec *idemstore.Record) error {
	var (
		status                 string
		respStatus             sql.NullInt64
		respHeader, respBody   []byte
		createdAt              int64
		lockedAt, leaseExpires sql.NullInt64
		trace                  sql.NullString
	)
	if err := scan(&rec.Method, &rec.Path, &rec.RequestHash, &rec.RequestFields, &status, &rec.Token,
		&respStatus, &respHeader, &respBody, &createdAt, &lockedAt, &leaseExpires, &trace); err != nil {
		return err
	}
	rec.TraceContext = trace.String
	rec.Status = idemstore.Status(status)
	rec.CreatedAt = time.UnixMicro(createdAt).UTC()
	rec.LockedAt, rec.LeaseExpires = leaseTimes(lockedAt, leaseExpires)
	if rec.Status == idemstore.StatusCompleted {
		resp, err := record.DecodeResponse(int(respStatus.Int64), respHeader, respBody)
		if err != nil {
			return err
		}
		rec.Response = resp
	}
	return nil
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
