package idemsqlite

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/idemkit/idem/idemstore"
)

var _ idemstore.KeyStatsStore = (*Store)(nil)

// KeyStats implements [idemstore.KeyStatsStore]. It reads the whole key table,
// so call it once a minute, not per request.
func (s *Store) KeyStats(ctx context.Context, now time.Time, lockTimeout time.Duration) (idemstore.KeyStats, error) {
	var st idemstore.KeyStats
	var oldest sql.NullInt64
	if err := s.read.QueryRowContext(ctx, queryKeyStats, now.Add(-lockTimeout).UnixMicro()).Scan(&st.Started, &st.Stuck, &oldest); err != nil {
		return idemstore.KeyStats{}, fmt.Errorf("idemsqlite: key stats: %w", unavailable(err))
	}
	if oldest.Valid {
		st.OldestStarted = time.UnixMicro(oldest.Int64).UTC()
	}
	return st, nil
}
