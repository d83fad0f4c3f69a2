package payments

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/idemkit/idem/idemsqlite"
)

// SQLiteRepo keeps payments in the idemsqlite store's database.
type SQLiteRepo struct {
	store *idemsqlite.Store
}

var _ Repo = (*SQLiteRepo)(nil)

const sqliteSchema = `CREATE TABLE IF NOT EXISTS payments (
    id              TEXT    PRIMARY KEY,
    client_id       TEXT    NOT NULL,
    amount          INTEGER NOT NULL CHECK (amount > 0),
    currency        TEXT    NOT NULL,
    customer        TEXT    NOT NULL,
    description     TEXT    NOT NULL DEFAULT '',
    status          TEXT    NOT NULL,
    created         INTEGER NOT NULL,
    idempotency_key TEXT    NOT NULL
);
CREATE INDEX IF NOT EXISTS payments_client_key_idx ON payments (client_id, idempotency_key)`

// SQLiteInsert inserts a payment: id, client_id, amount, currency,
// customer, description, status, created, idempotency_key.
const SQLiteInsert = `INSERT INTO payments
    (id, client_id, amount, currency, customer, description, status, created, idempotency_key)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`

// NewSQLiteRepo creates the payments table if needed.
func NewSQLiteRepo(ctx context.Context, store *idemsqlite.Store) (*SQLiteRepo, error) {
	if _, err := store.DB().ExecContext(ctx, sqliteSchema); err != nil {
		return nil, fmt.Errorf("payments: create table: %w", err)
	}
	return &SQLiteRepo{store: store}, nil
}

// Insert records p in the request's idempotency transaction, or on its own
// when the request has none.
func (r *SQLiteRepo) Insert(ctx context.Context, p *Payment) error {
	tx, err := idemsqlite.TxFromContext(ctx)
	switch {
	case err == nil:
		return r.insert(ctx, tx, p)
	case errors.Is(err, idemsqlite.ErrNoTx):
		return r.insert(ctx, r.store.DB(), p)
	}
	return err
}

func (r *SQLiteRepo) insert(ctx context.Context, db interface {
	ExecContext(context.Context, string, ...any) (sql.Result, error)
}, p *Payment) error {
	_, err := db.ExecContext(ctx, SQLiteInsert,
		p.ID, p.ClientID, p.Amount, p.Currency, p.Customer, p.Description, p.Status, p.Created, p.IdempotencyKey)
	if err != nil {
		return fmt.Errorf("payments: insert: %w", err)
	}
	return nil
}

// Get returns a payment of the client.
func (r *SQLiteRepo) Get(ctx context.Context, clientID, id string) (*Payment, error) {
	p := &Payment{Object: "payment", ClientID: clientID}
	err := r.store.ReadDB().QueryRowContext(ctx, `SELECT id, amount, currency, customer, description, status, created, idempotency_key
FROM payments WHERE client_id = ? AND id = ?`, clientID, id).Scan(
		&p.ID, &p.Amount, &p.Currency, &p.Customer, &p.Description, &p.Status, &p.Created, &p.IdempotencyKey)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("payments: get: %w", err)
	}
	return p, nil
}

// Count returns the number of payments made with a client's key, for tests
// and operators checking that a key charged once.
func (r *SQLiteRepo) Count(ctx context.Context, clientID, key string) (int, error) {
	var n int
	err := r.store.ReadDB().QueryRowContext(ctx, `SELECT count(*) FROM payments WHERE client_id = ? AND idempotency_key = ?`, clientID, key).Scan(&n)
	return n, err
}
