package idemmysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/idemkit/idem/idemstore"
)

var _ idemstore.PurgeStore = (*Store)(nil)

// PurgeParams are the inputs of [Store.Purge]; see [idemstore.PurgeParams].
type PurgeParams = idemstore.PurgeParams

// purgeLockName is the purge lock's name, one per database: GET_LOCK's
// names are the server's, shared by its databases, and at most 64
// characters long.
const purgeLockName = `CONCAT('idem:purge:', SHA1(DATABASE()))`

// Purge deletes keys created before p.Before, in batches of p.BatchSize,
// each in its own short transaction so that requests interleave, with a
// pause after each that leaves requests the database for all but p.Share
// of the time ([idemstore.PurgePause]). It
// returns the number of keys deleted, also when it fails part way. A p
// that [idemstore.PurgeParams.Validate] refuses is an error and deletes
// nothing.
func (s *Store) Purge(ctx context.Context, p PurgeParams) (int64, error) {
	if err := p.Validate(); err != nil {
		return 0, fmt.Errorf("idemmysql: purge: %w", err)
	}
	p = p.WithDefaults()
	var total int64
	for {
		start := time.Now()
		n, err := s.purgeBatch(ctx, nil, p)
		total += n
		if err != nil {
			return total, err
		}
		if n < int64(p.BatchSize) {
			return total, nil
		}
		if err := idemstore.PurgeWait(ctx, time.Since(start), p.Share); err != nil {
			return total, fmt.Errorf("idemmysql: purge: %w", err)
		}
	}
}

// purgeBatch deletes one batch in a transaction on conn (nil for one from
// the pool): the keys that idemstore.PurgeParams.Purges, read with FOR
// UPDATE SKIP LOCKED so that a key a request holds is passed over, never
// waited for, then deleted by their primary keys.
func (s *Store) purgeBatch(ctx context.Context, conn *sql.Conn, p PurgeParams) (int64, error) {
	var (
		tx  *sql.Tx
		err error
	)
	if conn != nil {
		tx, err = conn.BeginTx(ctx, nil)
	} else {
		tx, err = s.db.BeginTx(ctx, nil)
	}
	if err != nil {
		return 0, fmt.Errorf("idemmysql: purge: %w", unavailable(err))
	}
	defer tx.Rollback()
	before := p.Before.UnixMicro()
	rows, err := tx.QueryContext(ctx, queryPurgeSelect, before, before, p.BatchSize)
	if err != nil {
		return 0, fmt.Errorf("idemmysql: purge: %w", unavailable(err))
	}
	var (
		keys []string
		args []any
	)
	for rows.Next() {
		var client, key []byte
		if err := rows.Scan(&client, &key); err != nil {
			rows.Close()
			return 0, fmt.Errorf("idemmysql: purge: %w", unavailable(err))
		}
		keys = append(keys, "(?, ?)")
		args = append(args, client, key)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, fmt.Errorf("idemmysql: purge: %w", unavailable(err))
	}
	if len(keys) == 0 {
		return 0, nil
	}
	res, err := tx.ExecContext(ctx, `DELETE FROM idempotency_keys WHERE (client_id, idempotency_key) IN (`+strings.Join(keys, ", ")+`)`, args...)
	if err != nil {
		return 0, fmt.Errorf("idemmysql: purge: %w", unavailable(err))
	}
	if err := tx.Commit(); err != nil {
		return 0, fmt.Errorf("idemmysql: purge: commit: %w", commitErr(err))
	}
	n, _ := res.RowsAffected()
	return n, nil
}

// LockPurge implements [idemstore.PurgeStore] with GET_LOCK, one lock per
// database, taken without waiting on a connection that the lock keeps out
// of the pool. The batches run on that connection: when it breaks, or the
// instance dies, the server ends the session and frees the lock, any batch
// in progress rolls back, and another instance takes the lock at its next
// try.
func (s *Store) LockPurge(ctx context.Context) (idemstore.PurgeLock, error) {
	conn, held, err := s.getLock(ctx, purgeLockName)
	if err != nil {
		return nil, fmt.Errorf("idemmysql: purge lock: %w", err)
	}
	if !held {
		return nil, fmt.Errorf("idemmysql: %w", idemstore.ErrPurgeLocked)
	}
	return &purgeLock{store: s, conn: conn}, nil
}

