package idemtest

import (
	"context"
	"time"

	"github.com/idemkit/idem"
)

var _ idem.KeyStatsStore = (*MemoryStore)(nil)

// KeyStats implements [idem.KeyStatsStore].
func (s *MemoryStore) KeyStats(ctx context.Context, now time.Time, lockTimeout time.Duration) (idem.KeyStats, error) {
	if err := ctx.Err(); err != nil {
		return idem.KeyStats{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var st idem.KeyStats
	for _, rec := range s.records {
		if rec.Status != idem.StatusInFlight {
			continue
		}
		st.Started++
		if idem.LeaseExpired(rec.LockedAt, now, lockTimeout) {
			st.Stuck++
		}
		if st.OldestStarted.IsZero() || rec.LockedAt.Before(st.OldestStarted) {
			st.OldestStarted = rec.LockedAt
		}
	}
	return st, nil
}
