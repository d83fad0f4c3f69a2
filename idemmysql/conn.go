package idemmysql

import (
	"context"
	"database/sql/driver"
	"errors"
	"sync/atomic"
)

// connector wraps the driver's connector: each connection it opens counts
// the statements it sends (round trips, with interpolateParams on) and
// notes when the server rolled its transaction back (a deadlock, error
// 1213; a lock wait timeout, 1205, when innodb_rollback_on_timeout is on),
// which a lease reports as a conflict (idemstore.ConflictReporter).
type connector struct {
	base driver.Connector
	// rollbackOnTimeout is the server's innodb_rollback_on_timeout.
	rollbackOnTimeout bool
	// roundTrips counts the statements sent, for the round-trip test.
	roundTrips atomic.Int64
}

func (c *connector) Connect(ctx context.Context) (driver.Conn, error) {
	dc, err := c.base.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &conn{base: dc, c: c}, nil
}

func (c *connector) Driver() driver.Driver { return c.base.Driver() }

// conn is one wrapped connection. The driver's connection implements
// every interface that conn forwards to.
type conn struct {
	base driver.Conn
	c    *connector
	// rolledBack is set when the server rolled back the connection's
	// transaction under it; BeginTx clears it.
	rolledBack atomic.Bool
}

var (
	_ driver.ConnBeginTx        = (*conn)(nil)
	_ driver.ConnPrepareContext = (*conn)(nil)
	_ driver.ExecerContext      = (*conn)(nil)
	_ driver.QueryerContext     = (*conn)(nil)
	_ driver.Pinger             = (*conn)(nil)
	_ driver.SessionResetter    = (*conn)(nil)
	_ driver.Validator          = (*conn)(nil)
	_ driver.NamedValueChecker  = (*conn)(nil)
)

// note counts a statement sent and remembers a rollback by the server.
func (c *conn) note(err error) error {
	if err == nil {
		c.c.roundTrips.Add(1)
		return nil // most statements: without the allocation of errors.As's target
	}
	if !errors.Is(err, driver.ErrSkip) {
		c.c.roundTrips.Add(1)
	}
	if n := errNumber(err); n == errDeadlock || n == errLockWaitTimeout && c.c.rollbackOnTimeout {
		c.rolledBack.Store(true)
	}
	return err
}

func (c *conn) Prepare(query string) (driver.Stmt, error) {
	return c.PrepareContext(context.Background(), query)
}

func (c *conn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	st, err := c.base.(driver.ConnPrepareContext).PrepareContext(ctx, query)
	return st, c.note(err)
}

func (c *conn) Close() error { return c.base.Close() }

func (c *conn) Begin() (driver.Tx, error) {
	return c.BeginTx(context.Background(), driver.TxOptions{})
}

func (c *conn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	c.rolledBack.Store(false)
	tx, err := c.base.(driver.ConnBeginTx).BeginTx(ctx, opts)
	if err := c.note(err); err != nil {
		return nil, err
	}
	return &connTx{base: tx, c: c}, nil
}

func (c *conn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	res, err := c.base.(driver.ExecerContext).ExecContext(ctx, query, args)
	return res, c.note(err)
}

func (c *conn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	rows, err := c.base.(driver.QueryerContext).QueryContext(ctx, query, args)
	return rows, c.note(err)
}

func (c *conn) Ping(ctx context.Context) error {
	return c.note(c.base.(driver.Pinger).Ping(ctx))
}

func (c *conn) ResetSession(ctx context.Context) error {
	return c.base.(driver.SessionResetter).ResetSession(ctx)
}

func (c *conn) IsValid() bool { return c.base.(driver.Validator).IsValid() }

func (c *conn) CheckNamedValue(nv *driver.NamedValue) error {
	return c.base.(driver.NamedValueChecker).CheckNamedValue(nv)
}

type connTx struct {
	base driver.Tx
	c    *conn
}

func (t *connTx) Commit() error   { return t.c.note(t.base.Commit()) }
func (t *connTx) Rollback() error { return t.c.note(t.base.Rollback()) }
