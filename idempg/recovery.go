package idempg

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem/idemstore"
)

var (
	_ idemstore.RecoveryStore = (*Store)(nil)
	_ idemstore.Leader        = (*Store)(nil)
)

// Statements of recovery points (migration 003).
const (
	// queryLoadRecovery reads the recovery point of a key that the lease
	// ($3, in the row created at $4) holds; no row means the lease is
	// lost.
	queryLoadRecovery = `SELECT recovery_point, recovery_state FROM idempotency_keys
WHERE client_id = $1 AND idempotency_key = $2 AND status = 'started' AND lease_token = $3
  AND created_at = $4::timestamptz`

	// queryCheckpoint is the fence of a phase: it saves the recovery point
	// only if the lease's token still holds the started key, and
	// idem_lease_held raises IDEM1 otherwise, which aborts the phase's
	// transaction and its writes with it.
	queryCheckpoint = `WITH saved AS (
    UPDATE idempotency_keys SET recovery_point = $4, recovery_state = $5
    WHERE client_id = $1 AND idempotency_key = $2 AND status = 'started' AND lease_token = $3
      AND created_at = $6::timestamptz
    RETURNING 1
)
SELECT idem_lease_held(count(*)) FROM saved`

	// queryUnfinished lists started keys that passed a recovery point and
	// have no live holder (locked at or before $1, or released), not past
	// retention (created after $2; NULL for never) and created at or before
	// $4 (NULL for no bound), oldest first.
	queryUnfinished = `SELECT client_id, idempotency_key, request_method, request_path, request_hash, request_fields,
       lease_token, created_at, locked_at, trace_context
FROM idempotency_keys
WHERE status = 'started' AND recovery_point IS NOT NULL
  AND (locked_at IS NULL OR locked_at <= $1::timestamptz)
  AND ($2::timestamptz IS NULL OR created_at > $2::timestamptz)
  AND ($4::timestamptz IS NULL OR created_at <= $4::timestamptz)
ORDER BY created_at
LIMIT $3`

	// queryUnfinishedStarted lists started keys of the operations in $4
	// ("METHOD /path") that passed no recovery point, created after $1 and
	// at or before $5 (NULL for no bound), whose lease expired (locked at or
	// before $2), oldest first: a range scan of the created_at index over
	// ($1, $2] only.
	queryUnfinishedStarted = `SELECT client_id, idempotency_key, request_method, request_path, request_hash, request_fields,
       lease_token, created_at, locked_at, trace_context
FROM idempotency_keys
WHERE created_at > $1::timestamptz AND created_at <= $2::timestamptz
  AND status = 'started' AND recovery_point IS NULL AND locked_at <= $2::timestamptz
  AND request_method || ' ' || request_path = ANY($4::text[])
  AND ($5::timestamptz IS NULL OR created_at <= $5::timestamptz)
ORDER BY created_at
LIMIT $3`

	queryTryLock     = `SELECT pg_try_advisory_lock($1::bigint)`
	queryTryXactLock = `SELECT pg_try_advisory_xact_lock($1::bigint)`
)

// decodeRecovery makes a Recovery of the columns.
func decodeRecovery(point *string, state []byte) (idemstore.Recovery, error) {
	if point == nil {
		return idemstore.Recovery{Point: idemstore.RecoveryStarted}, nil
	}
	r := idemstore.Recovery{Point: *point}
	if len(state) > 0 {
		if err := json.Unmarshal(state, &r.State); err != nil {
			return idemstore.Recovery{}, fmt.Errorf("idempg: decode recovery state: %w", err)
		}
	}
	return r, nil
}

// Unfinished implements [idemstore.RecoveryStore], for the resumer: the keys
// past a recovery point through the partial index of migration 003, and,
// for p.Started, the keys that passed none within p's bounded range of
// creation times.
func (s *Store) Unfinished(ctx context.Context, p idemstore.UnfinishedParams) ([]*idemstore.Record, error) {
	var cutoff *time.Time
	if p.Retention > 0 {
		c := p.Now.Add(-p.Retention)
		cutoff = &c
	}
	conn, err := s.acquire(ctx, "list unfinished keys")
	if err != nil {
		return nil, err
	}
	defer conn.Release()
	expired := p.Now.Add(-p.LockTimeout)
	var until *time.Time
	if !p.CreatedUntil.IsZero() {
		until = &p.CreatedUntil
	}
	out, err := listUnfinished(ctx, conn, queryUnfinished, expired, cutoff, p.Limit, until)
	if err != nil || len(p.Started) == 0 {
		return out, err
	}
	after := p.StartedAfter
	if cutoff != nil && cutoff.After(after) {
		after = *cutoff
	}
	started, err := listUnfinished(ctx, conn, queryUnfinishedStarted, after, expired, p.Limit, p.Started, until)
	if err != nil {
		return nil, err
	}
	out = append(out, started...)
	slices.SortStableFunc(out, func(a, b *idemstore.Record) int { return a.CreatedAt.Compare(b.CreatedAt) })
	return out[:min(len(out), p.Limit)], nil
}

