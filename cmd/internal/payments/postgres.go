package payments

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem/idempg"
)

// PostgresRepo keeps payments in PostgreSQL, in the same database as the
// idempg store.
type PostgresRepo struct {
	pool *pgxpool.Pool
}

var _ Repo = (*PostgresRepo)(nil)

// postgresSchemaLock serialises schema creation across instances starting
// at once; CREATE TABLE IF NOT EXISTS alone races on the catalog.
const postgresSchemaLock = 0x70617973 // "pays"

const postgresSchema = `CREATE TABLE IF NOT EXISTS payments (
    id              text        PRIMARY KEY,
    client_id       text        NOT NULL,
    amount          bigint      NOT NULL CHECK (amount > 0),
    currency        text        NOT NULL,
    customer        text        NOT NULL,
    description     text        NOT NULL DEFAULT '',
    status          text        NOT NULL,
    created         bigint      NOT NULL,
    idempotency_key text        NOT NULL
);
CREATE INDEX IF NOT EXISTS payments_client_key_idx ON payments (client_id, idempotency_key)`

// PostgresInsert inserts a payment: id, client_id, amount, currency,
// customer, description, status, created, idempotency_key.
const PostgresInsert = `INSERT INTO payments
    (id, client_id, amount, currency, customer, description, status, created, idempotency_key)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`

// NewPostgresRepo creates the payments table if needed; without advisory
// locks (idempg.Config.NoAdvisoryLocks) when noAdvisoryLocks is set.
func NewPostgresRepo(ctx context.Context, pool *pgxpool.Pool, noAdvisoryLocks bool) (*PostgresRepo, error) {
	if err := createPostgresSchema(ctx, pool, noAdvisoryLocks, postgresSchema); err != nil {
		return nil, fmt.Errorf("payments: create table: %w", err)
	}
	return &PostgresRepo{pool: pool}, nil
}

// createPostgresSchema runs schema, statements of CREATE ... IF NOT
// EXISTS, in a transaction that first takes a lock that serialises schema
// creation across instances starting at once (concurrent CREATE TABLE IF
// NOT EXISTS can fail on the catalog's unique index): the advisory lock
// postgresSchemaLock, or, with noAdvisoryLocks, the lock on idempg's
// version table that its migrations take without advisory locks (the
// store is migrated before the application's tables are made).
func createPostgresSchema(ctx context.Context, pool *pgxpool.Pool, noAdvisoryLocks bool, schema string) error {
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		var err error
		if noAdvisoryLocks {
			_, err = tx.Exec(ctx, `LOCK TABLE idem_schema_migrations IN EXCLUSIVE MODE`)
		} else {
			_, err = tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, postgresSchemaLock)
		}
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, schema)
		return err
	})
}

// Insert records p in the request's idempotency transaction, or on its own
// when the request has none.
func (r *PostgresRepo) Insert(ctx context.Context, p *Payment) error {
	tx, err := idempg.TxFromContext(ctx)
	switch {
	case err == nil:
		return r.insert(ctx, tx, p)
	case errors.Is(err, idempg.ErrNoTx):
		return r.insert(ctx, r.pool, p)
	}
	return err
}

func (r *PostgresRepo) insert(ctx context.Context, db interface {
	Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
}, p *Payment) error {
	_, err := db.Exec(ctx, PostgresInsert,
		p.ID, p.ClientID, p.Amount, p.Currency, p.Customer, p.Description, p.Status, p.Created, p.IdempotencyKey)
	if err != nil {
		return fmt.Errorf("payments: insert: %w", err)
	}
	return nil
}

// Get returns a payment of the client.
func (r *PostgresRepo) Get(ctx context.Context, clientID, id string) (*Payment, error) {
	p := &Payment{Object: "payment", ClientID: clientID}
	err := r.pool.QueryRow(ctx, `SELECT id, amount, currency, customer, description, status, created, idempotency_key
FROM payments WHERE client_id = $1 AND id = $2`, clientID, id).Scan(
		&p.ID, &p.Amount, &p.Currency, &p.Customer, &p.Description, &p.Status, &p.Created, &p.IdempotencyKey)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("payments: get: %w", err)
	}
	return p, nil
}

// Count returns the number of payments made with a client's key.
func (r *PostgresRepo) Count(ctx context.Context, clientID, key string) (int, error) {
	var n int
	err := r.pool.QueryRow(ctx, `SELECT count(*) FROM payments WHERE client_id = $1 AND idempotency_key = $2`, clientID, key).Scan(&n)
	return n, err
}
