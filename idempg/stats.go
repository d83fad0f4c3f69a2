package idempg

import (
	"context"
	"time"

	"github.com/idemkit/idem/idemstore"
	"github.com/jackc/pgx/v5/pgtype"
)

var _ idemstore.KeyStatsStore = (*Store)(nil)

// KeyStats implements [idemstore.KeyStatsStore]. It reads the whole key table
// (there is no index on status), so call it once a minute, not per request.
func (s *Store) KeyStats(ctx context.Context, now time.Time, lockTimeout time.Duration) (idemstore.KeyStats, error) {
	var st idemstore.KeyStats
	var oldest pgtype.Timestamptz
	if err := s.pool.QueryRow(ctx, queryKeyStats, now.Add(-lockTimeout)).Scan(&st.Started, &st.Stuck, &oldest); err != nil {
		return idemstore.KeyStats{}, wrapErr(ctx, "key stats", err)
	}
	if oldest.Valid {
		st.OldestStarted = oldest.Time
	}
	return st, nil
}
