package idemsqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/idemkit/idem/idemstore"
)

var _ idemstore.RecoveryStore = (*Store)(nil)

// Statements of recovery points (migration 003).
const (
	queryLoadRecovery = `SELECT recovery_point, recovery_state FROM idempotency_keys
WHERE client_id = ? AND idempotency_key = ? AND status = 'started' AND lease_token = ? AND created_at = ?`

	// queryCheckpoint saves a recovery point only if the lease's token
	// still holds the started key, in the row the lease claimed (its
	// created_at); the caller checks that it changed one row.
	queryCheckpoint = `UPDATE idempotency_keys SET recovery_point = ?, recovery_state = ?
WHERE client_id = ? AND idempotency_key = ? AND status = 'started' AND lease_token = ? AND created_at = ?`

	// queryUnfinished lists started keys that passed a recovery point and
	// have no live holder (locked at or before the first parameter, or
	// released), not past retention (created after the second; NULL for
	// never) and created at or before the fourth (NULL for no bound),
	// oldest first.
	queryUnfinished = `SELECT client_id, idempotency_key, request_method, request_path, request_hash, request_fields,
       lease_token, created_at, locked_at, trace_context
FROM idempotency_keys
WHERE status = 'started' AND recovery_point IS NOT NULL
  AND (locked_at IS NULL OR locked_at <= ?1)
  AND (?2 IS NULL OR created_at > ?2)
  AND (?4 IS NULL OR created_at <= ?4)
ORDER BY created_at
LIMIT ?3`

	// queryUnfinishedStarted lists started keys of the operations in the
	// JSON array ?4 ("METHOD /path") that passed no recovery point,
	// created after ?1 and at or before ?5 (NULL for no bound), whose
	// lease expired (locked at or before ?2), oldest first: a range scan of
	// the created_at index over (?1, ?2] only.
	queryUnfinishedStarted = `SELECT client_id, idempotency_key, request_method, request_path, request_hash, request_fields,
       lease_token, created_at, locked_at, trace_context
FROM idempotency_keys
WHERE created_at > ?1 AND created_at <= ?2
  AND status = 'started' AND recovery_point IS NULL AND locked_at <= ?2
  AND request_method || ' ' || request_path IN (SELECT value FROM json_each(?4))
  AND (?5 IS NULL OR created_at <= ?5)
ORDER BY created_at
LIMIT ?3`
)

// Unfinished implements [idemstore.RecoveryStore], for the resumer: the keys
// past a recovery point through the partial index of migration 003, and,
// for p.Started, the keys that passed none within p's bounded range of
// creation times.
func (s *Store) Unfinished(ctx context.Context, p idemstore.UnfinishedParams) ([]*idemstore.Record, error) {
	var cutoff any
	if p.Retention > 0 {
		cutoff = p.Now.Add(-p.Retention).UnixMicro()
	}
	expired := p.Now.Add(-p.LockTimeout).UnixMicro()
	var until any
	if !p.CreatedUntil.IsZero() {
		until = p.CreatedUntil.UnixMicro()
	}
	out, err := s.listUnfinished(ctx, queryUnfinished, expired, cutoff, p.Limit, until)
	if err != nil || len(p.Started) == 0 {
		return out, err
	}
	after := p.StartedAfter
	if p.Retention > 0 && p.Now.Add(-p.Retention).After(after) {
		after = p.Now.Add(-p.Retention)
	}
	ops, err := json.Marshal(p.Started)
	if err != nil {
		return nil, fmt.Errorf("idemsqlite: list unfinished keys: %w", err)
	}
	started, err := s.listUnfinished(ctx, queryUnfinishedStarted, after.UnixMicro(), expired, p.Limit, string(ops), until)
	if err != nil {
		return nil, err
	}
	out = append(out, started...)
	slices.SortStableFunc(out, func(a, b *idemstore.Record) int { return a.CreatedAt.Compare(b.CreatedAt) })
	return out[:min(len(out), p.Limit)], nil
}

// listUnfinished runs one of the resumer's listings.
func (s *Store) listUnfinished(ctx context.Context, query string, args ...any) ([]*idemstore.Record, error) {
	rows, err := s.read.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("idemsqlite: list unfinished keys: %w", unavailable(err))
	}
	defer rows.Close()
	var out []*idemstore.Record
	for rows.Next() {
		rec := &idemstore.Record{Status: idemstore.StatusInFlight}
		var (
			createdAt int64
			lockedAt  sql.NullInt64
			trace     sql.NullString
		)
		if err := rows.Scan(&rec.Scope.ClientID, &rec.Scope.Key, &rec.Method, &rec.Path, &rec.RequestHash,
			&rec.RequestFields, &rec.Token, &createdAt, &lockedAt, &trace); err != nil {
			return nil, fmt.Errorf("idemsqlite: list unfinished keys: %w", unavailable(err))
		}
		rec.CreatedAt, rec.TraceContext = time.UnixMicro(createdAt).UTC(), trace.String
		if lockedAt.Valid {
			rec.LockedAt = time.UnixMicro(lockedAt.Int64).UTC()
		}
		out = append(out, rec)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("idemsqlite: list unfinished keys: %w", unavailable(err))
	}
	return out, nil
}
