package idemmysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/internal/migrate"
)

var (
	_ idemstore.KeyAdmin      = (*Store)(nil)
	_ idemstore.Readier       = (*Store)(nil)
	_ idemstore.KeyStatsStore = (*Store)(nil)
)

// The operators' statements. Their filters are written so that an empty
// parameter matches every row; each such parameter is passed twice.
const (
	// queryListKeys lists keys oldest first: client ('' for all), status
	// ('' for both), created before (0 for any age), limit. The body is
	// read only when asked (see Store.ListKeys).
	queryListKeys = `SELECT client_id, idempotency_key, request_method, request_path, request_hash, request_fields,
       status, lease_token, response_status, response_headers,
       CASE WHEN ? THEN response_body END, created_at, locked_at, lease_expires_at, trace_context
FROM idempotency_keys
WHERE (? = '' OR client_id = ?) AND (? = '' OR status = ?) AND (? = 0 OR created_at < ?)
ORDER BY created_at, client_id, idempotency_key
LIMIT ?`

	// queryLockKey reads a key for an operator's change, locking its row.
	queryLockKey = querySelectKey + ` FOR UPDATE`

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
	rec, err := load(ctx, s.db, scope)
	if err != nil {
		return nil, err
	}
	if rec == nil {
		return nil, fmt.Errorf("idemmysql: get key: %w", idemstore.ErrKeyNotFound)
	}
	return rec, nil
}

// ListKeys implements [idemstore.KeyAdmin].
func (s *Store) ListKeys(ctx context.Context, p idemstore.ListKeysParams) ([]*idemstore.Record, error) {
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("idemmysql: list keys: %w", err)
	}
	p = p.WithDefaults()
	var before int64
	if !p.CreatedBefore.IsZero() {
		before = p.CreatedBefore.UnixMicro()
	}
	rows, err := s.db.QueryContext(ctx, queryListKeys, p.WithBody, p.ClientID, p.ClientID,
		string(p.Status), string(p.Status), before, before, p.Limit)
	if err != nil {
		return nil, fmt.Errorf("idemmysql: list keys: %w", unavailable(err))
	}
	defer rows.Close()
	var out []*idemstore.Record
	for rows.Next() {
		rec := &idemstore.Record{}
		err := scanKey(func(dest ...any) error {
			return rows.Scan(append([]any{&rec.Scope.ClientID, &rec.Scope.Key}, dest...)...)
		}, rec)
		if err != nil {
			return nil, fmt.Errorf("idemmysql: list keys: %w", unavailable(err))
		}
		out = append(out, rec)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("idemmysql: list keys: %w", unavailable(err))
	}
	return out, nil
}

// ReleaseKey implements [idemstore.KeyAdmin]. It reads the key with its row
// locked and changes it in the same transaction.
func (s *Store) ReleaseKey(ctx context.Context, p idemstore.ReleaseKeyParams) (*idemstore.Record, error) {
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("idemmysql: release key: %w", err)
	}
	var before *idemstore.Record
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		rec, err := load(ctx, lockedReader{tx}, p.Scope)
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
		return nil, fmt.Errorf("idemmysql: release key: %w", err)
	}
	return before, nil
}

// DeleteKey implements [idemstore.KeyAdmin].
func (s *Store) DeleteKey(ctx context.Context, scope idemstore.Scope) (*idemstore.Record, error) {
	var before *idemstore.Record
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		rec, err := load(ctx, lockedReader{tx}, scope)
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
		return nil, fmt.Errorf("idemmysql: delete key: %w", err)
	}
	return before, nil
}

// lockedReader reads a key with FOR UPDATE.
type lockedReader struct{ tx *sql.Tx }

func (r lockedReader) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	if query == querySelectKey {
		query = queryLockKey
	}
	return r.tx.QueryRowContext(ctx, query, args...)
}

// inTx runs fn in a transaction and commits it when fn returns nil.
func (s *Store) inTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	lt, err := s.beginTx(ctx)
	if err != nil {
		return err
	}
	if err := fn(lt.tx); err != nil {
		lt.rollback()
		return err
	}
	if err := lt.commit(); err != nil {
		return fmt.Errorf("commit: %w", commitErr(err))
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
		return fmt.Errorf("idemmysql: %w", &idemstore.SchemaVersionError{Have: have, Want: want})
	}
	return nil
}

// newestVersion is the version of the newest embedded migration.
func newestVersion() (int, error) {
	migrations, err := migrate.Load(migrationFS, "migration")
	if err != nil {
		return 0, fmt.Errorf("idemmysql: %w", err)
	}
	if len(migrations) == 0 {
		return 0, errors.New("idemmysql: no migrations embedded")
	}
	return migrations[len(migrations)-1].Version, nil
}

// KeyStats implements [idemstore.KeyStatsStore]. It reads the started keys
// through the (status, created_at) index; call it once a minute, not per
// request.
func (s *Store) KeyStats(ctx context.Context, now time.Time, lockTimeout time.Duration) (idemstore.KeyStats, error) {
	var st idemstore.KeyStats
	var oldest sql.NullInt64
	if err := s.db.QueryRowContext(ctx, queryKeyStats, now.Add(-lockTimeout).UnixMicro()).Scan(&st.Started, &st.Stuck, &oldest); err != nil {
		return idemstore.KeyStats{}, fmt.Errorf("idemmysql: key stats: %w", unavailable(err))
	}
	if oldest.Valid {
		st.OldestStarted = time.UnixMicro(oldest.Int64).UTC()
	}
	return st, nil
}
