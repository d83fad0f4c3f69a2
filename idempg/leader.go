package idempg

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/idemkit/idem/idemstore"
	"github.com/jackc/pgx/v5"
)

var _ idemstore.PurgeStore = (*Store)(nil)

// LockPurge implements [idemstore.PurgeStore] with a PostgreSQL advisory lock,
// one per database: one instance at a time purges, whatever the number of
// processes sharing the database.
//
// The lock is a session-level advisory lock on a connection of its own,
// opened with the pool's connection settings but outside the pool, so that
// it takes no connection from requests. The batches run on that same
// connection: when the connection breaks, or the instance dies, the server
// ends the session and frees the lock, any batch in progress rolls back,
// and another instance takes the lock at its next try.
//
// With [Config.TransactionPooling] there are no sessions to hold a lock
// across transactions: the lock is then taken by each batch for its own
// transaction, and a batch that finds it held fails with
// idemstore.ErrPurgeLockLost, so that batches of two instances never overlap;
// LockPurge only checks that the lock is free at that moment.
//
// With [Config.NoAdvisoryLocks] the lock is a lease row in
// idem_leader_leases, renewed by each batch in the batch's transaction;
// an instance that dies holding it leaves it to expire after
// Config.LeaderLease.
func (s *Store) LockPurge(ctx context.Context) (idemstore.PurgeLock, error) {
	if s.cfg.NoAdvisoryLocks {
		return s.lockPurgeByRow(ctx)
	}
	if s.cfg.TransactionPooling {
		// Only a probe: the lock is taken again by each batch.
		var free bool
		err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			return tx.QueryRow(ctx, queryTryPurgeXactLock).Scan(&free)
		})
		if err != nil {
			return nil, wrapErr(ctx, "purge lock", err)
		}
		if !free {
			return nil, fmt.Errorf("idempg: %w", idemstore.ErrPurgeLocked)
		}
		return &xactPurgeLock{store: s}, nil
	}
	cc := s.pool.Config().ConnConfig.Copy()
	cc.RuntimeParams["lock_timeout"] = fmt.Sprintf("%dms", purgeLockWait.Milliseconds())
	conn, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		return nil, wrapErr(ctx, "purge lock: connect", err)
	}
	var ok bool
	if err := conn.QueryRow(ctx, queryTryPurgeLock).Scan(&ok); err != nil {
		conn.Close(context.WithoutCancel(ctx))
		return nil, wrapErr(ctx, "purge lock", err)
	}
	if !ok {
		conn.Close(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("idempg: %w", idemstore.ErrPurgeLocked)
	}
	return &sessionPurgeLock{conn: conn}, nil
}

// sessionPurgeLock holds the purge lock by its connection's session.
type sessionPurgeLock struct {
	mu   sync.Mutex
	conn *pgx.Conn // nil once unlocked
	from purgeCursor
}

// PurgeBatch implements [idemstore.PurgeLock].
func (l *sessionPurgeLock) PurgeBatch(ctx context.Context, p idemstore.PurgeParams) (int64, error) {
	if err := p.Validate(); err != nil {
		return 0, fmt.Errorf("idempg: purge: %w", err)
	}
	p = p.WithDefaults()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.conn == nil || l.conn.IsClosed() {
		return 0, fmt.Errorf("idempg: purge: %w", idemstore.ErrPurgeLockLost)
	}
	// Each batch is one statement in a transaction of its own, so a
	// failed one leaves nothing behind.
	n, err := l.from.batch(ctx, l.conn, p, queryPurgeBatchWaiting)
	if pgCode(err) == codeLockNotAvailable {
		// A request holds a row of the batch: skip it instead.
		n, err = l.from.batch(ctx, l.conn, p, queryPurgeBatch)
	}
	if err != nil && l.conn.IsClosed() {
		// The session ended, and the lock with it.
		return 0, fmt.Errorf("idempg: purge: %w: %w", idemstore.ErrPurgeLockLost, err)
	}
	return n, err
}

// Unlock implements [idemstore.PurgeLock]: closing the session frees the lock.
func (l *sessionPurgeLock) Unlock(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.conn == nil {
		return nil
	}
	// Unlock before closing: the server frees a closed session's locks
	// only when its backend has ended, after Close returned, and another
	// instance's LockPurge in between would find the lock still held.
	_, unlockErr := l.conn.Exec(ctx, queryPurgeUnlock)
	err := l.conn.Close(ctx)
	l.conn = nil
	if err = errors.Join(unlockErr, err); err != nil {
		return wrapErr(ctx, "purge unlock", err)
	}
	return nil
}

// xactPurgeLock takes the purge lock in each batch's transaction.
type xactPurgeLock struct {
	store *Store
	mu    sync.Mutex
	from  purgeCursor
}

// PurgeBatch implements [idemstore.PurgeLock].
func (l *xactPurgeLock) PurgeBatch(ctx context.Context, p idemstore.PurgeParams) (int64, error) {
	if err := p.Validate(); err != nil {
		return 0, fmt.Errorf("idempg: purge: %w", err)
	}
	p = p.WithDefaults()
	l.mu.Lock()
	defer l.mu.Unlock()
	var n int64
	err := pgx.BeginFunc(ctx, l.store.pool, func(tx pgx.Tx) error {
		var ok bool
		if err := tx.QueryRow(ctx, queryTryPurgeXactLock).Scan(&ok); err != nil {
			return err
		}
		if !ok {
			return idemstore.ErrPurgeLockLost
		}
		var err error
		n, err = l.from.batch(ctx, tx, p, queryPurgeBatch)
		return err
	})
	if errors.Is(err, idemstore.ErrPurgeLockLost) {
		return 0, fmt.Errorf("idempg: purge: another instance holds the purge lock: %w", err)
	}
	if err != nil {
		return 0, wrapErr(ctx, "purge", err)
	}
	return n, nil
}

// Unlock implements [idemstore.PurgeLock]; the lock ended with each batch.
func (l *xactPurgeLock) Unlock(context.Context) error { return nil }

// LocksEachBatch reports that the lock is taken by each batch, not held
// between them, for the conformance suite.
func (l *xactPurgeLock) LocksEachBatch() bool { return true }

// PurgeCount returns the number of keys that [Store.Purge] with p would
// delete now, and deletes nothing.
func (s *Store) PurgeCount(ctx context.Context, p PurgeParams) (int64, error) {
	if err := p.Validate(); err != nil {
		return 0, fmt.Errorf("idempg: purge count: %w", err)
	}
	var n int64
	if err := s.pool.QueryRow(ctx, queryPurgeCount, p.Before).Scan(&n); err != nil {
		return 0, wrapErr(ctx, "purge count", err)
	}
	return n, nil
}
