package idemmysql

import (
	"context"
	"database/sql"
	"errors"

	"github.com/go-sql-driver/mysql"

	"github.com/idemkit/idem/idemstore"
)

// Server error numbers the store answers.
const (
	errDupEntry        = 1062 // ER_DUP_ENTRY: the unique key is taken
	errLockWaitTimeout = 1205 // ER_LOCK_WAIT_TIMEOUT: a row lock was held past innodb_lock_wait_timeout
	errDeadlock        = 1213 // ER_LOCK_DEADLOCK: the transaction was rolled back
)

// errNumber is the server's error number in err, 0 for none.
func errNumber(err error) uint16 {
	if err == nil {
		return 0 // without the allocation of errors.As's target
	}
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		return me.Number
	}
	return 0
}

// unavailable marks errors that mean the database could not be used now.
func unavailable(err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return errors.Join(idemstore.ErrUnavailable, err)
}

// commitErr is the error of a failed COMMIT: an answer from the server
// means that nothing was committed; a broken connection means the commit
// may or may not have happened (idemstore.ErrOutcomeUnknown).
func commitErr(err error) error {
	if errNumber(err) != 0 || errors.Is(err, sql.ErrTxDone) {
		return unavailable(err)
	}
	return errors.Join(idemstore.ErrOutcomeUnknown, idemstore.ErrUnavailable, err)
}
