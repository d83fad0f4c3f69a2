package idemsqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

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

// EnqueueEventTx writes e in tx, a transaction of the caller's on
// [Store.DB], unless an event with its id exists. The event is delivered
// once tx commits.
func (s *Store) EnqueueEventTx(ctx context.Context, tx *sql.Tx, e idemoutbox.Event) error {
	if e.ID == "" {
		return errors.New("idemsqlite: enqueue event: the event has no id")
	}
	created := e.CreatedAt.UnixMicro()
	_, err := tx.ExecContext(ctx, queryEnqueueEvent, e.ID, e.ClientID, e.Type, e.Destination, []byte(e.Payload), created, created)
	if err != nil {
		return fmt.Errorf("idemsqlite: enqueue event: %w", unavailable(err))
	}
	return nil
}

// DeliverBatch implements idemoutbox.Store. The store delivers one batch
// at a time: the due events are read without SQLite's write lock, handed
// to deliver, and their outcomes written in one short transaction, so
// requests are never held up by a delivery. Another Store on the same
// database file, in this process or another, does not see the batch as
// taken: run one relay per database file.
func (s *Store) DeliverBatch(ctx context.Context, p idemoutbox.BatchParams, deliver func(context.Context, []idemoutbox.Event) []idemoutbox.Outcome) (int, error) {
	if p.Limit <= 0 {
		return 0, errors.New("idemsqlite: deliver batch: BatchParams.Limit must be positive")
	}
	select {
	case s.relayLock <- struct{}{}:
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	defer func() { <-s.relayLock }()
	events, err := s.dueEvents(ctx, p)
	if err != nil || len(events) == 0 {
		return 0, err
	}
	outcomes := deliver(ctx, events)
	if len(outcomes) != len(events) {
		return 0, fmt.Errorf("idemsqlite: deliver batch: %d outcomes for %d events", len(outcomes), len(events))
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	tx, err := s.begin(ctx)
	if err != nil {
		return 0, err
	}
	for i, o := range outcomes {
		var delivered any
		if o.Status == idemoutbox.StatusDelivered {
			delivered = o.At.UnixMicro()
		}
		if _, err := tx.ExecContext(ctx, queryRecordOutcome, string(o.Status), o.NextAttemptAt.UnixMicro(), delivered, o.Error, events[i].ID); err != nil {
			tx.rollback()
			return 0, fmt.Errorf("idemsqlite: deliver batch: record outcome: %w", unavailable(err))
		}
	}
	if err := tx.commit(); err != nil {
		return 0, fmt.Errorf("idemsqlite: deliver batch: commit: %w", unavailable(err))
	}
	return len(events), nil
}

func (s *Store) dueEvents(ctx context.Context, p idemoutbox.BatchParams) ([]idemoutbox.Event, error) {
	rows, err := s.read.QueryContext(ctx, queryDueEvents, p.Now.UnixMicro(), p.Limit)
	if err != nil {
		return nil, fmt.Errorf("idemsqlite: deliver batch: take events: %w", unavailable(err))
	}
	defer rows.Close()
	var events []idemoutbox.Event
	for rows.Next() {
		var e idemoutbox.Event
		var payload []byte
		var created, next int64
		if err := rows.Scan(&e.ID, &e.ClientID, &e.Type, &e.Destination, &payload, &e.Attempts, &created, &next, &e.LastError); err != nil {
			return nil, fmt.Errorf("idemsqlite: deliver batch: take events: %w", err)
		}
		e.Payload, e.Status = payload, idemoutbox.StatusPending
		e.CreatedAt, e.NextAttemptAt = time.UnixMicro(created).UTC(), time.UnixMicro(next).UTC()
		events = append(events, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("idemsqlite: deliver batch: take events: %w", unavailable(err))
	}
	return events, nil
}

// PurgeEvents implements idemoutbox.Store: batched deletes of delivered
// events (PurgeBatchSizeDefault when p.BatchSize is 0), each in its own
// short transaction, paced by p.Share (PurgeShareDefault when 0) as
// [Store.Purge] is.
func (s *Store) PurgeEvents(ctx context.Context, p idemoutbox.PurgeParams) (int64, error) {
	if err := p.Validate(); err != nil {
		return 0, fmt.Errorf("idemsqlite: purge events: %w", err)
	}
	if p.BatchSize == 0 {
		p.BatchSize = PurgeBatchSizeDefault
	}
	if p.Share == 0 {
		p.Share = PurgeShareDefault
	}
	var total int64
	for {
		start := time.Now()
		n, err := s.purgeBatch(ctx, queryPurgeEventsBatch, p.Before, p.BatchSize)
		if err != nil {
			return total, fmt.Errorf("idemsqlite: purge events: %w", err)
		}
		total += n
		if n < int64(p.BatchSize) {
			return total, nil
		}
		if err := idemstore.PurgeWait(ctx, time.Since(start), p.Share); err != nil {
			return total, fmt.Errorf("idemsqlite: purge events: %w", err)
		}
	}
}

// OutboxStats implements idemoutbox.Store.
func (s *Store) OutboxStats(ctx context.Context) (idemoutbox.Stats, error) {
	var st idemoutbox.Stats
	var oldest sql.NullInt64
	if err := s.read.QueryRowContext(ctx, queryOutboxStats).Scan(&st.Pending, &oldest, &st.Dead); err != nil {
		return st, fmt.Errorf("idemsqlite: outbox stats: %w", unavailable(err))
	}
	if oldest.Valid {
		st.OldestPending = time.UnixMicro(oldest.Int64).UTC()
	}
	return st, nil
}

// RetryDead implements idemoutbox.Store, in one transaction.
func (s *Store) RetryDead(ctx context.Context, now time.Time, ids ...string) (int64, error) {
	tx, err := s.begin(ctx)
	if err != nil {
		return 0, err
	}
	var total int64
	run := func(query string, args ...any) error {
		res, err := tx.ExecContext(ctx, query, args...)
		if err != nil {
			return err
		}
		n, _ := res.RowsAffected()
		total += n
		return nil
	}
	if len(ids) == 0 {
		err = run(queryRetryDead, now.UnixMicro())
	}
	for _, id := range ids {
		if err = run(queryRetryDeadOne, now.UnixMicro(), id); err != nil {
			break
		}
	}
	if err != nil {
		tx.rollback()
		return 0, fmt.Errorf("idemsqlite: retry dead events: %w", unavailable(err))
	}
	if err := tx.commit(); err != nil {
		return 0, fmt.Errorf("idemsqlite: retry dead events: commit: %w", unavailable(err))
	}
	return total, nil
}

// ListEvents implements idemoutbox.Store.
func (s *Store) ListEvents(ctx context.Context, p idemoutbox.ListParams) ([]idemoutbox.Event, error) {
	if p.ClientID == "" || p.Limit <= 0 {
		return nil, errors.New("idemsqlite: list events: ListParams.ClientID and a positive Limit are required")
	}
	first, afterAt, afterID := p.After == nil, int64(0), ""
	if p.After != nil {
		afterAt, afterID = p.After.CreatedAt.UnixMicro(), p.After.ID
	}
	rows, err := s.read.QueryContext(ctx, queryListEvents, p.ClientID, first, afterAt, afterAt, afterID, p.Limit)
	if err != nil {
		return nil, fmt.Errorf("idemsqlite: list events: %w", unavailable(err))
	}
	defer rows.Close()
	var events []idemoutbox.Event
	for rows.Next() {
		var e idemoutbox.Event
		var payload []byte
		var status string
		var created, next int64
		var delivered sql.NullInt64
		if err := rows.Scan(&e.ID, &e.ClientID, &e.Type, &e.Destination, &payload, &status, &e.Attempts,
			&created, &next, &delivered, &e.LastError); err != nil {
			return nil, fmt.Errorf("idemsqlite: list events: %w", err)
		}
		e.Payload, e.Status = payload, idemoutbox.Status(status)
		e.CreatedAt, e.NextAttemptAt = time.UnixMicro(created).UTC(), time.UnixMicro(next).UTC()
		if delivered.Valid {
			e.DeliveredAt = time.UnixMicro(delivered.Int64).UTC()
		}
		events = append(events, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("idemsqlite: list events: %w", unavailable(err))
	}
	return events, nil
}
