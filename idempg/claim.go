package idempg

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem/idemstore"
)

// claimAttempts bounds how often a claim starts over because the key changed
// between its read and its write. Each attempt is a few round trips and never
// waits for another request.
const claimAttempts = 3

// claimConflictReruns bounds, apart from claimAttempts, how often a claim
// whose transaction failed on a serialization failure or a deadlock
// (SQLSTATE 40001, 40P01) runs again, after a short jittered pause that
// grows with each: frequent under SERIALIZABLE, the default isolation of
// CockroachDB and of some other distributed databases.
const claimConflictReruns = 10

// claimStep is how one step of a claim ended.
type claimStep struct {
	next   nextStep
	result idemstore.ClaimResult // the answer, when next is stepAnswer
	seen   *idemstore.Record     // the key that the claim may have, when next is stepClaim; nil for none
}

// nextStep is what Claim does after a step.
type nextStep int

const (
	// stepAnswer: the claim is decided; return the step's result.
	stepAnswer nextStep = iota
	// stepReadAgain: the step claimed nothing, or the key changed under
	// it; read the key and try again.
	stepReadAgain
	// stepClaim: the claim may have the key (seen, nil for none: see
	// readKey); insert, replace or take it over in the claim's
	// transaction.
	stepClaim
	// stepConflict: the claim's transaction failed on a conflict; run it
	// again, within claimConflictReruns.
	stepConflict
)

func answer(res idemstore.ClaimResult) claimStep { return claimStep{next: stepAnswer, result: res} }

func answerLease(l *lease) claimStep { return answer(idemstore.ClaimResult{Lease: l}) }

func answerRecord(rec *idemstore.Record) claimStep { return answer(idemstore.ClaimResult{Record: rec}) }

func readAgain() claimStep { return claimStep{next: stepReadAgain} }

// Claim implements [idemstore.Store]. How each mode and isolation level claims
// a key, and in how many round trips, is told in the package documentation
// (Round trips, Atomic mode, Two-phase mode).
//
// A key in flight whose row is not visible is answered with a Record whose
// Status is idemstore.StatusInFlight and whose request hash is unknown.
func (s *Store) Claim(ctx context.Context, p idemstore.ClaimParams) (idemstore.ClaimResult, error) {
	if err := ctx.Err(); err != nil {
		return idemstore.ClaimResult{}, fmt.Errorf("idempg: claim: %w", err)
	}
	if p.Speculative && !p.TwoPhase && s.deferredClaims {
		return s.claimDeferred(ctx, &p)
	}
	if p.TwoPhase {
		// Most keys are new: try to insert first, and read the key only if
		// that claimed nothing.
		step, err := s.claimTwoPhaseNew(ctx, p)
		if err != nil || step.next == stepAnswer {
			return step.result, err
		}
	}
	if p.Speculative && !p.TwoPhase && s.cfg.NoAdvisoryLocks {
		// A row claim of a key that the middleware has not seen, most
		// likely new: insert first, in the claim's transaction, and read
		// the key only if that claimed nothing.
		step, err := s.claimTx(ctx, p, nil)
		if err != nil || step.next == stepAnswer {
			return step.result, err
		}
	}
	conflicts := 0
	for attempt := 0; attempt < claimAttempts; {
		step, err := s.claimOnce(ctx, p)
		if err != nil || step.next == stepAnswer {
			return step.result, err
		}
		if step.next == stepConflict && conflicts < claimConflictReruns {
			conflicts++
			if err := conflictPause(ctx, conflicts); err != nil {
				return idemstore.ClaimResult{}, err
			}
			continue
		}
		attempt++
	}
	// The key changed under every attempt: other requests are working on it.
	return idemstore.ClaimResult{Record: inFlight(p.Scope)}, nil
}

// claimOnce reads the key and claims it if it may: a two-phase claim by
// claimStarted; an atomic one by claimSession when it holds the key by a
// session-level lock, otherwise by a read without a lock (readKey) and
// then claimTx.
func (s *Store) claimOnce(ctx context.Context, p idemstore.ClaimParams) (claimStep, error) {
	if p.TwoPhase {
		return s.claimStarted(ctx, p)
	}
	var (
		step claimStep
		err  error
	)
	if s.sessionClaims() {
		step, err = s.claimSession(ctx, p)
	} else {
		step, err = s.readKey(ctx, p)
	}
	if err != nil || step.next != stepClaim {
		return step, err
	}
	return s.claimTx(ctx, p, step.seen)
}

// readKey reads the key of p's claim without a lock (probe). Its step
// answers from the key unless p may have it (idemstore.ClaimParams.MayReplace),
// which the claim statement checks again; otherwise it asks for the claim
// (stepClaim), with seen nil when there is no key.
func (s *Store) readKey(ctx context.Context, p idemstore.ClaimParams) (claimStep, error) {
	rec, err := s.probe(ctx, p.Scope)
	switch {
	case err != nil:
		return claimStep{}, err
	case rec != nil && !p.MayReplace(rec):
		return answerRecord(rec), nil
	}
	return claimStep{next: stepClaim, seen: rec}, nil
}

// inFlight is the answer for a key whose holder's transaction is open: its
// request is not visible, so only the status is known.
func inFlight(scope idemstore.Scope) *idemstore.Record {
	return &idemstore.Record{Scope: scope, Status: idemstore.StatusInFlight}
}

