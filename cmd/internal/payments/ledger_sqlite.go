package payments

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/idemkit/idem/idemsqlite"
)

// SQLiteLedger keeps accounts and transfers in the idemsqlite store's
// database.
type SQLiteLedger struct {
	store *idemsqlite.Store
}

var _ LedgerRepo = (*SQLiteLedger)(nil)

const sqliteLedgerSchema = `CREATE TABLE IF NOT EXISTS accounts (
    id              TEXT    PRIMARY KEY,
    client_id       TEXT    NOT NULL,
    currency        TEXT    NOT NULL,
    balance         INTEGER NOT NULL CHECK (balance >= 0 AND balance <= 9007199254740991),
    created         INTEGER NOT NULL,
    idempotency_key TEXT    NOT NULL
);
CREATE TABLE IF NOT EXISTS transfers (
    id              TEXT    PRIMARY KEY,
    client_id       TEXT    NOT NULL,
    from_account    TEXT    NOT NULL REFERENCES accounts (id),
    to_account      TEXT    NOT NULL REFERENCES accounts (id),
    amount          INTEGER NOT NULL CHECK (amount > 0),
    currency        TEXT    NOT NULL,
    created         INTEGER NOT NULL,
    idempotency_key TEXT    NOT NULL,
    CHECK (from_account <> to_account)
);
CREATE INDEX IF NOT EXISTS transfers_client_key_idx ON transfers (client_id, idempotency_key)`

// Statements of the SQLite ledger.
const (
	sqliteAccountInsert = `INSERT INTO accounts (id, client_id, currency, balance, created, idempotency_key)
VALUES (?, ?, ?, ?, ?, ?)`
	sqliteAccountGet = `SELECT id, currency, balance, created, idempotency_key
FROM accounts WHERE client_id = ? AND id = ?`
	// SQLite has one writer: the transaction holds the write lock, and
	// reading the account is enough.
	sqliteAccountRead    = `SELECT currency, balance FROM accounts WHERE client_id = ? AND id = ?`
	sqliteAccountAdd     = `UPDATE accounts SET balance = balance + ? WHERE client_id = ? AND id = ?`
	sqliteTransferInsert = `INSERT INTO transfers (id, client_id, from_account, to_account, amount, currency, created, idempotency_key)
VALUES (?, ?, ?, ?, ?, ?, ?, ?)`
	sqliteTransferColumns = `id, from_account, to_account, amount, currency, created, idempotency_key`
	sqliteTransferGet     = `SELECT ` + sqliteTransferColumns + ` FROM transfers WHERE client_id = ? AND id = ?`
	sqliteTransfersByKey  = `SELECT ` + sqliteTransferColumns + ` FROM transfers WHERE client_id = ? AND idempotency_key = ? ORDER BY id`
)

// NewSQLiteLedger creates the accounts and transfers tables if needed.
func NewSQLiteLedger(ctx context.Context, store *idemsqlite.Store) (*SQLiteLedger, error) {
	if _, err := store.DB().ExecContext(ctx, sqliteLedgerSchema); err != nil {
		return nil, fmt.Errorf("payments: create ledger tables: %w", err)
	}
	return &SQLiteLedger{store: store}, nil
}

// inTx runs fn in the request's idempotency transaction, or in a
// transaction of its own when the request has none.
func (r *SQLiteLedger) inTx(ctx context.Context, fn func(*sql.Tx) error) error {
	tx, err := idemsqlite.TxFromContext(ctx)
	switch {
	case err == nil:
		return fn(tx)
	case !errors.Is(err, idemsqlite.ErrNoTx):
		return err
	}
	tx, err = r.store.DB().BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		return errors.Join(err, tx.Rollback())
	}
	return tx.Commit()
}

// CreateAccount records a.
func (r *SQLiteLedger) CreateAccount(ctx context.Context, a *Account) error {
	err := r.inTx(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, sqliteAccountInsert, a.ID, a.ClientID, a.Currency, a.Balance, a.Created, a.IdempotencyKey)
		return err
	})
	if err != nil {
		return fmt.Errorf("payments: create account: %w", err)
	}
	return nil
}

// Account returns an account of the client.
func (r *SQLiteLedger) Account(ctx context.Context, clientID, id string) (*Account, error) {
	a := &Account{Object: "account", ClientID: clientID}
	err := r.store.ReadDB().QueryRowContext(ctx, sqliteAccountGet, clientID, id).Scan(&a.ID, &a.Currency, &a.Balance, &a.Created, &a.IdempotencyKey)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, ErrAccountNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("payments: get account: %w", err)
	}
	return a, nil
}

// Move moves t.Amount from t.From to t.To and records t, in the order
// PostgresLedger uses.
func (r *SQLiteLedger) Move(ctx context.Context, t *Transfer) error {
	return r.inTx(ctx, func(tx *sql.Tx) error {
		read := func(id string) (ledgerRow, error) {
			var a ledgerRow
			err := tx.QueryRowContext(ctx, sqliteAccountRead, t.ClientID, id).Scan(&a.currency, &a.balance)
			if errors.Is(err, sql.ErrNoRows) {
				return a, ErrAccountNotFound
			}
			if err != nil {
				return a, fmt.Errorf("payments: read account: %w", err)
			}
			return a, nil
		}
		from, to, err := lockInOrder(t, read)
		if err != nil {
			return err
		}
		if err := checkMove(t, from, to); err != nil {
			return err
		}
		t.Currency = from.currency
		for _, st := range []struct {
			query string
			args  []any
		}{
			{sqliteAccountAdd, []any{-t.Amount, t.ClientID, t.From}},
			{sqliteAccountAdd, []any{t.Amount, t.ClientID, t.To}},
			{sqliteTransferInsert, []any{t.ID, t.ClientID, t.From, t.To, t.Amount, t.Currency, t.Created, t.IdempotencyKey}},
		} {
			if _, err := tx.ExecContext(ctx, st.query, st.args...); err != nil {
				return fmt.Errorf("payments: move: %w", err)
			}
		}
		return nil
	})
}

// Transfer returns a transfer of the client.
func (r *SQLiteLedger) Transfer(ctx context.Context, clientID, id string) (*Transfer, error) {
	ts, err := r.transfers(ctx, sqliteTransferGet, clientID, id)
	switch {
	case err != nil:
		return nil, fmt.Errorf("payments: get transfer: %w", err)
	case len(ts) == 0:
		return nil, ErrTransferNotFound
	}
	return ts[0], nil
}

// TransfersByKey returns the transfers made with a client's key.
func (r *SQLiteLedger) TransfersByKey(ctx context.Context, clientID, key string) ([]*Transfer, error) {
	ts, err := r.transfers(ctx, sqliteTransfersByKey, clientID, key)
	if err != nil {
		return nil, fmt.Errorf("payments: transfers by key: %w", err)
	}
	return ts, nil
}

func (r *SQLiteLedger) transfers(ctx context.Context, query, clientID, arg string) ([]*Transfer, error) {
	rows, err := r.store.ReadDB().QueryContext(ctx, query, clientID, arg)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var ts []*Transfer
	for rows.Next() {
		t := &Transfer{Object: "transfer", ClientID: clientID}
		if err := rows.Scan(&t.ID, &t.From, &t.To, &t.Amount, &t.Currency, &t.Created, &t.IdempotencyKey); err != nil {
			return nil, err
		}
		ts = append(ts, t)
	}
	return ts, rows.Err()
}
