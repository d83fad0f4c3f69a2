package processor

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idem/idempg"
	"github.com/idemkit/idem/idemsqlite"
	"github.com/idemkit/idem/idemstore"
)

// ledger is the charges table, on the database of the processor's key
// store. Every charge has a sequence number that orders charges by
// insertion (SQLite's rowid, a PostgreSQL identity column) and that list
// cursors carry; charges are never deleted.
type ledger interface {
	// migrate creates the table, or brings an older one up to date.
	migrate(ctx context.Context) error
	// chargeTx records c in the transaction of the request in ctx, unless
	// the client already has a charge with c's idempotency key: then it
	// records nothing and returns that charge and false.
	chargeTx(ctx context.Context, client string, c *Charge) (*Charge, bool, error)
	// list returns up to q.limit charges of client, newest first.
	list(ctx context.Context, client string, q listQuery) ([]listed, error)
	// count counts the client's charges with key, or all of them when key
	// is "".
	count(ctx context.Context, client, key string) (int, error)
}

// listQuery selects charges for list.
type listQuery struct {
	key    string // only this idempotency key, when not ""
	before int64  // only charges with a smaller sequence number, when > 0
	limit  int
}

// listed is a charge and its sequence number.
type listed struct {
	seq    int64
	charge Charge
}

func newLedger(store idemstore.Store) (ledger, error) {
	switch s := store.(type) {
	case *idemsqlite.Store:
		return sqliteLedger{s}, nil
	case *idempg.Store:
		return pgLedger{s}, nil
	case nil:
		return nil, errors.New("processor: Config.Store is required")
	}
	return nil, fmt.Errorf("processor: Config.Store is a %T; want an *idemsqlite.Store or an *idempg.Store", store)
}

// The SQLite table orders charges by rowid: the table has one writer, so
// rowids grow in commit order.
const (
	sqliteCreateCharges = `CREATE TABLE IF NOT EXISTS charges (
    id              TEXT    PRIMARY KEY,
    client_id       TEXT    NOT NULL,
    idempotency_key TEXT    NOT NULL,
    amount          INTEGER NOT NULL,
    currency        TEXT    NOT NULL,
    customer        TEXT    NOT NULL,
    created         INTEGER NOT NULL,
    outcome         TEXT    NOT NULL DEFAULT 'succeeded'
)`
	// Tables created before declines existed lack the outcome column.
	sqliteHasOutcome      = `SELECT count(*) FROM pragma_table_info('charges') WHERE name = 'outcome'`
	sqliteAddOutcome      = `ALTER TABLE charges ADD COLUMN outcome TEXT NOT NULL DEFAULT 'succeeded'`
	sqliteCreateKeyIndex  = `CREATE UNIQUE INDEX IF NOT EXISTS charges_client_key ON charges (client_id, idempotency_key)`
	sqliteInsertCharge    = `INSERT INTO charges (id, client_id, idempotency_key, amount, currency, customer, outcome, created) VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (client_id, idempotency_key) DO NOTHING`
	sqliteSelectChargeKey = `SELECT id, amount, currency, customer, outcome, created FROM charges WHERE client_id = ? AND idempotency_key = ?`
	sqliteListCharges     = `SELECT rowid, id, idempotency_key, amount, currency, customer, outcome, created FROM charges
WHERE client_id = ? AND (? = '' OR idempotency_key = ?) AND (? = 0 OR rowid < ?)
ORDER BY rowid DESC LIMIT ?`
	sqliteCountCharges = `SELECT count(*) FROM charges WHERE client_id = ? AND (? = '' OR idempotency_key = ?)`
)

type sqliteLedger struct{ store *idemsqlite.Store }

func (l sqliteLedger) migrate(ctx context.Context) error {
	db := l.store.DB()
	if _, err := db.ExecContext(ctx, sqliteCreateCharges); err != nil {
		return fmt.Errorf("processor: create charges table: %w", err)
	}
	var n int
	if err := db.QueryRowContext(ctx, sqliteHasOutcome).Scan(&n); err != nil {
		return fmt.Errorf("processor: inspect charges table: %w", err)
	}
	if n == 0 {
		if _, err := db.ExecContext(ctx, sqliteAddOutcome); err != nil {
			return fmt.Errorf("processor: add charges.outcome: %w", err)
		}
	}
	if _, err := db.ExecContext(ctx, sqliteCreateKeyIndex); err != nil {
		return fmt.Errorf("processor: create charges key index: %w", err)
	}
	return nil
}

