package idemmysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/idemkit/idem/idemoutbox"
	"github.com/idemkit/idem/idemstore"
)

var _ idemoutbox.Store = (*Store)(nil)

// The outbox's statements.
const (
	// queryEnqueueEvent inserts an event unless one with its id exists.
	// Not INSERT IGNORE, which would turn every error, a value too long
	// included, into a warning.
	queryEnqueueEvent = `INSERT INTO idem_outbox
    (id, client_id, type, destination, payload, status, attempts, created_at, next_attempt_at)
VALUES (?, ?, ?, ?, ?, 'pending', 0, ?, ?)
ON DUPLICATE KEY UPDATE id = id`

	eventColumns = `id, client_id, type, destination, payload, attempts, created_at, next_attempt_at, COALESCE(last_error, '')`

	// queryTakeDueEvents locks up to ? pending events due at ?. Rows that
	// another relay holds are skipped, never waited for (SKIP LOCKED:
	// MariaDB 10.6, MySQL 8.0); they stay locked until the taking
	// transaction records their outcomes and commits.
	queryTakeDueEvents = `SELECT ` + eventColumns + `
FROM idem_outbox
WHERE status = 'pending' AND next_attempt_at <= ?
ORDER BY next_attempt_at
LIMIT ?
FOR UPDATE SKIP LOCKED`

	queryRecordOutcome = `UPDATE idem_outbox
SET status = ?, attempts = attempts + 1, next_attempt_at = ?, delivered_at = ?, last_error = COALESCE(NULLIF(?, ''), last_error)
WHERE id = ?`

	queryTakeDelivered = `SELECT id FROM idem_outbox
WHERE status = 'delivered' AND delivered_at < ?
LIMIT ?
FOR UPDATE SKIP LOCKED`

	queryRetryDead = `UPDATE idem_outbox
SET status = 'pending', attempts = 0, next_attempt_at = ?
WHERE status = 'dead'`

	queryOutboxStats = `SELECT COALESCE(SUM(status = 'pending'), 0),
       MIN(CASE WHEN status = 'pending' THEN created_at END),
       COALESCE(SUM(status = 'dead'), 0)
FROM idem_outbox`

	// queryListEvents lists a client's events, newest first, after the
	// cursor (first page, or created_at and id).
	queryListEvents = `SELECT id, client_id, type, destination, payload, status, attempts, created_at, next_attempt_at,
       delivered_at, COALESCE(last_error, '')
FROM idem_outbox
WHERE client_id = ? AND (? OR created_at < ? OR (created_at = ? AND id < ?))
ORDER BY created_at DESC, id DESC
LIMIT ?`
)

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
		return errors.New("idemmysql: enqueue event: the event has no id")
	}
	created := e.CreatedAt.UnixMicro()
	_, err := tx.ExecContext(ctx, queryEnqueueEvent, e.ID, e.ClientID, e.Type, e.Destination, []byte(e.Payload), created, created)
	if err != nil {
		return fmt.Errorf("idemmysql: enqueue event: %w", unavailable(err))
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
		return 0, errors.New("idemmysql: deliver batch: BatchParams.Limit must be positive")
	}
	lt, err := s.beginTx(ctx)
	if err != nil {
		return 0, err
	}
	committed := false
	defer func() {
		if !committed {
			lt.rollback()
		}
	}()
	rows, err := lt.tx.QueryContext(ctx, queryTakeDueEvents, p.Now.UnixMicro(), p.Limit)
	if err != nil {
		return 0, fmt.Errorf("idemmysql: deliver batch: take events: %w", unavailable(err))
	}
	var events []idemoutbox.Event
	for rows.Next() {
		e, err := scanEvent(rows.Scan)
		if err != nil {
			rows.Close()
			return 0, fmt.Errorf("idemmysql: deliver batch: take events: %w", unavailable(err))
		}
		events = append(events, e)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, fmt.Errorf("idemmysql: deliver batch: take events: %w", unavailable(err))
	}
	if len(events) == 0 {
		return 0, nil
	}
	outcomes := deliver(ctx, events)
	if len(outcomes) != len(events) {
		return 0, fmt.Errorf("idemmysql: deliver batch: %d outcomes for %d events", len(outcomes), len(events))
	}
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("idemmysql: deliver batch: %w", err) // rolled back: delivered again
	}
	for i, o := range outcomes {
		var delivered any
		if o.Status == idemoutbox.StatusDelivered {
			delivered = o.At.UnixMicro()
		}
		if _, err := lt.tx.ExecContext(ctx, queryRecordOutcome, string(o.Status), o.NextAttemptAt.UnixMicro(), delivered, o.Error, events[i].ID); err != nil {
			return 0, fmt.Errorf("idemmysql: deliver batch: record outcome: %w", unavailable(err))
		}
	}
	committed = true
	if err := lt.commit(); err != nil {
		return 0, fmt.Errorf("idemmysql: deliver batch: commit: %w", commitErr(err))
	}
	return len(events), nil
}

