package main

import (
	"context"
	"fmt"
	"time"

	"github.com/idemkit/idem/cmd/internal/database"
	"github.com/idemkit/idem/cmd/internal/proxy"
)

// The held keys' conditions on MySQL and MariaDB (idemmysql's table):
// bodies and recovery states are bytes, searched with LOCATE, which
// compares bytes when an operand is binary. MySQL has no numbered
// parameters: the markers are passed in the order they appear.
const (
	mysqlHeldWhere = `((status = 'completed' AND response_status IN (502, 504) AND (LOCATE(?, response_body) > 0 OR LOCATE(?, response_body) > 0))
   OR (status = 'started' AND locked_at IS NULL AND (recovery_point = ? OR (recovery_point = ? AND LOCATE(?, recovery_state) > 0))))`
	mysqlHeld    = `SELECT client_id, idempotency_key, request_method, request_path, created_at, status, COALESCE(recovery_point, '') FROM idempotency_keys WHERE ` + mysqlHeldWhere + ` ORDER BY created_at`
	mysqlRelease = `DELETE FROM idempotency_keys WHERE client_id = ? AND idempotency_key = ? AND ` + mysqlHeldWhere
)

// mysqlHeldArgs are the parameters of mysqlHeldWhere.
var mysqlHeldArgs = []any{heldMarker, legacyHeldMarker, proxy.RecoveryOutcomeUnknown, proxy.RecoveryForwarded, holdMarker}

// mysqlKeySQL reads and deletes held keys in a MySQL key store.
func mysqlKeySQL(d *database.DB) *keySQL {
	db := d.MySQL.DB()
	return &keySQL{
		held: func(ctx context.Context) ([]heldKey, error) {
			rows, err := db.QueryContext(ctx, mysqlHeld, mysqlHeldArgs...)
			if err != nil {
				return nil, fmt.Errorf("list held keys: %w", err)
			}
			return scanHeld(rows, func(micros int64) time.Time { return time.UnixMicro(micros) })
		},
		release: func(ctx context.Context, clientID, key string) (int64, error) {
			res, err := db.ExecContext(ctx, mysqlRelease, append([]any{clientID, key}, mysqlHeldArgs...)...)
			if err != nil {
				return 0, fmt.Errorf("release: %w", err)
			}
			return res.RowsAffected()
		},
		close: d.Close,
	}
}
