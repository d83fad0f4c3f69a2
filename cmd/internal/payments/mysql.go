package payments

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/idemkit/idem/idemmysql"
)

// MySQLRepo keeps payments in the idemmysql store's database (MySQL or
// MariaDB).
type MySQLRepo struct {
	store *idemmysql.Store
}

var _ Repo = (*MySQLRepo)(nil)

// mysqlText is the type of the tables' text columns: compared byte for
// byte, as the key store's.
const mysqlText = `VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin`

var mysqlSchema = []string{`CREATE TABLE IF NOT EXISTS payments (
    id              ` + mysqlText + ` NOT NULL PRIMARY KEY,
    client_id       ` + mysqlText + ` NOT NULL,
    amount          BIGINT NOT NULL CHECK (amount > 0),
    currency        ` + mysqlText + ` NOT NULL,
    customer        ` + mysqlText + ` NOT NULL,
    description     TEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    status          ` + mysqlText + ` NOT NULL,
    created         BIGINT NOT NULL,
    idempotency_key ` + mysqlText + ` NOT NULL,
    INDEX payments_client_key_idx (client_id, idempotency_key)
) ENGINE = InnoDB`}

// NewMySQLRepo creates the payments table if needed.
func NewMySQLRepo(ctx context.Context, store *idemmysql.Store) (*MySQLRepo, error) {
	for _, q := range mysqlSchema {
		if _, err := store.DB().ExecContext(ctx, q); err != nil {
			return nil, fmt.Errorf("payments: create table: %w", err)
		}
	}
	return &MySQLRepo{store: store}, nil
}

// mysqlExecer is a transaction or the pool.
type mysqlExecer interface {
	ExecContext(context.Context, string, ...any) (sql.Result, error)
}

// Insert records p in the request's idempotency transaction, or on its own
// when the request has none.
func (r *MySQLRepo) Insert(ctx context.Context, p *Payment) error {
	var db mysqlExecer = r.store.DB()
	tx, err := idemmysql.TxFromContext(ctx)
	switch {
	case err == nil:
		db = tx
	case !errors.Is(err, idemmysql.ErrNoTx):
		return err
	}
	_, err = db.ExecContext(ctx, SQLiteInsert,
		p.ID, p.ClientID, p.Amount, p.Currency, p.Customer, p.Description, p.Status, p.Created, p.IdempotencyKey)
	if err != nil {
		return fmt.Errorf("payments: insert: %w", err)
	}
	return nil
}

const mysqlPaymentGet = `SELECT id, amount, currency, customer, description, status, created, idempotency_key
FROM payments WHERE client_id = ? AND id = ?`

// Get returns a payment of the client.
func (r *MySQLRepo) Get(ctx context.Context, clientID, id string) (*Payment, error) {
	p := &Payment{Object: "payment", ClientID: clientID}
	err := r.store.DB().QueryRowContext(ctx, mysqlPaymentGet, clientID, id).Scan(
		&p.ID, &p.Amount, &p.Currency, &p.Customer, &p.Description, &p.Status, &p.Created, &p.IdempotencyKey)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("payments: get: %w", err)
	}
	return p, nil
}

// Count returns the number of payments made with a client's key.
func (r *MySQLRepo) Count(ctx context.Context, clientID, key string) (int, error) {
	var n int
	err := r.store.DB().QueryRowContext(ctx, `SELECT COUNT(*) FROM payments WHERE client_id = ? AND idempotency_key = ?`, clientID, key).Scan(&n)
	return n, err
}

// Settle implements settler. MariaDB 10.11 has no UPDATE ... RETURNING:
// the update, then a read in the same transaction.
func (r *MySQLRepo) Settle(ctx context.Context, clientID, id, status string) (*Payment, error) {
	tx, err := idemmysql.TxFromContext(ctx)
	if err != nil {
		return nil, err
	}
	res, err := tx.ExecContext(ctx, `UPDATE payments SET status = ? WHERE client_id = ? AND id = ? AND status = 'pending'`, status, clientID, id)
	if err != nil {
		return settled(nil, id, err, false)
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		return settled(nil, id, err, err == nil)
	}
	p := &Payment{Object: "payment", ClientID: clientID}
	err = tx.QueryRowContext(ctx, mysqlPaymentGet, clientID, id).Scan(
		&p.ID, &p.Amount, &p.Currency, &p.Customer, &p.Description, &p.Status, &p.Created, &p.IdempotencyKey)
	return settled(p, id, err, errors.Is(err, sql.ErrNoRows))
}

