package idempg

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idem/idemwebhook"
)

var _ idemwebhook.Watermarks = (*Store)(nil)

// queryAdvanceWatermark moves an object's watermark forward, never back:
// at READ COMMITTED, a concurrent transaction's upsert of the same object
// waits for this one's row lock and then compares with the committed row.
const queryAdvanceWatermark = `
INSERT INTO idem_webhook_watermarks AS w (endpoint, object, event_time, event_id, updated_at)
VALUES ($1, $2, $3, $4, now())
ON CONFLICT (endpoint, object) DO UPDATE
SET event_time = excluded.event_time, event_id = excluded.event_id, updated_at = excluded.updated_at
WHERE (w.event_time, w.event_id) < (excluded.event_time, excluded.event_id)
RETURNING true`

// AdvanceWatermark implements idemwebhook.Watermarks in the transaction of
// the lease whose context ctx is (see [TxFromContext]). Handlers call it
// through idemwebhook.Newest.
func (s *Store) AdvanceWatermark(ctx context.Context, p idemwebhook.WatermarkParams) (bool, error) {
	tx, err := TxFromContext(ctx)
	if err != nil {
		return false, err
	}
	return s.AdvanceWatermarkTx(ctx, tx, p)
}

// AdvanceWatermarkTx is [Store.AdvanceWatermark] in tx, a transaction of
// the caller's.
func (s *Store) AdvanceWatermarkTx(ctx context.Context, tx pgx.Tx, p idemwebhook.WatermarkParams) (bool, error) {
	if p.Endpoint == "" || p.Object == "" || p.EventID == "" || p.Time.IsZero() {
		return false, errors.New("idempg: advance watermark: Endpoint, Object, EventID and Time are required")
	}
	var moved bool
	err := tx.QueryRow(ctx, queryAdvanceWatermark, p.Endpoint, p.Object, p.Time.Truncate(time.Microsecond).UTC(), p.EventID).Scan(&moved)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return false, nil
	case err != nil:
		return false, wrapErr(ctx, "advance watermark", err)
	}
	return moved, nil
}
