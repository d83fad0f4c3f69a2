package idempg

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/internal/migrate"
)

var (
	_ idemstore.KeyAdmin = (*Store)(nil)
	_ idemstore.Readier  = (*Store)(nil)
)

// The operators' statements. Their filters are written so that a NULL
// parameter matches every row.
const (
	// queryListKeys lists keys oldest first: $1 client, $2 status, $3
	// created before (NULL for each: any), $4 whether to return bodies, $5
	// limit. Its first column is true, as scanKey expects.
	queryListKeys = `SELECT client_id, idempotency_key, true,
       request_method, request_path, request_hash, request_fields, status, lease_token,
       response_status, response_headers, CASE WHEN $4::boolean THEN response_body END, created_at, locked_at,
       lease_expires_at, trace_context
FROM idempotency_keys
WHERE ($1::text IS NULL OR client_id = $1::text)
  AND ($2::text IS NULL OR status = $2::text)
  AND ($3::timestamptz IS NULL OR created_at < $3::timestamptz)
ORDER BY created_at, client_id, idempotency_key
LIMIT $5`

	// queryReleaseStartedKey ends a started key's lease and moves its token
	// on, if the row and its token are still the ones the operator's read
	// saw ($4 created_at, $3 token): a request that took the key over or
	// completed it in between wins, and so does one that claimed it anew
	// after it was purged.
	queryReleaseStartedKey = `UPDATE idempotency_keys
SET lease_token = lease_token + 1, locked_at = NULL, lease_expires_at = NULL
WHERE client_id = $1 AND idempotency_key = $2 AND status = 'started' AND lease_token = $3
  AND created_at = $4::timestamptz`

	// queryDeleteCompletedKey deletes a completed key if its row and token
	// are still the ones the operator's read saw ($4, $3).
	queryDeleteCompletedKey = `DELETE FROM idempotency_keys
WHERE client_id = $1 AND idempotency_key = $2 AND status = 'completed' AND lease_token = $3
  AND created_at = $4::timestamptz`
)

// GetKey implements [idemstore.KeyReader].
func (s *Store) GetKey(ctx context.Context, scope idemstore.Scope) (*idemstore.Record, error) {
	conn, err := s.acquire(ctx, "get key")
	if err != nil {
		return nil, err
	}
	defer conn.Release()
	rec, err := loadKey(ctx, conn, scope)
	switch {
	case err != nil:
		return nil, wrapErr(ctx, "get key", err)
	case rec == nil:
		return nil, fmt.Errorf("idempg: get key: %w", idemstore.ErrKeyNotFound)
	}
	return rec, nil
}

// ListKeys implements [idemstore.KeyAdmin].
func (s *Store) ListKeys(ctx context.Context, p idemstore.ListKeysParams) ([]*idemstore.Record, error) {
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("idempg: list keys: %w", err)
	}
	p = p.WithDefaults()
	var client, status, before any
	if p.ClientID != "" {
		client = p.ClientID
	}
	if p.Status != "" {
		status = string(p.Status)
	}
	if !p.CreatedBefore.IsZero() {
		before = p.CreatedBefore
	}
	conn, err := s.acquire(ctx, "list keys")
	if err != nil {
		return nil, err
	}
	defer conn.Release()
	rows, err := conn.Query(ctx, queryListKeys, client, status, before, p.WithBody, p.Limit)
	if err != nil {
		return nil, wrapErr(ctx, "list keys", err)
	}
	defer rows.Close()
	var out []*idemstore.Record
	for rows.Next() {
		var scope idemstore.Scope
		rec, _, err := scanKey(scopedRow{rows: rows, scope: &scope}, scope)
		if err != nil {
			return nil, wrapErr(ctx, "list keys", err)
		}
		rec.Scope = scope
		out = append(out, rec)
	}
	if err := rows.Err(); err != nil {
		return nil, wrapErr(ctx, "list keys", err)
	}
	return out, nil
}

// scopedRow is a row of queryListKeys as scanKey reads it: the client and
// the key, then the columns of queryLoadKey.
type scopedRow struct {
	rows  pgx.Rows
	scope *idemstore.Scope
}

func (r scopedRow) Scan(dest ...any) error {
	return r.rows.Scan(append([]any{&r.scope.ClientID, &r.scope.Key}, dest...)...)
}

// ReleaseKey implements [idemstore.KeyAdmin]. The change is fenced by the token
// it read: should a request take the key over or complete it between the
// read and the change, the release changes nothing and returns an error
// wrapping [idemstore.ErrKeyChanged].
func (s *Store) ReleaseKey(ctx context.Context, p idemstore.ReleaseKeyParams) (*idemstore.Record, error) {
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("idempg: release key: %w", err)
	}
	return s.changeKey(ctx, "release key", p.Scope, p.Check, queryReleaseStartedKey)
}

// DeleteKey implements [idemstore.KeyAdmin], fenced as ReleaseKey is.
func (s *Store) DeleteKey(ctx context.Context, scope idemstore.Scope) (*idemstore.Record, error) {
	rec, err := s.changeKey(ctx, "delete key", scope, idemstore.CheckDelete, queryDeleteCompletedKey)
	if rec != nil && rec.Response != nil {
		rec.Response.Body = nil
	}
	return rec, err
}

// changeKey reads a key, asks check whether it may change, then runs query
// on it with the token and created_at it read. It returns the record as it was read.
func (s *Store) changeKey(ctx context.Context, op string, scope idemstore.Scope, check func(*idemstore.Record) error, query string) (*idemstore.Record, error) {
	conn, err := s.acquire(ctx, op)
	if err != nil {
		return nil, err
	}
	defer conn.Release()
	rec, err := loadKey(ctx, conn, scope)
	switch {
	case err != nil:
		return nil, wrapErr(ctx, op, err)
	case rec == nil:
		return nil, fmt.Errorf("idempg: %s: %w", op, idemstore.ErrKeyNotFound)
	}
	if err := check(rec); err != nil {
		return nil, fmt.Errorf("idempg: %s: %w", op, err)
	}
	tag, err := conn.Exec(ctx, query, scope.ClientID, scope.Key, rec.Token, rec.CreatedAt)
	switch {
	case err != nil:
		return nil, wrapErr(ctx, op, err)
	case tag.RowsAffected() != 1:
		return nil, fmt.Errorf("idempg: %s: %w", op, idemstore.ErrKeyChanged)
	}
	return rec, nil
}

// Ready implements [idemstore.Readier]: the database answers and its schema is
// at least at the newest version embedded in this build. A newer schema is
// ready, so that instances of the previous build keep serving while a
// rollout migrates.
func (s *Store) Ready(ctx context.Context) error {
	have, err := s.SchemaVersion(ctx)
	if err != nil {
		return err
	}
	migrations, err := migrate.Load(migrationFS, "migration")
	if err != nil {
		return fmt.Errorf("idempg: %w", err)
	}
	if len(migrations) == 0 {
		return errors.New("idempg: no migrations embedded")
	}
	if want := migrations[len(migrations)-1].Version; have < want {
		return fmt.Errorf("idempg: %w", &idemstore.SchemaVersionError{Have: have, Want: want})
	}
	return nil
}