// MySQLLedger keeps accounts and transfers in the idemmysql store's
// database.
type MySQLLedger struct {
	store *idemmysql.Store
}

var _ LedgerRepo = (*MySQLLedger)(nil)

var mysqlLedgerSchema = []string{`CREATE TABLE IF NOT EXISTS accounts (
    id              ` + mysqlText + ` NOT NULL PRIMARY KEY,
    client_id       ` + mysqlText + ` NOT NULL,
    currency        ` + mysqlText + ` NOT NULL,
    balance         BIGINT NOT NULL CHECK (balance >= 0 AND balance <= 9007199254740991),
    created         BIGINT NOT NULL,
    idempotency_key ` + mysqlText + ` NOT NULL
) ENGINE = InnoDB`, `CREATE TABLE IF NOT EXISTS transfers (
    id              ` + mysqlText + ` NOT NULL PRIMARY KEY,
    client_id       ` + mysqlText + ` NOT NULL,
    from_account    ` + mysqlText + ` NOT NULL,
    to_account      ` + mysqlText + ` NOT NULL,
    amount          BIGINT NOT NULL CHECK (amount > 0),
    currency        ` + mysqlText + ` NOT NULL,
    created         BIGINT NOT NULL,
    idempotency_key ` + mysqlText + ` NOT NULL,
    INDEX transfers_client_key_idx (client_id, idempotency_key),
    FOREIGN KEY (from_account) REFERENCES accounts (id),
    FOREIGN KEY (to_account) REFERENCES accounts (id),
    CHECK (from_account <> to_account)
) ENGINE = InnoDB`}

// mysqlAccountLock reads an account and locks its row: under READ
// COMMITTED it locks that row only.
const mysqlAccountLock = `SELECT currency, balance FROM accounts WHERE client_id = ? AND id = ? FOR UPDATE`

// NewMySQLLedger creates the accounts and transfers tables if needed.
func NewMySQLLedger(ctx context.Context, store *idemmysql.Store) (*MySQLLedger, error) {
	for _, q := range mysqlLedgerSchema {
		if _, err := store.DB().ExecContext(ctx, q); err != nil {
			return nil, fmt.Errorf("payments: create ledger tables: %w", err)
		}
	}
	return &MySQLLedger{store: store}, nil
}

// inTx runs fn in the request's idempotency transaction, or in a
// transaction of its own when the request has none.
func (r *MySQLLedger) inTx(ctx context.Context, fn func(*sql.Tx) error) error {
	tx, err := idemmysql.TxFromContext(ctx)
	switch {
	case err == nil:
		return fn(tx)
	case !errors.Is(err, idemmysql.ErrNoTx):
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
func (r *MySQLLedger) CreateAccount(ctx context.Context, a *Account) error {
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
func (r *MySQLLedger) Account(ctx context.Context, clientID, id string) (*Account, error) {
	a := &Account{Object: "account", ClientID: clientID}
	err := r.store.DB().QueryRowContext(ctx, sqliteAccountGet, clientID, id).Scan(&a.ID, &a.Currency, &a.Balance, &a.Created, &a.IdempotencyKey)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, ErrAccountNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("payments: get account: %w", err)
	}
	return a, nil
}

// Move moves t.Amount from t.From to t.To and records t, locking the two
// accounts in the order PostgresLedger uses.
func (r *MySQLLedger) Move(ctx context.Context, t *Transfer) error {
	return r.inTx(ctx, func(tx *sql.Tx) error {
		lock := func(id string) (ledgerRow, error) {
			var a ledgerRow
			err := tx.QueryRowContext(ctx, mysqlAccountLock, t.ClientID, id).Scan(&a.currency, &a.balance)
			if errors.Is(err, sql.ErrNoRows) {
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
func (r *MySQLLedger) Transfer(ctx context.Context, clientID, id string) (*Transfer, error) {
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
func (r *MySQLLedger) TransfersByKey(ctx context.Context, clientID, key string) ([]*Transfer, error) {
	ts, err := r.transfers(ctx, sqliteTransfersByKey, clientID, key)
	if err != nil {
		return nil, fmt.Errorf("payments: transfers by key: %w", err)
	}
	return ts, nil
}

func (r *MySQLLedger) transfers(ctx context.Context, query, clientID, arg string) ([]*Transfer, error) {
	rows, err := r.store.DB().QueryContext(ctx, query, clientID, arg)
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
