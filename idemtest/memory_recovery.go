package idemtest

import (
	"context"
	"fmt"
	"slices"

	"github.com/idemkit/idem"
)

var (
	_ idem.RecoveryStore = (*MemoryStore)(nil)
	_ idem.RecoveryLease = (*memoryLease)(nil)
)

// Unfinished implements [idem.RecoveryStore].
func (s *MemoryStore) Unfinished(ctx context.Context, p idem.UnfinishedParams) ([]*idem.Record, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*idem.Record
	for scope, rec := range s.records {
		if p.Lists(rec, s.recovery[scope].Point) {
			out = append(out, cloneRecord(rec))
		}
	}
	slices.SortFunc(out, func(a, b *idem.Record) int { return a.CreatedAt.Compare(b.CreatedAt) })
	if p.Limit > 0 && len(out) > p.Limit {
		out = out[:p.Limit]
	}
	return out, nil
}

// Recovery implements [idem.RecoveryLease].
func (l *memoryLease) Recovery(ctx context.Context) (idem.Recovery, error) {
	l.store.mu.Lock()
	defer l.store.mu.Unlock()
	if l.ended {
		return idem.Recovery{}, fmt.Errorf("idemtest: read recovery point: %w", idem.ErrLeaseEnded)
	}
	if l.held() == nil {
		return idem.Recovery{}, fmt.Errorf("idemtest: read recovery point: %w", idem.ErrLeaseLost)
	}
	r, ok := l.store.recovery[l.scope]
	if !ok {
		return idem.Recovery{Point: idem.RecoveryStarted}, nil
	}
	return idem.Recovery{Point: r.Point, State: r.State.Clone()}, nil
}

// Checkpoint implements [idem.RecoveryLease]. The memory store has no
// transactions: it saves the recovery point if the lease still holds the
// key.
func (l *memoryLease) Checkpoint(ctx context.Context, r idem.Recovery) error {
	if l.mode != idem.ModeTwoPhase {
		return fmt.Errorf("idemtest: checkpoint: %w", idem.ErrNoRecovery)
	}
	l.store.mu.Lock()
	defer l.store.mu.Unlock()
	if l.ended {
		return fmt.Errorf("idemtest: checkpoint: %w", idem.ErrLeaseEnded)
	}
	if l.held() == nil {
		return fmt.Errorf("idemtest: checkpoint (token %d): %w", l.token, idem.ErrLeaseLost)
	}
	l.store.recovery[l.scope] = idem.Recovery{Point: r.Point, State: r.State.Clone()}
	return nil
}
