package payments

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem/idempg"
)

// PostgresLedger keeps accounts and transfers in PostgreSQL, in the same
// database as the idempg store.
type PostgresLedger struct {
	pool *pgxpool.Pool
}

var _ LedgerRepo = (*PostgresLedger)(nil)

// The CHECK on balance is the last guard of the money invariant: Move
// refuses an overdraft before it writes, and the database refuses one
// that got past it.
const postgresLedgerSchema = `CREATE TABLE IF NOT EXISTS accounts (
    id              text   PRIMARY KEY,
    client_id       text   NOT NULL,
    currency        text   NOT NULL,
    balance         bigint NOT NULL CHECK (balance >= 0 AND balance <= 9007199254740991),
    created         bigint NOT NULL,
    idempotency_key text   NOT NULL
);
CREATE TABLE IF NOT EXISTS transfers (
    id              text   PRIMARY KEY,
    client_id       text   NOT NULL,
    from_account    text   NOT NULL REFERENCES accounts (id),
    to_account      text   NOT NULL REFERENCES accounts (id),
    amount          bigint NOT NULL CHECK (amount > 0),
    currency        text   NOT NULL,
    created         bigint NOT NULL,
    idempotency_key text   NOT NULL,
    CHECK (from_account <> to_account)
);
CREATE INDEX IF NOT EXISTS transfers_client_key_idx ON transfers (client_id, idempotency_key)`

// Statements of the PostgreSQL ledger.
const (
	postgresAccountInsert = `INSERT INTO accounts (id, client_id, currency, balance, created, idempotency_key)
VALUES ($1, $2, $3, $4, $5, $6)`
	postgresAccountGet = `SELECT id, currency, balance, created, idempotency_key
FROM accounts WHERE client_id = $1 AND id = $2`
	// postgresAccountLock locks one account of a client until the
	// transaction ends; Move takes the lower id first.
	postgresAccountLock = `SELECT currency, balance FROM accounts WHERE client_id = $1 AND id = $2 FOR UPDATE`
	// postgresTransferMove debits, credits and records the transfer in one
	// round trip: client_id, id, from, to, amount, currency, created,
	// idempotency_key.
	postgresTransferMove = `WITH debit AS (
    UPDATE accounts SET balance = balance - $5 WHERE client_id = $1 AND id = $3
), credit AS (
    UPDATE accounts SET balance = balance + $5 WHERE client_id = $1 AND id = $4
)
INSERT INTO transfers (id, client_id, from_account, to_account, amount, currency, created, idempotency_key)
VALUES ($2, $1, $3, $4, $5, $6, $7, $8)`
	postgresTransferColumns = `id, from_account, to_account, amount, currency, created, idempotency_key`
	postgresTransferGet     = `SELECT ` + postgresTransferColumns + ` FROM transfers WHERE client_id = $1 AND id = $2`
	postgresTransfersByKey  = `SELECT ` + postgresTransferColumns + ` FROM transfers WHERE client_id = $1 AND idempotency_key = $2 ORDER BY id`
)

// NewPostgresLedger creates the accounts and transfers tables if needed;
// without advisory locks when noAdvisoryLocks is set.
func NewPostgresLedger(ctx context.Context, pool *pgxpool.Pool, noAdvisoryLocks bool) (*PostgresLedger, error) {
	if err := createPostgresSchema(ctx, pool, noAdvisoryLocks, postgresLedgerSchema); err != nil {
		return nil, fmt.Errorf("payments: create ledger tables: %w", err)
	}
	return &PostgresLedger{pool: pool}, nil
}

// inTx runs fn in the request's idempotency transaction, or in a
// transaction of its own when the request has none.
func (r *PostgresLedger) inTx(ctx context.Context, fn func(pgx.Tx) error) error {
	tx, err := idempg.TxFromContext(ctx)
	switch {
	case err == nil:
		return fn(tx)
	case errors.Is(err, idempg.ErrNoTx):
		return pgx.BeginFunc(ctx, r.pool, fn)
	}
	return err
}

// CreateAccount records a.
func (r *PostgresLedger) CreateAccount(ctx context.Context, a *Account) error {
	err := r.inTx(ctx, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, postgresAccountInsert, a.ID, a.ClientID, a.Currency, a.Balance, a.Created, a.IdempotencyKey)
		return err
	})
	if err != nil {
		return fmt.Errorf("payments: create account: %w", err)
	}
	return nil
}

// Account returns an account of the client.
func (r *PostgresLedger) Account(ctx context.Context, clientID, id string) (*Account, error) {
	a := &Account{Object: "account", ClientID: clientID}
	err := r.pool.QueryRow(ctx, postgresAccountGet, clientID, id).Scan(&a.ID, &a.Currency, &a.Balance, &a.Created, &a.IdempotencyKey)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrAccountNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("payments: get account: %w", err)
	}
	return a, nil
}

// Move moves t.Amount from t.From to t.To and records t. Both rows are
// locked, the lower id first, so that transfers in opposite directions
// between two accounts queue instead of deadlocking.
func (r *PostgresLedger) Move(ctx context.Context, t *Transfer) error {
	return r.inTx(ctx, func(tx pgx.Tx) error {
		lock := func(id string) (ledgerRow, error) {
			var a ledgerRow
			err := tx.QueryRow(ctx, postgresAccountLock, t.ClientID, id).Scan(&a.currency, &a.balance)
			if errors.Is(err, pgx.ErrNoRows) {
				return a, ErrAccountNotFound
			}
			if err != nil {
				return a, fmt.Errorf("payments: lock account: %w", err)
			}
			return a, nil
		}
		from, to, err := lockInOrder(t, lock)
		if err != nil {
			return err
		}
		if err := checkMove(t, from, to); err != nil {
			return err
		}
		t.Currency = from.currency
		_, err = tx.Exec(ctx, postgresTransferMove, t.ClientID, t.ID, t.From, t.To, t.Amount, t.Currency, t.Created, t.IdempotencyKey)
		if err != nil {
			return fmt.Errorf("payments: move: %w", err)
		}
		return nil
	})
}

// Transfer returns a transfer of the client.
func (r *PostgresLedger) Transfer(ctx context.Context, clientID, id string) (*Transfer, error) {
	rows, err := r.pool.Query(ctx, postgresTransferGet, clientID, id)
	if err != nil {
		return nil, fmt.Errorf("payments: get transfer: %w", err)
	}
	ts, err := scanTransfers(rows, clientID)
	switch {
	case err != nil:
		return nil, fmt.Errorf("payments: get transfer: %w", err)
	case len(ts) == 0:
		return nil, ErrTransferNotFound
	}
	return ts[0], nil
}

// TransfersByKey returns the transfers made with a client's key.
func (r *PostgresLedger) TransfersByKey(ctx context.Context, clientID, key string) ([]*Transfer, error) {
	rows, err := r.pool.Query(ctx, postgresTransfersByKey, clientID, key)
	if err != nil {
		return nil, fmt.Errorf("payments: transfers by key: %w", err)
	}
	ts, err := scanTransfers(rows, clientID)
	if err != nil {
		return nil, fmt.Errorf("payments: transfers by key: %w", err)
	}
	return ts, nil
}

func scanTransfers(rows pgx.Rows, clientID string) ([]*Transfer, error) {
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (*Transfer, error) {
		t := &Transfer{Object: "transfer", ClientID: clientID}
		err := row.Scan(&t.ID, &t.From, &t.To, &t.Amount, &t.Currency, &t.Created, &t.IdempotencyKey)
		return t, err
	})
}
