package bench

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem/cmd/internal/database"
	"github.com/idemkit/idem/cmd/internal/payments"
)

// The floor variants run the payments endpoint without the middleware, with
// a repository that writes the payment and a completed key row itself, in
// the fewest round trips that a design of each shape can take. They are no
// idempotency implementation (they check nothing and answer no retry); they
// measure what the database and the network allow on this machine, so that
// the middleware's ratios can be read against the best any design could do.
const (
	// Floor2RT is the least that any middleware which claims a key before
	// its handler writes can send: BEGIN, the key's advisory lock and the
	// handler's insert in one round trip, the key row and COMMIT in a
	// second.
	Floor2RT = "floor-2rt"
	// Floor2RTRead is Floor2RT with the check that a claim which answers
	// retries from the key row cannot skip: after the lock, in the same
	// first round trip, a read of the key, with a snapshot taken after the
	// lock. A request whose lock is taken or whose key exists rolls back.
	// It is the least that a middleware of atomic mode's shape can send.
	Floor2RTRead = "floor-2rt-read"
	// Floor1RT sends BEGIN, the lock, the payment, the key row and COMMIT
	// in one round trip, which needs every write known before the first
	// is sent: no middleware around a handler can do it.
	Floor1RT = "floor-1rt"
	// Floor2Commit is the least that a two-phase design can send: the key
	// row committed on its own before the handler runs (one round trip),
	// BEGIN with the handler's insert, and the key's update with COMMIT.
	Floor2Commit = "floor-2commit"
)

// FloorVariants lists the floor variants, which run only when asked for,
// on PostgreSQL; Floor2Commit runs on MySQL too (see MySQLFloorVariants).
var FloorVariants = []string{Floor2RT, Floor2RTRead, Floor1RT, Floor2Commit}

// floorRepo is the repository of a floor variant.
type floorRepo struct {
	payments.Repo // Get
	pool          *pgxpool.Pool
	variant       string
}

const floorInsertPayment = `INSERT INTO payments
    (id, client_id, amount, currency, customer, description, status, created, idempotency_key)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`

const floorInsertKey = `INSERT INTO idempotency_keys
    (client_id, idempotency_key, request_method, request_path, request_hash, request_fields,
     status, lease_token, response_status, response_headers, response_body,
     created_at, locked_at, completed_at)
VALUES ($1, $2, 'POST', '/v1/payments', $3, NULL, 'completed', 1, 201, $4, $5, $6, $6, $6)`

const floorInsertStarted = `INSERT INTO idempotency_keys
    (client_id, idempotency_key, request_method, request_path, request_hash,
     status, lease_token, created_at, locked_at)
VALUES ($1, $2, 'POST', '/v1/payments', $3, 'started', 1, $4, $4)`

const floorCompleteKey = `UPDATE idempotency_keys
SET status = 'completed', response_status = 201, response_headers = $3, response_body = $4, completed_at = $5
WHERE client_id = $1 AND idempotency_key = $2 AND lease_token = 1`

// floorReadKey is the read of Floor2RTRead: whether the key has a row.
const floorReadKey = `SELECT EXISTS (SELECT 1 FROM idempotency_keys WHERE client_id = $1 AND idempotency_key = $2)`

// errFloorKeyTaken is Floor2RTRead's answer to a key that is held or
// exists: it rolled back.
var errFloorKeyTaken = errors.New("bench: floor: the key is held or exists; rolled back")

var floorHeaders = []byte(`{"Content-Type":["application/json"]}`)

// Insert writes p and a completed key row for the request's key (see
// withKeyScope).
func (r *floorRepo) Insert(ctx context.Context, p *payments.Payment) error {
	body, err := json.Marshal(p)
	if err != nil {
		return err
	}
	hash := sha256.Sum256([]byte(p.IdempotencyKey))
	now := time.Now()
	conn, err := r.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	lock := int64(binary.BigEndian.Uint64(hash[:8]))
	if r.variant == Floor2Commit {
		return r.twoCommits(ctx, conn, p, hash[:], body, lock, now)
	}
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	lockQuery := b.Queue(`SELECT pg_try_advisory_xact_lock($1::bigint)`, lock)
	var locked, exists bool
	if r.variant == Floor2RTRead {
		lockQuery.QueryRow(func(row pgx.Row) error { return row.Scan(&locked) })
		b.Queue(floorReadKey, p.ClientID, p.IdempotencyKey).QueryRow(func(row pgx.Row) error { return row.Scan(&exists) })
	}
	b.Queue(floorInsertPayment, p.ID, p.ClientID, p.Amount, p.Currency, p.Customer, p.Description, p.Status, p.Created, p.IdempotencyKey)
	if r.variant == Floor2RT || r.variant == Floor2RTRead {
		if err := conn.SendBatch(ctx, b).Close(); err != nil {
			conn.Conn().Close(ctx) // a connection left in a transaction is not reused
			return fmt.Errorf("bench: floor: %w", err)
		}
		if r.variant == Floor2RTRead && (!locked || exists) {
			if _, err := conn.Exec(ctx, "ROLLBACK"); err != nil {
				conn.Conn().Close(ctx)
			}
			return errFloorKeyTaken
		}
		b = &pgx.Batch{}
	}
	b.Queue(floorInsertKey, p.ClientID, p.IdempotencyKey, hash[:], floorHeaders, body, now)
	b.Queue("COMMIT")
	if err := conn.SendBatch(ctx, b).Close(); err != nil {
		conn.Conn().Close(ctx)
		return fmt.Errorf("bench: floor: %w", err)
	}
	return nil
}

// twoCommits is Floor2Commit's Insert.
func (r *floorRepo) twoCommits(ctx context.Context, conn *pgxpool.Conn, p *payments.Payment, hash, body []byte, lock int64, now time.Time) error {
	b := &pgx.Batch{}
	b.Queue(`SELECT pg_try_advisory_xact_lock($1::bigint)`, lock)
	b.Queue(floorInsertStarted, p.ClientID, p.IdempotencyKey, hash, now)
	if err := conn.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("bench: floor: %w", err)
	}
	b = &pgx.Batch{}
	b.Queue("BEGIN")
	b.Queue(floorInsertPayment, p.ID, p.ClientID, p.Amount, p.Currency, p.Customer, p.Description, p.Status, p.Created, p.IdempotencyKey)
	if err := conn.SendBatch(ctx, b).Close(); err != nil {
		conn.Conn().Close(ctx)
		return fmt.Errorf("bench: floor: %w", err)
	}
	b = &pgx.Batch{}
	b.Queue(floorCompleteKey, p.ClientID, p.IdempotencyKey, floorHeaders, body, time.Now())
	b.Queue("COMMIT")
	if err := conn.SendBatch(ctx, b).Close(); err != nil {
		conn.Conn().Close(ctx)
		return fmt.Errorf("bench: floor: %w", err)
	}
	return nil
}

// newFloorRepo returns the repository of a floor variant.
func newFloorRepo(db *database.DB, repo payments.Repo, variant string) (payments.Repo, error) {
	if db.MySQL != nil && slices.Contains(MySQLFloorVariants, variant) {
		return &mysqlFloorRepo{Repo: repo, db: db.MySQL.DB(), variant: variant}, nil
	}
	if db.Pool == nil {
		return nil, fmt.Errorf("bench: %s needs PostgreSQL", variant)
	}
	return &floorRepo{Repo: repo, pool: db.Pool, variant: variant}, nil
}