// getLock takes the named lock (an SQL expression) without waiting, on a
// connection of its own that it returns while the lock is held.
func (s *Store) getLock(ctx context.Context, name string, args ...any) (*sql.Conn, bool, error) {
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return nil, false, unavailable(err)
	}
	var got sql.NullInt64
	if err := conn.QueryRowContext(ctx, `SELECT GET_LOCK(`+name+`, 0)`, args...).Scan(&got); err != nil {
		discard(conn)
		conn.Close()
		return nil, false, unavailable(err)
	}
	if got.Int64 != 1 {
		conn.Close()
		return nil, false, nil
	}
	return conn, true, nil
}

// releaseLock frees the named lock held on conn and gives conn back; a
// connection whose release failed is closed, which frees the lock.
func releaseLock(ctx context.Context, conn *sql.Conn, name string, args ...any) {
	if _, err := conn.ExecContext(context.WithoutCancel(ctx), `DO RELEASE_LOCK(`+name+`)`, args...); err != nil {
		discard(conn)
	}
	conn.Close()
}

type purgeLock struct {
	mu    sync.Mutex
	store *Store
	conn  *sql.Conn // nil once unlocked or lost
}

// PurgeBatch implements [idemstore.PurgeLock]: it checks that its
// connection still holds the lock, then deletes one batch on it.
func (l *purgeLock) PurgeBatch(ctx context.Context, p idemstore.PurgeParams) (int64, error) {
	if err := p.Validate(); err != nil {
		return 0, fmt.Errorf("idemmysql: purge: %w", err)
	}
	p = p.WithDefaults()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.conn == nil {
		return 0, fmt.Errorf("idemmysql: purge: %w", idemstore.ErrPurgeLockLost)
	}
	var mine sql.NullBool
	err := l.conn.QueryRowContext(ctx, `SELECT IS_USED_LOCK(`+purgeLockName+`) = CONNECTION_ID()`).Scan(&mine)
	if err != nil || !mine.Bool {
		if ctx.Err() != nil {
			return 0, fmt.Errorf("idemmysql: purge: %w", ctx.Err())
		}
		discard(l.conn)
		l.conn.Close()
		l.conn = nil
		return 0, fmt.Errorf("idemmysql: purge: %w", errors.Join(idemstore.ErrPurgeLockLost, err))
	}
	return l.store.purgeBatch(ctx, l.conn, p)
}

// Unlock implements [idemstore.PurgeLock].
func (l *purgeLock) Unlock(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.conn != nil {
		releaseLock(ctx, l.conn, purgeLockName)
		l.conn = nil
	}
	return nil
}

// PurgeCount returns the number of keys that [Store.Purge] with p would
// delete now, and deletes nothing.
func (s *Store) PurgeCount(ctx context.Context, p PurgeParams) (int64, error) {
	if err := p.Validate(); err != nil {
		return 0, fmt.Errorf("idemmysql: purge count: %w", err)
	}
	var n int64
	before := p.Before.UnixMicro()
	if err := s.db.QueryRowContext(ctx, queryPurgeCount, before, before).Scan(&n); err != nil {
		return 0, fmt.Errorf("idemmysql: purge count: %w", unavailable(err))
	}
	return n, nil
}

var _ idemstore.Leader = (*Store)(nil)

// leadLockName is the name of a leader's lock, one per database and name.
const leadLockName = `CONCAT('idem:lead:', SHA1(CONCAT(DATABASE(), ':', ?)))`

// TryLead implements [idemstore.Leader] with GET_LOCK, without waiting,
// on a connection that the lock keeps out of the pool until unlock; a
// process that dies frees it with its session.
func (s *Store) TryLead(ctx context.Context, name string) (unlock func(), held bool, err error) {
	conn, held, err := s.getLock(ctx, leadLockName, name)
	if err != nil {
		return nil, false, fmt.Errorf("idemmysql: lead %s: %w", name, err)
	}
	if !held {
		return nil, false, nil
	}
	var once sync.Once
	return func() { once.Do(func() { releaseLock(context.Background(), conn, leadLockName, name) }) }, true, nil
}
