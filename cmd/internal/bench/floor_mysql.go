package bench

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"github.com/idemkit/idem/cmd/internal/payments"
)

// The floors on MySQL and MariaDB. MySQL's protocol has no pipelining: a
// statement is a round trip, and the least that a design which claims a
// key before its handler writes can send is its statements one by one, on
// the store's own sessions (READ COMMITTED, parameters interpolated):
//
//   - FloorInsertFirst (atomic mode's shape): START TRANSACTION, the INSERT
//     of the started key row (the claim), the handler's INSERT, the UPDATE
//     of the key row to completed, COMMIT: five round trips.
//   - Floor2Commit (two-phase mode's shape): the started key row inserted
//     and committed on its own (autocommit), then START TRANSACTION, the
//     handler's INSERT, the key row's UPDATE, COMMIT: five round trips and
//     two commits.
//
// Like the PostgreSQL floors they check nothing and answer no retry.
const (
	FloorInsertFirst = "floor-insert-first"
)

// MySQLFloorVariants lists the floor variants that run on MySQL, only when
// asked for.
var MySQLFloorVariants = []string{FloorInsertFirst, Floor2Commit}

// mysqlFloorRepo is the repository of a floor variant on MySQL.
type mysqlFloorRepo struct {
	payments.Repo // Get
	db            *sql.DB
	variant       string
}

const (
	mysqlFloorInsertStarted = `INSERT INTO idempotency_keys
    (client_id, idempotency_key, request_method, request_path, request_hash,
     status, lease_token, created_at, locked_at, lease_expires_at)
VALUES (?, ?, 'POST', '/v1/payments', ?, 'started', 1, ?, ?, ?)`
	mysqlFloorComplete = `UPDATE idempotency_keys
SET status = 'completed', response_status = 201, response_headers = ?, response_body = ?,
    completed_at = ?, locked_at = NULL, lease_expires_at = NULL
WHERE client_id = ? AND idempotency_key = ? AND lease_token = 1`
)

// Insert writes p and the key row of the request's key (see withKeyScope)
// in the statements of the variant.
func (r *mysqlFloorRepo) Insert(ctx context.Context, p *payments.Payment) error {
	body, err := json.Marshal(p)
	if err != nil {
		return err
	}
	hash := sha256.Sum256([]byte(p.IdempotencyKey))
	now := time.Now().UnixMicro()
	key := []any{p.ClientID, p.IdempotencyKey, hash[:], now, now, now + int64(time.Minute/time.Microsecond)}
	if r.variant == Floor2Commit {
		if _, err := r.db.ExecContext(ctx, mysqlFloorInsertStarted, key...); err != nil {
			return fmt.Errorf("bench: floor: %w", err)
		}
	}
	tx, err := r.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("bench: floor: %w", err)
	}
	defer tx.Rollback()
	if r.variant == FloorInsertFirst {
		if _, err := tx.ExecContext(ctx, mysqlFloorInsertStarted, key...); err != nil {
			return fmt.Errorf("bench: floor: %w", err)
		}
	}
	if _, err := tx.ExecContext(ctx, payments.SQLiteInsert, p.ID, p.ClientID, p.Amount, p.Currency, p.Customer, p.Description, p.Status, p.Created, p.IdempotencyKey); err != nil {
		return fmt.Errorf("bench: floor: %w", err)
	}
	if _, err := tx.ExecContext(ctx, mysqlFloorComplete, floorHeaders, body, time.Now().UnixMicro(), p.ClientID, p.IdempotencyKey); err != nil {
		return fmt.Errorf("bench: floor: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("bench: floor: %w", err)
	}
	return nil
}
