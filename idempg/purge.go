package idempg

import (
	"context"
	"fmt"
	"time"

	"github.com/idemkit/idem/idemstore"
	"github.com/jackc/pgx/v5/pgtype"
)

// Defaults and bounds of [Store.Purge].
const (
	// purgeBatchTimeout bounds each batch's statement.
	purgeBatchTimeout = 30 * time.Second
	// purgeLockWait is the lock_timeout of the purge lock's connection:
	// how long a batch waits for a row that a request holds before it is
	// run again skipping that row.
	purgeLockWait = 50 * time.Millisecond
)

// PurgeParams are the inputs of [Store.Purge]; see [idemstore.PurgeParams].
type PurgeParams = idemstore.PurgeParams

// Purge deletes keys created before p.Before, in batches. Each batch is one
// short DELETE statement of its own, under a timeout, followed by a pause
// that leaves requests the database for all but p.Share of the time
// ([idemstore.PurgePause]); rows that a request in flight holds are
// skipped, never waited for. It returns the number of keys deleted, also when it fails
// part way. A p that [idemstore.PurgeParams.Validate] refuses is an error and
// deletes nothing.
func (s *Store) Purge(ctx context.Context, p PurgeParams) (int64, error) {
	if err := p.Validate(); err != nil {
		return 0, fmt.Errorf("idempg: purge: %w", err)
	}
	p = p.WithDefaults()
	var total int64
	var from purgeCursor
	for {
		start := time.Now()
		n, err := s.purgeBatch(ctx, p, &from)
		total += n
		if err != nil || n < int64(p.BatchSize) {
			return total, err
		}
		if err := idemstore.PurgeWait(ctx, time.Since(start), p.Share); err != nil {
			return total, wrapErr(ctx, "purge", err)
		}
	}
}

func (s *Store) purgeBatch(ctx context.Context, p PurgeParams, from *purgeCursor) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, purgeBatchTimeout)
	defer cancel()
	conn, err := s.acquire(ctx, "purge")
	if err != nil {
		return 0, err
	}
	defer conn.Release()
	return from.batch(ctx, conn, p, queryPurgeBatch)
}

// purgeCursor is where the next batch of a run starts: the created_at of
// the newest key the run deleted so far. It resets when Before changes,
// that is, for each run.
type purgeCursor struct {
	before time.Time
	from   time.Time
}

// batch runs one batch on q with query, queryPurgeBatch or
// queryPurgeBatchWaiting, and moves the cursor.
func (c *purgeCursor) batch(ctx context.Context, q queryRower, p PurgeParams, query string) (int64, error) {
	if !c.before.Equal(p.Before) {
		c.before, c.from = p.Before, time.Time{}
	}
	from := pgtype.Timestamptz{Time: c.from, Valid: true}
	if c.from.IsZero() {
		from = pgtype.Timestamptz{InfinityModifier: pgtype.NegativeInfinity, Valid: true}
	}
	var n int64
	var newest pgtype.Timestamptz
	if err := q.QueryRow(ctx, query, p.Before, p.BatchSize, from).Scan(&n, &newest); err != nil {
		return 0, wrapErr(ctx, "purge", err)
	}
	if n > 0 && newest.InfinityModifier == pgtype.Finite {
		c.from = newest.Time
	}
	return n, nil
}
