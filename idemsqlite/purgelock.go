package idemsqlite

import (
	"context"
	"fmt"
	"sync"

	"github.com/idemkit/idem/idemstore"
)

var _ idemstore.PurgeStore = (*Store)(nil)

// purgeLocks holds the stores whose purge lock is taken.
var purgeLocks sync.Map // *Store -> struct{}

// LockPurge implements [idemstore.PurgeStore]. SQLite is a file of one process:
// the lock is held in the process, one per Store, and is always free for
// its first taker.
func (s *Store) LockPurge(ctx context.Context) (idemstore.PurgeLock, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if _, held := purgeLocks.LoadOrStore(s, struct{}{}); held {
		return nil, fmt.Errorf("idemsqlite: %w", idemstore.ErrPurgeLocked)
	}
	return &purgeLock{store: s}, nil
}

type purgeLock struct {
	mu       sync.Mutex
	store    *Store
	unlocked bool
}

// PurgeBatch implements [idemstore.PurgeLock]: one short DELETE of at most
// p.BatchSize keys (PurgeBatchSizeDefault when 0) on the write connection.
func (l *purgeLock) PurgeBatch(ctx context.Context, p idemstore.PurgeParams) (int64, error) {
	if err := p.Validate(); err != nil {
		return 0, fmt.Errorf("idemsqlite: purge: %w", err)
	}
	if p.BatchSize == 0 {
		p.BatchSize = PurgeBatchSizeDefault
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.unlocked {
		return 0, fmt.Errorf("idemsqlite: purge: %w", idemstore.ErrPurgeLockLost)
	}
	n, err := l.store.purgeBatch(ctx, queryPurgeBatch, p.Before, p.BatchSize)
	if err != nil {
		return 0, fmt.Errorf("idemsqlite: purge: %w", err)
	}
	return n, nil
}

// Unlock implements [idemstore.PurgeLock].
func (l *purgeLock) Unlock(context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.unlocked {
		l.unlocked = true
		purgeLocks.Delete(l.store)
	}
	return nil
}

// PurgeCount returns the number of keys that [Store.Purge] with p would
// delete now, and deletes nothing.
func (s *Store) PurgeCount(ctx context.Context, p PurgeParams) (int64, error) {
	if err := p.Validate(); err != nil {
		return 0, fmt.Errorf("idemsqlite: purge count: %w", err)
	}
	var n int64
	if err := s.read.QueryRowContext(ctx, queryPurgeCount, p.Before.UnixMicro()).Scan(&n); err != nil {
		return 0, fmt.Errorf("idemsqlite: purge count: %w", unavailable(err))
	}
	return n, nil
}