// listUnfinished runs one of the resumer's listings.
func listUnfinished(ctx context.Context, conn *pgxpool.Conn, query string, args ...any) ([]*idemstore.Record, error) {
	rows, err := conn.Query(ctx, query, args...)
	if err != nil {
		return nil, wrapErr(ctx, "list unfinished keys", err)
	}
	var out []*idemstore.Record
	for rows.Next() {
		rec := &idemstore.Record{Status: idemstore.StatusInFlight}
		var (
			lockedAt *time.Time
			trace    *string
		)
		if err := rows.Scan(&rec.Scope.ClientID, &rec.Scope.Key, &rec.Method, &rec.Path, &rec.RequestHash,
			&rec.RequestFields, &rec.Token, &rec.CreatedAt, &lockedAt, &trace); err != nil {
			rows.Close()
			return nil, wrapErr(ctx, "list unfinished keys", err)
		}
		rec.CreatedAt = rec.CreatedAt.UTC()
		if trace != nil {
			rec.TraceContext = *trace
		}
		if lockedAt != nil {
			rec.LockedAt = lockedAt.UTC()
		}
		out = append(out, rec)
	}
	if err := rows.Err(); err != nil {
		return nil, wrapErr(ctx, "list unfinished keys", err)
	}
	return out, nil
}

// TryLead implements [idemstore.Leader] with a session-level advisory lock,
// taken without waiting, on a connection that the lock keeps until unlock:
// one holder in the database at a time, and a holder whose process dies
// loses it with its session. With Config.TransactionPooling the lock is
// transaction-scoped instead, in a transaction held open until unlock. The
// resumer takes it for each pass. With Config.NoAdvisoryLocks it is a
// lease row in idem_leader_leases instead, renewed while held and deleted
// by unlock; a holder that dies leaves it to expire after
// Config.LeaderLease.
func (s *Store) TryLead(ctx context.Context, name string) (unlock func(), held bool, err error) {
	if s.cfg.NoAdvisoryLocks {
		return s.tryLeadByRow(ctx, name)
	}
	if s.cfg.TransactionPooling {
		return s.tryLeadInTx(ctx, name)
	}
	conn, err := s.acquire(ctx, "take lock")
	if err != nil {
		return nil, false, err
	}
	key := leadKey(name)
	if err := conn.QueryRow(ctx, queryTryLock, key).Scan(&held); err != nil {
		closeConn(conn) // the lock may be held: only closing is sure to free it
		return nil, false, wrapErr(ctx, "take lock", err)
	}
	if !held {
		conn.Release()
		return nil, false, nil
	}
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
		defer cancel()
		if _, err := conn.Exec(ctx, queryUnlock, key); err != nil {
			closeConn(conn)
			return
		}
		conn.Release()
	}, true, nil
}

// tryLeadInTx is TryLead behind a pooler in transaction mode, where a
// session-level lock would stay on whichever server connection took it: a
// transaction-scoped lock in a transaction that stays open, pinning its
// server connection, until unlock rolls it back.
func (s *Store) tryLeadInTx(ctx context.Context, name string) (unlock func(), held bool, err error) {
	conn, err := s.acquire(ctx, "take lock")
	if err != nil {
		return nil, false, err
	}
	tx, err := conn.Begin(ctx)
	if err == nil {
		err = tx.QueryRow(ctx, queryTryXactLock, leadKey(name)).Scan(&held)
	}
	if err != nil || !held {
		rollback(ctx, tx)
		conn.Release()
		if err != nil {
			return nil, false, wrapErr(ctx, "take lock", err)
		}
		return nil, false, nil
	}
	return func() {
		rollback(context.Background(), tx)
		conn.Release()
	}, true, nil
}

// leadKey is the advisory lock of a leader lock's name, in a space of its
// own: no scope's lockKey begins with the same prefix.
func leadKey(name string) int64 {
	sum := sha256.Sum256([]byte("idem-lead-v1\x00" + name))
	return int64(binary.BigEndian.Uint64(sum[:8]))
}
