package idemtest

import (
	"context"
	"time"

	"github.com/idemkit/idem/idemstore"
)

var _ idemstore.KeyStatsStore = (*MemoryStore)(nil)

// KeyStats implements [idemstore.KeyStatsStore].
func (s *MemoryStore) KeyStats(ctx context.Context, now time.Time, lockTimeout time.Duration) (idemstore.KeyStats, error) {
	if err := ctx.Err(); err != nil {
		return idemstore.KeyStats{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var st idemstore.KeyStats
	for _, rec := range s.records {
		if rec.Status != idemstore.StatusInFlight {
			continue
		}
		st.Started++
		if idemstore.LeaseExpired(rec.LockedAt, now, lockTimeout) {
			st.Stuck++
		}
		if st.OldestStarted.IsZero() || rec.LockedAt.Before(st.OldestStarted) {
			st.OldestStarted = rec.LockedAt
		}
	}
	return st, nil
}
