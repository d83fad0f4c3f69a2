package idempg

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idem/idemoutbox"
	"github.com/idemkit/idem/idemstore"
)

var _ idemoutbox.Store = (*Store)(nil)

// EnqueueEvent writes e in the transaction of the lease whose context ctx
// is (see [TxFromContext]), unless an event with its id exists. Handlers
// call it through idemoutbox.Enqueue.
func (s *Store) EnqueueEvent(ctx context.Context, e idemoutbox.Event) error {
	tx, err := TxFromContext(ctx)
	if err != nil {
		return err
	}
	return s.EnqueueEventTx(ctx, tx, e)
}

// EnqueueEventTx writes e in tx, a transaction of the caller's (such as one
// that claimed a key with [Store.ClaimTx]), unless an event with its id
// exists. The event is delivered once tx commits.
func (s *Store) EnqueueEventTx(ctx context.Context, tx pgx.Tx, e idemoutbox.Event) error {
	if e.ID == "" {
		return errors.New("idempg: enqueue event: the event has no id")
	}
	_, err := tx.Exec(ctx, queryEnqueueEvent, e.ID, e.ClientID, e.Type, e.Destination, []byte(e.Payload), e.CreatedAt)
	if err != nil {
		return wrapErr(ctx, "enqueue event", err)
	}
	return nil
}

// DeliverBatch implements idemoutbox.Store. The batch's events are taken
// with SELECT ... FOR UPDATE SKIP LOCKED in a transaction that stays open
// while deliver runs and commits with their outcomes, so relays on other
// connections or in other processes skip them meanwhile. If the relay
// stops or the connection breaks before the commit, the locks go with the
// transaction and the events are due again: at least once.
func (s *Store) DeliverBatch(ctx context.Context, p idemoutbox.BatchParams, deliver func(context.Context, []idemoutbox.Event) []idemoutbox.Outcome) (int, error) {
	if p.Limit <= 0 {
		return 0, errors.New("idempg: deliver batch: BatchParams.Limit must be positive")
	}
	conn, err := s.acquire(ctx, "deliver batch")
	if err != nil {
		return 0, err
	}
	defer conn.Release()
	tx, err := conn.Begin(ctx)
	if err != nil {
		return 0, wrapErr(ctx, "deliver batch: begin", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) // after Commit, a no-op
	rows, err := tx.Query(ctx, queryTakeDueEvents, p.Now, p.Limit)
	if err != nil {
		return 0, wrapErr(ctx, "deliver batch: take events", err)
	}
	events, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (idemoutbox.Event, error) {
		var e idemoutbox.Event
		var payload []byte
		err := row.Scan(&e.ID, &e.ClientID, &e.Type, &e.Destination, &payload, &e.Attempts, &e.CreatedAt, &e.NextAttemptAt, &e.LastError)
		e.Payload, e.Status = payload, idemoutbox.StatusPending
		return e, err
	})
	if err != nil {
		return 0, wrapErr(ctx, "deliver batch: take events", err)
	}
	if len(events) == 0 {
		return 0, nil
	}
	outcomes := deliver(ctx, events)
	if len(outcomes) != len(events) {
		return 0, fmt.Errorf("idempg: deliver batch: %d outcomes for %d events", len(outcomes), len(events))
	}
	if err := ctx.Err(); err != nil {
		return 0, wrapErr(ctx, "deliver batch", err) // rolled back: delivered again
	}
	b := &pgx.Batch{}
	for i, o := range outcomes {
		var delivered *time.Time
		if o.Status == idemoutbox.StatusDelivered {
			delivered = &o.At
		}
		b.Queue(queryRecordOutcome, events[i].ID, string(o.Status), o.NextAttemptAt, delivered, o.Error)
	}
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return 0, wrapErr(ctx, "deliver batch: record outcomes", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, wrapErr(ctx, "deliver batch: commit", err)
	}
	return len(events), nil
}

// PurgeEvents implements idemoutbox.Store: batched deletes of delivered
// events, each its own statement under a timeout, skipping locked rows,
// paced by p.Share as [Store.Purge] is.
func (s *Store) PurgeEvents(ctx context.Context, p idemoutbox.PurgeParams) (int64, error) {
	if err := p.Validate(); err != nil {
		return 0, fmt.Errorf("idempg: purge events: %w", err)
	}
	p = p.WithDefaults()
	var total int64
	for {
		start := time.Now()
		n, err := s.purgeEventsBatch(ctx, p)
		total += n
		if err != nil || n < int64(p.BatchSize) {
			return total, err
		}
		if err := idemstore.PurgeWait(ctx, time.Since(start), p.Share); err != nil {
			return total, wrapErr(ctx, "purge events", err)
		}
	}
}

func (s *Store) purgeEventsBatch(ctx context.Context, p idemoutbox.PurgeParams) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, purgeBatchTimeout)
	defer cancel()
	conn, err := s.acquire(ctx, "purge events")
	if err != nil {
		return 0, err
	}
	defer conn.Release()
	tag, err := conn.Exec(ctx, queryPurgeEventsBatch, p.Before, p.BatchSize)
	if err != nil {
		return 0, wrapErr(ctx, "purge events", err)
	}
	return tag.RowsAffected(), nil
}

// OutboxStats implements idemoutbox.Store.
func (s *Store) OutboxStats(ctx context.Context) (idemoutbox.Stats, error) {
	var st idemoutbox.Stats
	var oldest *time.Time
	if err := s.pool.QueryRow(ctx, queryOutboxStats).Scan(&st.Pending, &oldest, &st.Dead); err != nil {
		return st, wrapErr(ctx, "outbox stats", err)
	}
	if oldest != nil {
		st.OldestPending = *oldest
	}
	return st, nil
}

// RetryDead implements idemoutbox.Store.
func (s *Store) RetryDead(ctx context.Context, now time.Time, ids ...string) (int64, error) {
	var only []string // NULL: every dead event
	if len(ids) > 0 {
		only = ids
	}
	tag, err := s.pool.Exec(ctx, queryRetryDead, now, only)
	if err != nil {
		return 0, wrapErr(ctx, "retry dead events", err)
	}
	return tag.RowsAffected(), nil
}

// ListEvents implements idemoutbox.Store.
func (s *Store) ListEvents(ctx context.Context, p idemoutbox.ListParams) ([]idemoutbox.Event, error) {
	if p.ClientID == "" || p.Limit <= 0 {
		return nil, errors.New("idempg: list events: ListParams.ClientID and a positive Limit are required")
	}
	var after *time.Time
	var afterID string
	if p.After != nil {
		after, afterID = &p.After.CreatedAt, p.After.ID
	}
	rows, err := s.pool.Query(ctx, queryListEvents, p.ClientID, p.Limit, after, afterID)
	if err != nil {
		return nil, wrapErr(ctx, "list events", err)
	}
	events, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (idemoutbox.Event, error) {
		var e idemoutbox.Event
		var payload []byte
		var status string
		var delivered *time.Time
		err := row.Scan(&e.ID, &e.ClientID, &e.Type, &e.Destination, &payload, &status, &e.Attempts,
			&e.CreatedAt, &e.NextAttemptAt, &delivered, &e.LastError)
		e.Payload, e.Status = payload, idemoutbox.Status(status)
		if delivered != nil {
			e.DeliveredAt = *delivered
		}
		return e, err
	})
	if err != nil {
		return nil, wrapErr(ctx, "list events", err)
	}
	return events, nil
}
