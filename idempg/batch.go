package idempg

import "github.com/jackc/pgx/v5"

// batch is a round trip's pgx.Batch that holds its first queued queries
// itself: pgx's Batch.Queue allocates one QueuedQuery per statement, and a
// new key's two round trips queue five. A lease's round trips go out one
// at a time and each reads and closes its results before it returns, so a
// deferred claim reuses one batch for all of them (deferredClaim.batch).
type batch struct {
	pgx.Batch
	queued [4]*pgx.QueuedQuery // the array of Batch.QueuedQueries
	qq     [4]pgx.QueuedQuery  // what add queues, at its index in queued
}

// newBatch returns an empty batch.
func newBatch() *batch {
	b := &batch{}
	b.reset()
	return b
}

// reset empties b for the next round trip.
func (b *batch) reset() {
	b.Batch = pgx.Batch{QueuedQueries: b.queued[:0]}
}

// add queues sql with args, as Batch.Queue does, in b's own QueuedQuery
// while one is free. Each is set whole, which clears what pgx noted in it
// on the previous round trip.
func (b *batch) add(sql string, args ...any) {
	n := len(b.QueuedQueries)
	if n >= len(b.qq) || cap(b.QueuedQueries) != len(b.queued) {
		// Full, or the queue outgrew b's array (b.Queue appended past it).
		b.Queue(sql, args...)
		return
	}
	b.qq[n] = pgx.QueuedQuery{SQL: sql, Arguments: args}
	b.QueuedQueries = append(b.QueuedQueries, &b.qq[n])
}
