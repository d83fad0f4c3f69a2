package idemsqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/internal/migrate"
	"github.com/idemkit/idem/internal/record"
)

var (
	_ idemstore.KeyAdmin = (*Store)(nil)
	_ idemstore.Readier  = (*Store)(nil)
)

// The operators' statements. Their filters are written so that an empty
// parameter matches every row.
const (
	// queryListKeys lists keys oldest first: $1 client ('' for all), $2
	// status ('' for both), $3 created before (0 for any age), $4 whether
	// to return bodies, $5 limit.
	queryListKeys = `SELECT client_id, idempotency_key, request_method, request_path, request_hash, request_fields,
       status, lease_token, response_status, response_headers,
       CASE WHEN ?4 THEN response_body END, created_at, locked_at, lease_expires_at
FROM idempotency_keys
WHERE (?1 = '' OR client_id = ?1) AND (?2 = '' OR status = ?2) AND (?3 = 0 OR created_at < ?3)
ORDER BY created_at, client_id, idempotency_key
LIMIT ?5`

	// queryReleaseKey ends a started key's lease and moves its token on,
	// if the token is still the one the operator's read saw.
	queryReleaseKey = `UPDATE idempotency_keys
SET lease_token = lease_token + 1, locked_at = NULL, lease_expires_at = NULL
WHERE client_id = ? AND idempotency_key = ? AND status = 'started' AND lease_token = ?`

	queryDeleteCompletedKey = `DELETE FROM idempotency_keys
WHERE client_id = ? AND idempotency_key = ? AND status = 'completed' AND lease_token = ?`
)

// GetKey implements [idemstore.KeyReader].
func (s *Store) GetKey(ctx context.Context, scope idemstore.Scope) (*idemstore.Record, error) {
	rec, err := load(ctx, s.read, scope)
	if err != nil {
		return nil, err
	}
	if rec == nil {
		return nil, fmt.Errorf("idemsqlite: get key: %w", idemstore.ErrKeyNotFound)
	}
	return rec, nil
}

// ListKeys implements [idemstore.KeyAdmin].
func (s *Store) ListKeys(ctx context.Context, p idemstore.ListKeysParams) ([]*idemstore.Record, error) {
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("idemsqlite: list keys: %w", err)
	}
	p = p.WithDefaults()
	var before int64
	if !p.CreatedBefore.IsZero() {
		before = p.CreatedBefore.UnixMicro()
	}
	rows, err := s.read.QueryContext(ctx, queryListKeys, p.ClientID, string(p.Status), before, p.WithBody, p.Limit)
	if err != nil {
		return nil, fmt.Errorf("idemsqlite: list keys: %w", unavailable(err))
	}
	defer rows.Close()
	var out []*idemstore.Record
	for rows.Next() {
		var (
			rec                  idemstore.Record
			status               string
			respStatus           sql.NullInt64
			respHeader, respBody []byte
			createdAt            int64
			lockedAt, expires    sql.NullInt64
		)
		if err := rows.Scan(&rec.Scope.ClientID, &rec.Scope.Key, &rec.Method, &rec.Path, &rec.RequestHash, &rec.RequestFields,
			&status, &rec.Token, &respStatus, &respHeader, &respBody, &createdAt, &lockedAt, &expires); err != nil {
			return nil, fmt.Errorf("idemsqlite: list keys: %w", unavailable(err))
		}
		rec.Status = idemstore.Status(status)
		rec.CreatedAt = time.UnixMicro(createdAt).UTC()
		rec.LockedAt, rec.LeaseExpires = leaseTimes(lockedAt, expires)
		if rec.Status == idemstore.StatusCompleted {
			if rec.Response, err = record.DecodeResponse(int(respStatus.Int64), respHeader, respBody); err != nil {
				return nil, fmt.Errorf("idemsqlite: list keys: %w", err)
			}
		}
		out = append(out, &rec)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("idemsqlite: list keys: %w", unavailable(err))
	}
	return out, nil
}

// ReleaseKey implements [idemstore.KeyAdmin]. It reads and changes the key in one
// write transaction, so nothing changes it in between.
func (s *Store) ReleaseKey(ctx context.Context, p idemstore.ReleaseKeyParams) (*idemstore.Record, error) {
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("idemsqlite: release key: %w", err)
	}
	var before *idemstore.Record
	err := s.inWriteTx(ctx, func(tx *sql.Tx) error {
		rec, err := load(ctx, tx, p.Scope)
		switch {
		case err != nil:
			return err
		case rec == nil:
			return idemstore.ErrKeyNotFound
		}
		if err := p.Check(rec); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, queryReleaseKey, p.Scope.ClientID, p.Scope.Key, rec.Token); err != nil {
			return unavailable(err)
		}
		before = rec
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("idemsqlite: release key: %w", err)
	}
	return before, nil
}

// DeleteKey implements [idemstore.KeyAdmin].
func (s *Store) DeleteKey(ctx context.Context, scope idemstore.Scope) (*idemstore.Record, error) {
	var before *idemstore.Record
	err := s.inWriteTx(ctx, func(tx *sql.Tx) error {
		rec, err := load(ctx, tx, scope)
		switch {
		case err != nil:
			return err
		case rec == nil:
			return idemstore.ErrKeyNotFound
		}
		if err := idemstore.CheckDelete(rec); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, queryDeleteCompletedKey, scope.ClientID, scope.Key, rec.Token); err != nil {
			return unavailable(err)
		}
		rec.Response.Body = nil
		before = rec
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("idemsqlite: delete key: %w", err)
	}
	return before, nil
}

// inWriteTx runs fn in a transaction on the write connection and commits
// it when fn returns nil.
func (s *Store) inWriteTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	tx, err := s.begin(ctx)
	if err != nil {
		return err
	}
	if err := fn(tx.Tx); err != nil {
		tx.rollback()
		return err
	}
	if err := tx.commit(); err != nil {
		return fmt.Errorf("commit: %w", unavailable(err))
	}
	return nil
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
	want, err := newestVersion()
	if err != nil {
		return err
	}
	if have < want {
		return fmt.Errorf("idemsqlite: %w", &idemstore.SchemaVersionError{Have: have, Want: want})
	}
	return nil
}

// newestVersion is the version of the newest embedded migration.
func newestVersion() (int, error) {
	migrations, err := migrate.Load(migrationFS, "migration")
	if err != nil {
		return 0, fmt.Errorf("idemsqlite: %w", err)
	}
	if len(migrations) == 0 {
		return 0, errors.New("idemsqlite: no migrations embedded")
	}
	return migrations[len(migrations)-1].Version, nil
}
