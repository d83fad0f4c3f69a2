package idemsqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/idemkit/idem/idemwebhook"
)

var _ idemwebhook.Watermarks = (*Store)(nil)

// queryAdvanceWatermark moves an object's watermark forward, never back.
// SQLite has one writer at a time, so the comparison sees every committed
// watermark.
const queryAdvanceWatermark = `
INSERT INTO idem_webhook_watermarks AS w (endpoint, object, event_time, event_id, updated_at)
VALUES (?, ?, ?, ?, ?)
ON CONFLICT (endpoint, object) DO UPDATE
SET event_time = excluded.event_time, event_id = excluded.event_id, updated_at = excluded.updated_at
WHERE (w.event_time, w.event_id) < (excluded.event_time, excluded.event_id)
RETURNING 1`

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
// the caller's on [Store.DB].
func (s *Store) AdvanceWatermarkTx(ctx context.Context, tx *sql.Tx, p idemwebhook.WatermarkParams) (bool, error) {
	if p.Endpoint == "" || p.Object == "" || p.EventID == "" || p.Time.IsZero() {
		return false, errors.New("idemsqlite: advance watermark: Endpoint, Object, EventID and Time are required")
	}
	var one int
	err := tx.QueryRowContext(ctx, queryAdvanceWatermark, p.Endpoint, p.Object, p.Time.UnixMicro(), p.EventID, time.Now().UnixMicro()).Scan(&one)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("idemsqlite: advance watermark: %w", unavailable(err))
	}
	return true, nil
}
