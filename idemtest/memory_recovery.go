package idemtest

import (
	"context"
	"fmt"
	"slices"

	"github.com/idemkit/idem/idemstore"
)

var (
	_ idemstore.RecoveryStore = (*MemoryStore)(nil)
	_ idemstore.RecoveryLease = (*memoryLease)(nil)
)

// Unfinished implements [idemstore.RecoveryStore].
func (s *MemoryStore) Unfinished(ctx context.Context, p idemstore.UnfinishedParams) ([]*idemstore.Record, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*idemstore.Record
	for scope, rec := range s.records {
		if p.Lists(rec, s.recovery[scope].Point) {
			out = append(out, cloneRecord(rec))
		}
	}
	slices.SortFunc(out, func(a, b *idemstore.Record) int { return a.CreatedAt.Compare(b.CreatedAt) })
	out = out[:min(len(out), max(p.Limit, 0))]
	return out, nil
}

// Recovery implements [idemstore.RecoveryLease].
func (l *memoryLease) Recovery(ctx context.Context) (idemstore.Recovery, error) {
	l.store.mu.Lock()
	defer l.store.mu.Unlock()
	if l.ended {
		return idemstore.Recovery{}, fmt.Errorf("idemtest: read recovery point: %w", idemstore.ErrLeaseEnded)
	}
	if l.held() == nil {
		return idemstore.Recovery{}, fmt.Errorf("idemtest: read recovery point: %w", idemstore.ErrLeaseLost)
	}
	r, ok := l.store.recovery[l.scope]
	if !ok {
		return idemstore.Recovery{Point: idemstore.RecoveryStarted}, nil
	}
	return r.Clone(), nil
}

// Checkpoint implements [idemstore.RecoveryLease]. The memory store has no
// transactions: it saves the recovery point if the lease still holds the
// key.
func (l *memoryLease) Checkpoint(ctx context.Context, r idemstore.Recovery) error {
	if !l.twoPhase {
		return fmt.Errorf("idemtest: checkpoint: %w", idemstore.ErrNoRecovery)
	}
	l.store.mu.Lock()
	defer l.store.mu.Unlock()
	if l.ended {
		return fmt.Errorf("idemtest: checkpoint: %w", idemstore.ErrLeaseEnded)
	}
	if l.held() == nil {
		return fmt.Errorf("idemtest: checkpoint (token %d): %w", l.token, idemstore.ErrLeaseLost)
	}
	l.store.recovery[l.scope] = r.Clone()
	return nil
}