// probe is the fast path: it reads a key on a pooled connection, nil when
// there is none, with no lock: a completed row never changes until it
// expires, and whether a key is in flight is decided by the claim, which
// takes the lock. A read is safe to repeat, so one that failed because the
// pooled connection had died while idle (the server restarted, say) is
// tried once more on another.
func (s *Store) probe(ctx context.Context, scope idemstore.Scope) (*idemstore.Record, error) {
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
// expired), with Config.ClaimLockTimeout as the transaction's lock_timeout
// from then on. With Config.NoAdvisoryLocks the statement takes no
// advisory lock, and the key's row alone holds it. It returns whether the
// claim is a takeover.
func (s *Store) claimStatement(b *pgx.Batch, p idemstore.ClaimParams, seen *idemstore.Record) (qq *pgx.QueuedQuery, takeover bool) {
	lock, lockTimeout := lockKey(p.Scope), s.claimLockTimeout
	queryClaimInsert, queryClaimReplace, queryClaimTakeOver := queryClaimInsert, queryClaimReplace, queryClaimTakeOver
	if s.cfg.NoAdvisoryLocks {
		queryClaimInsert, queryClaimReplace, queryClaimTakeOver = queryRowClaimInsert, queryRowClaimReplace, queryRowClaimTakeOver
	}
	fields := p.RequestFields
	if len(fields) == 0 {
		fields = nil
	}
	switch {
	case seen == nil && s.typedArgs:
		return b.Queue(queryClaimInsert, claimInsertArgsOf(&p, lock, lockTimeout, fields)...), false
	case seen == nil:
		return b.Queue(queryClaimInsert, lock, p.Scope.ClientID, p.Scope.Key, p.Method, p.Path,
			p.RequestHash, fields, p.Now, lockTimeout, leaseExpires(p), traceContext(p)), false
	case idemstore.Expired(seen.CreatedAt, p.Now, p.Retention):
		return b.Queue(queryClaimReplace, lock, p.Scope.ClientID, p.Scope.Key, p.Method, p.Path,
			p.RequestHash, fields, p.Now, seen.Token, seen.CreatedAt, lockTimeout, leaseExpires(p), traceContext(p)), false
	default:
		return b.Queue(queryClaimTakeOver, lock, p.Scope.ClientID, p.Scope.Key, p.Now, seen.Token, lockTimeout, leaseExpires(p), traceContext(p)), true
	}
}

// traceContext is the trace context that p's claim records: NULL when it
// has none.
func traceContext(p idemstore.ClaimParams) *string {
	if p.TraceContext == "" {
		return nil
	}
	t := p.TraceContext // not &p.TraceContext, which would move p to the heap
	return &t
}

// leaseExpires is the lease expiry that p's claim records: NULL when it
// has none.
func leaseExpires(p idemstore.ClaimParams) *time.Time {
	if t := p.LeaseExpires(); !t.IsZero() {
		return &t
	}
	return nil
}

// claimRow is what the claim statement answered. Its nullable columns are
// pgtype's value types, which pgx scans into without allocating (see
// scanKey).
type claimRow struct {
	acquired bool               // the advisory lock was free
	token    pgtype.Int8        // the new lease's token; NULL when no row changed
	ctid     pgtype.TID         // where the claimed row version is
	created  pgtype.Timestamptz // the claimed row's created_at; NULL when no row changed
}

// createdOf returns the claimed row's created_at, zero when the claim
// statement answered none.
func createdOf(out claimRow) time.Time {
	if !out.created.Valid {
		return time.Time{}
	}
	return out.created.Time
}

// scanFrom has the claim statement's row, queued as qq, scanned into out.
func (out *claimRow) scanFrom(qq *pgx.QueuedQuery) {
	qq.QueryRow(func(row pgx.Row) error { return row.Scan(&out.acquired, &out.token, &out.ctid, &out.created) })
}

// claimed reports whether the claim statement claimed the key.
func (out claimRow) claimed() bool { return out.acquired && out.token.Valid }

// unclaimed is the step of a claim statement that claimed nothing: the key
// is in flight if its lock was taken, else its row changed since it was
// read, and Claim reads it again.
func (out claimRow) unclaimed(p idemstore.ClaimParams) claimStep {
	if !out.acquired {
		return answerRecord(inFlight(p.Scope))
	}
	return readAgain()
}

// sendClaimTx sends b, the transaction of a claim (claimTx, claimStarted),
// on conn, and returns it. When the round trip fails, the transaction is
// rolled back, and step, with ok false, is what Claim does next.
func sendClaimTx(ctx context.Context, conn *pgxpool.Conn, b *pgx.Batch, p idemstore.ClaimParams) (tx pgx.Tx, ok bool, step claimStep, err error) {
	br := conn.SendBatch(ctx, b)
	tx = br.Tx()
	err = br.Close()
	if err == nil {
		return tx, true, claimStep{}, nil
	}
	rollback(ctx, tx)
	switch {
	case ctx.Err() != nil:
		return nil, false, claimStep{}, wrapErr(ctx, "claim", err)
	case pgCode(err) == codeLockNotAvailable:
		// A statement that does not take the advisory lock holds the row
		// for a moment, such as a response being stored right now.
		return nil, false, answerRecord(inFlight(p.Scope)), nil
	case isConflict(err):
		// A serializable claim whose snapshot predates the row, or two
		// claims of one key at once without advisory locks.
		return nil, false, claimStep{next: stepConflict}, nil
	}
	return nil, false, claimStep{}, wrapErr(ctx, "claim", err)
}

// conflictPause waits before the nth rerun of a claim after a conflict: a
// random time up to 1 ms << n, at most 50 ms, so that the claims that
// collided do not collide again.
func conflictPause(ctx context.Context, n int) error {
	limit := min(time.Millisecond<<n, 50*time.Millisecond)
	t := time.NewTimer(rand.N(limit) + 1)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return wrapErr(ctx, "claim", ctx.Err())
	case <-t.C:
		return nil
	}
}
