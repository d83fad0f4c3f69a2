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

// claimBegin is a batch whose only query is the deferred claim's guard,
// queued by Batch.BeginTx, so that it begins a transaction. beginGuard
// copies it: BeginTx allocates a QueuedQuery and a TxOptions on each call,
// and pgx only reads the TxOptions, so every batch may share this one.
var claimBegin = func() pgx.Batch {
	var b pgx.Batch
	b.BeginTx(pgx.TxOptions{BeginQuery: queryClaimGuard})
	return b
}()

// beginGuard queues the claim's guard with args on b, which must be empty,
// as b.BeginTx(pgx.TxOptions{BeginQuery: queryClaimGuard}) would, with args
// set on the query it queues, but in the batch's own QueuedQuery and
// without allocating.
func (b *batch) beginGuard(args []any) {
	b.Batch = claimBegin // its TxOptions; its queries are replaced below
	b.qq[0] = pgx.QueuedQuery{SQL: queryClaimGuard, Arguments: args}
	b.queued[0] = &b.qq[0]
	b.QueuedQueries = b.queued[:1]
}
