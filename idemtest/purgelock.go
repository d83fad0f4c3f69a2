package idemtest

import (
	"context"
	"fmt"

	"github.com/idemkit/idem/idemstore"
)

var _ idemstore.PurgeStore = (*MemoryStore)(nil)

// LockPurge implements [idemstore.PurgeStore]: one lock per store, so that
// Purgers sharing a store take turns as instances sharing a database do.
func (s *MemoryStore) LockPurge(ctx context.Context) (idemstore.PurgeLock, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.purgeLocked {
		return nil, fmt.Errorf("idemtest: %w", idemstore.ErrPurgeLocked)
	}
	s.purgeLocked = true
	return &memoryPurgeLock{store: s}, nil
}

type memoryPurgeLock struct {
	store    *MemoryStore
	unlocked bool
}

// PurgeBatch implements [idemstore.PurgeLock].
func (l *memoryPurgeLock) PurgeBatch(ctx context.Context, p idemstore.PurgeParams) (int64, error) {
	if err := p.Validate(); err != nil {
		return 0, fmt.Errorf("idemtest: purge: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	p = p.WithDefaults()
	s := l.store
	s.mu.Lock()
	defer s.mu.Unlock()
	if l.unlocked {
		return 0, fmt.Errorf("idemtest: purge: %w", idemstore.ErrPurgeLockLost)
	}
	var n int64
	for scope, rec := range s.records {
		if n == int64(p.BatchSize) {
			break
		}
		if p.Purges(rec) {
			delete(s.records, scope)
			n++
		}
	}
	return n, nil
}

// Unlock implements [idemstore.PurgeLock].
func (l *memoryPurgeLock) Unlock(context.Context) error {
	s := l.store
	s.mu.Lock()
	defer s.mu.Unlock()
	if !l.unlocked {
		l.unlocked = true
		s.purgeLocked = false
	}
	return nil
}
