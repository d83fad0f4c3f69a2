package idempg

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/idemkit/idem"
)

var _ idem.KeyStatsStore = (*Store)(nil)

// KeyStats implements [idem.KeyStatsStore]. It reads the whole key table
// (there is no index on status), so call it once a minute, not per request.
func (s *Store) KeyStats(ctx context.Context, now time.Time, lockTimeout time.Duration) (idem.KeyStats, error) {
	var st idem.KeyStats
	var oldest pgtype.Timestamptz
	if err := s.pool.QueryRow(ctx, queryKeyStats, now.Add(-lockTimeout)).Scan(&st.Started, &st.Stuck, &oldest); err != nil {
		return idem.KeyStats{}, wrapErr(ctx, "key stats", err)
	}
	if oldest.Valid {
		st.OldestStarted = oldest.Time
	}
	return st, nil
}
