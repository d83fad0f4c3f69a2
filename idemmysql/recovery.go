package idemmysql

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/idemkit/idem/idemstore"
)

var _ idemstore.RecoveryStore = (*Store)(nil)

// Statements of recovery points.
const (
	queryLoadRecovery = `SELECT recovery_point, recovery_state FROM idempotency_keys
WHERE client_id = ? AND idempotency_key = ? AND status = 'started' AND lease_token = ? AND created_at = ?`

	// queryCheckpoint saves a recovery point only if the lease's token
	// still holds the started key, in the row the lease claimed (its
	// created_at); the caller checks that it matched one row (the
	// connection counts found rows, not changed ones).
	queryCheckpoint = `UPDATE idempotency_keys SET recovery_point = ?, recovery_state = ?
WHERE client_id = ? AND idempotency_key = ? AND status = 'started' AND lease_token = ? AND created_at = ?`

	unfinishedColumns = `client_id, idempotency_key, request_method, request_path, request_hash, request_fields,
       lease_token, created_at, locked_at, trace_context`

	// queryUnfinished lists started keys that passed a recovery point and
	// have no live holder (locked at or before the first parameter, or
	// released), created after the second (retention) and at or before
	// the third, oldest first.
	queryUnfinished = `SELECT ` + unfinishedColumns + `
FROM idempotency_keys
WHERE status = 'started' AND recovery_point IS NOT NULL
  AND (locked_at IS NULL OR locked_at <= ?)
  AND created_at > ? AND created_at <= ?
ORDER BY created_at
LIMIT ?`

	// queryUnfinishedStarted lists started keys of the operations named
	// (method, path) in its IN list that passed no recovery point,
	// created after the first parameter and at or before the second and
	// the third, whose lease expired (locked at or before the second),
	// oldest first.
	queryUnfinishedStarted = `SELECT ` + unfinishedColumns + `
FROM idempotency_keys
WHERE status = 'started' AND created_at > ? AND created_at <= ? AND created_at <= ?
  AND recovery_point IS NULL AND locked_at <= ?
  AND (request_method, request_path) IN (%s)
ORDER BY created_at
LIMIT ?`
)

// noBound is a created_at that no key reaches.
const noBound = int64(1<<63 - 1)

// Unfinished implements [idemstore.RecoveryStore], for the resumer: the keys
// past a recovery point, and, for p.Started, the keys that passed none
// within p's bounded range of creation times.
func (s *Store) Unfinished(ctx context.Context, p idemstore.UnfinishedParams) ([]*idemstore.Record, error) {
	cutoff := int64(-1 << 63)
	if p.Retention > 0 {
		cutoff = p.Now.Add(-p.Retention).UnixMicro()
	}
	expired := p.Now.Add(-p.LockTimeout).UnixMicro()
	until := noBound
	if !p.CreatedUntil.IsZero() {
		until = p.CreatedUntil.UnixMicro()
	}
	out, err := s.listUnfinished(ctx, queryUnfinished, expired, cutoff, until, p.Limit)
	if err != nil || len(p.Started) == 0 {
		return out, err
	}
	after := p.StartedAfter
	if p.Retention > 0 && p.Now.Add(-p.Retention).After(after) {
		after = p.Now.Add(-p.Retention)
	}
	args := []any{after.UnixMicro(), expired, until, expired}
	var ops []string
	for _, op := range p.Started {
		method, path, ok := strings.Cut(op, " ")
		if !ok {
			continue
		}
		ops = append(ops, "(?, ?)")
		args = append(args, method, path)
	}
	if len(ops) == 0 {
		return out, nil
	}
	args = append(args, p.Limit)
	started, err := s.listUnfinished(ctx, fmt.Sprintf(queryUnfinishedStarted, strings.Join(ops, ", ")), args...)
	if err != nil {
		return nil, err
	}
	out = append(out, started...)
	slices.SortStableFunc(out, func(a, b *idemstore.Record) int { return a.CreatedAt.Compare(b.CreatedAt) })
	return out[:min(len(out), p.Limit)], nil
}

// listUnfinished runs one of the resumer's listings.
func (s *Store) listUnfinished(ctx context.Context, query string, args ...any) ([]*idemstore.Record, error) {
	rows, err := s.db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("idemmysql: list unfinished keys: %w", unavailable(err))
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
			return nil, fmt.Errorf("idemmysql: list unfinished keys: %w", unavailable(err))
		}
		rec.CreatedAt, rec.TraceContext = time.UnixMicro(createdAt).UTC(), trace.String
		if lockedAt.Valid {
			rec.LockedAt = time.UnixMicro(lockedAt.Int64).UTC()
		}
		out = append(out, rec)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("idemmysql: list unfinished keys: %w", unavailable(err))
	}
	return out, nil
}