func (l sqliteLedger) chargeTx(ctx context.Context, client string, c *Charge) (*Charge, bool, error) {
	tx, err := idemsqlite.TxFromContext(ctx)
	if err != nil {
		return nil, false, err
	}
	res, err := tx.ExecContext(ctx, sqliteInsertCharge, c.ID, client, c.IdempotencyKey, c.Amount, c.Currency, c.Customer, c.Outcome, c.Created)
	if err != nil {
		return nil, false, err
	}
	if n, err := res.RowsAffected(); err != nil || n == 1 {
		return c, true, err
	}
	prev := &Charge{Object: "charge", IdempotencyKey: c.IdempotencyKey}
	err = tx.QueryRowContext(ctx, sqliteSelectChargeKey, client, c.IdempotencyKey).Scan(&prev.ID, &prev.Amount, &prev.Currency, &prev.Customer, &prev.Outcome, &prev.Created)
	return prev, false, err
}

func (l sqliteLedger) list(ctx context.Context, client string, q listQuery) ([]listed, error) {
	rows, err := l.store.ReadDB().QueryContext(ctx, sqliteListCharges, client, q.key, q.key, q.before, q.before, q.limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	return scanListed(rows.Next, rows.Scan, rows.Err)
}

func (l sqliteLedger) count(ctx context.Context, client, key string) (int, error) {
	var n int
	err := l.store.ReadDB().QueryRowContext(ctx, sqliteCountCharges, client, key, key).Scan(&n)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	return n, err
}

// The PostgreSQL table orders charges by an identity column. Concurrent
// transactions may commit out of its order, so a charge that commits while
// a client pages may show up on a later page or not at all; charges that
// committed before the first page was read are each listed exactly once.
const (
	// pgMigrateLock serialises processord instances that start together.
	pgMigrateLock   = `SELECT pg_advisory_xact_lock(hashtext('processord.charges'))`
	pgCreateCharges = `CREATE TABLE IF NOT EXISTS charges (
    seq             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    id              text   NOT NULL UNIQUE,
    client_id       text   NOT NULL,
    idempotency_key text   NOT NULL,
    amount          bigint NOT NULL,
    currency        text   NOT NULL,
    customer        text   NOT NULL,
    outcome         text   NOT NULL,
    created         bigint NOT NULL,
    UNIQUE (client_id, idempotency_key)
)`
	pgInsertCharge    = `INSERT INTO charges (id, client_id, idempotency_key, amount, currency, customer, outcome, created) VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT (client_id, idempotency_key) DO NOTHING`
	pgSelectChargeKey = `SELECT id, amount, currency, customer, outcome, created FROM charges WHERE client_id = $1 AND idempotency_key = $2`
	pgListCharges     = `SELECT seq, id, idempotency_key, amount, currency, customer, outcome, created FROM charges
WHERE client_id = $1 AND ($2 = '' OR idempotency_key = $2) AND ($3 = 0 OR seq < $3)
ORDER BY seq DESC LIMIT $4`
	pgCountCharges = `SELECT count(*) FROM charges WHERE client_id = $1 AND ($2 = '' OR idempotency_key = $2)`
)

type pgLedger struct{ store *idempg.Store }

func (l pgLedger) migrate(ctx context.Context) error {
	err := pgx.BeginFunc(ctx, l.store.Pool(), func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, pgMigrateLock); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, pgCreateCharges)
		return err
	})
	if err != nil {
		return fmt.Errorf("processor: create charges table: %w", err)
	}
	return nil
}

func (l pgLedger) chargeTx(ctx context.Context, client string, c *Charge) (*Charge, bool, error) {
	tx, err := idempg.TxFromContext(ctx)
	if err != nil {
		return nil, false, err
	}
	tag, err := tx.Exec(ctx, pgInsertCharge, c.ID, client, c.IdempotencyKey, c.Amount, c.Currency, c.Customer, c.Outcome, c.Created)
	if err != nil {
		return nil, false, err
	}
	if tag.RowsAffected() == 1 {
		return c, true, nil
	}
	prev := &Charge{Object: "charge", IdempotencyKey: c.IdempotencyKey}
	err = tx.QueryRow(ctx, pgSelectChargeKey, client, c.IdempotencyKey).Scan(&prev.ID, &prev.Amount, &prev.Currency, &prev.Customer, &prev.Outcome, &prev.Created)
	return prev, false, err
}

func (l pgLedger) list(ctx context.Context, client string, q listQuery) ([]listed, error) {
	rows, err := l.store.Pool().Query(ctx, pgListCharges, client, q.key, q.before, q.limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	return scanListed(rows.Next, rows.Scan, rows.Err)
}

func (l pgLedger) count(ctx context.Context, client, key string) (int, error) {
	var n int
	err := l.store.Pool().QueryRow(ctx, pgCountCharges, client, key).Scan(&n)
	return n, err
}

// scanListed reads the rows of a list query, from either driver.
func scanListed(next func() bool, scan func(...any) error, rowsErr func() error) ([]listed, error) {
	var out []listed
	for next() {
		l := listed{charge: Charge{Object: "charge"}}
		c := &l.charge
		if err := scan(&l.seq, &c.ID, &c.IdempotencyKey, &c.Amount, &c.Currency, &c.Customer, &c.Outcome, &c.Created); err != nil {
			return nil, err
		}
		out = append(out, l)
	}
	return out, rowsErr()
}