func scanEvent(scan func(...any) error) (idemoutbox.Event, error) {
	var (
		e             idemoutbox.Event
		payload       []byte
		created, next int64
	)
	err := scan(&e.ID, &e.ClientID, &e.Type, &e.Destination, &payload, &e.Attempts, &created, &next, &e.LastError)
	e.Payload, e.Status = payload, idemoutbox.StatusPending
	e.CreatedAt, e.NextAttemptAt = time.UnixMicro(created).UTC(), time.UnixMicro(next).UTC()
	return e, err
}

// PurgeEvents implements idemoutbox.Store: batched deletes of delivered
// events, each in its own short transaction, skipping locked rows, paced
// by p.Share as [Store.Purge] is.
func (s *Store) PurgeEvents(ctx context.Context, p idemoutbox.PurgeParams) (int64, error) {
	if err := p.Validate(); err != nil {
		return 0, fmt.Errorf("idemmysql: purge events: %w", err)
	}
	p = p.WithDefaults()
	var total int64
	for {
		start := time.Now()
		n, err := s.purgeEventsBatch(ctx, p)
		total += n
		if err != nil {
			return total, fmt.Errorf("idemmysql: purge events: %w", err)
		}
		if n < int64(p.BatchSize) {
			return total, nil
		}
		if err := idemstore.PurgeWait(ctx, time.Since(start), p.Share); err != nil {
			return total, fmt.Errorf("idemmysql: purge events: %w", err)
		}
	}
}

func (s *Store) purgeEventsBatch(ctx context.Context, p idemoutbox.PurgeParams) (int64, error) {
	var n int64
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		rows, err := tx.QueryContext(ctx, queryTakeDelivered, p.Before.UnixMicro(), p.BatchSize)
		if err != nil {
			return unavailable(err)
		}
		var (
			marks []string
			ids   []any
		)
		for rows.Next() {
			var id []byte
			if err := rows.Scan(&id); err != nil {
				rows.Close()
				return unavailable(err)
			}
			marks, ids = append(marks, "?"), append(ids, id)
		}
		rows.Close()
		if err := rows.Err(); err != nil || len(ids) == 0 {
			return err
		}
		res, err := tx.ExecContext(ctx, `DELETE FROM idem_outbox WHERE id IN (`+strings.Join(marks, ", ")+`)`, ids...)
		if err != nil {
			return unavailable(err)
		}
		n, _ = res.RowsAffected()
		return nil
	})
	return n, err
}

// OutboxStats implements idemoutbox.Store.
func (s *Store) OutboxStats(ctx context.Context) (idemoutbox.Stats, error) {
	var st idemoutbox.Stats
	var oldest sql.NullInt64
	if err := s.db.QueryRowContext(ctx, queryOutboxStats).Scan(&st.Pending, &oldest, &st.Dead); err != nil {
		return st, fmt.Errorf("idemmysql: outbox stats: %w", unavailable(err))
	}
	if oldest.Valid {
		st.OldestPending = time.UnixMicro(oldest.Int64).UTC()
	}
	return st, nil
}

// RetryDead implements idemoutbox.Store, in one statement: every dead
// event, or those whose id is among ids.
func (s *Store) RetryDead(ctx context.Context, now time.Time, ids ...string) (int64, error) {
	query, args := queryRetryDead, []any{now.UnixMicro()}
	if len(ids) > 0 {
		query += ` AND id IN (?` + strings.Repeat(", ?", len(ids)-1) + `)`
		for _, id := range ids {
			args = append(args, id)
		}
	}
	res, err := s.db.ExecContext(ctx, query, args...)
	if err != nil {
		return 0, fmt.Errorf("idemmysql: retry dead events: %w", unavailable(err))
	}
	n, _ := res.RowsAffected()
	return n, nil
}

// ListEvents implements idemoutbox.Store.
func (s *Store) ListEvents(ctx context.Context, p idemoutbox.ListParams) ([]idemoutbox.Event, error) {
	if p.ClientID == "" || p.Limit <= 0 {
		return nil, errors.New("idemmysql: list events: ListParams.ClientID and a positive Limit are required")
	}
	first, afterAt, afterID := p.After == nil, int64(0), ""
	if p.After != nil {
		afterAt, afterID = p.After.CreatedAt.UnixMicro(), p.After.ID
	}
	rows, err := s.db.QueryContext(ctx, queryListEvents, p.ClientID, first, afterAt, afterAt, afterID, p.Limit)
	if err != nil {
		return nil, fmt.Errorf("idemmysql: list events: %w", unavailable(err))
	}
	defer rows.Close()
	var events []idemoutbox.Event
	for rows.Next() {
		var (
			e             idemoutbox.Event
			payload       []byte
			status        string
			created, next int64
			delivered     sql.NullInt64
		)
		if err := rows.Scan(&e.ID, &e.ClientID, &e.Type, &e.Destination, &payload, &status, &e.Attempts,
			&created, &next, &delivered, &e.LastError); err != nil {
			return nil, fmt.Errorf("idemmysql: list events: %w", unavailable(err))
		}
		e.Payload, e.Status = payload, idemoutbox.Status(status)
		e.CreatedAt, e.NextAttemptAt = time.UnixMicro(created).UTC(), time.UnixMicro(next).UTC()
		if delivered.Valid {
			e.DeliveredAt = time.UnixMicro(delivered.Int64).UTC()
		}
		events = append(events, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("idemmysql: list events: %w", unavailable(err))
	}
	return events, nil
}
