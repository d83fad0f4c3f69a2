package idempg

import (
	"context"
	"errors"
	"fmt"

	"github.com/idemkit/idem/idemstore"
	"github.com/jackc/pgx/v5/pgconn"
)

// Errors of the package.
var (
	// ErrNoTx is returned by [TxFromContext] for a context that carries no
	// lease of this package.
	ErrNoTx = errors.New("idempg: no idempotency transaction in context")

	// ErrLeaseEnded is [idemstore.ErrLeaseEnded]: a lease of this package has
	// ended: Release,
	// or Complete with a response, was called, whatever it returned. It is
	// returned by:
	//
	//   - [TxFromContext], as it is, for the context of an ended lease.
	//     Statements sent through a transaction taken before the end fail
	//     with pgx.ErrTxClosed instead.
	//   - the lease's Complete, wrapped, when the lease has ended; the key
	//     stays as the call that ended it left it.
	//   - the lease's Release, wrapped, when the lease has ended, with the
	//     one exception that the idemstore.Lease contract names: after a
	//     two-phase Complete that failed other than by losing the lease
	//     (idemstore.ErrLeaseLost), Release deletes the committed claim and
	//     returns nil, or the error of that delete.
	ErrLeaseEnded = idemstore.ErrLeaseEnded

	// ErrNotClaimed is returned, wrapped, by the first statement sent
	// through the transaction of a speculative atomic lease (see
	// idemstore.ClaimParams.Speculative), and by every later one, when the claim
	// that went out with it found the key held by another request or
	// completed: the statement did not run. The error also wraps an
	// *idemstore.ExistsError with the key, which the lease's Complete and
	// Release return as well; the middleware answers from it, never with
	// the handler's response.
	ErrNotClaimed = errors.New("idempg: the key is held or completed by another request; the statement did not run")

	// ErrTxManaged is returned by Commit and Rollback of the transaction
	// that [TxFromContext] returns: the lease commits it with the stored
	// response, or rolls it back on release. Nested transactions (savepoints
	// from its Begin) commit and roll back as usual.
	ErrTxManaged = errors.New("idempg: the transaction belongs to the idempotency lease; do not commit or roll it back")
)

// SQLSTATE codes the store looks at.
const (
	codeLeaseLost           = "IDEM1" // raised by idem_lease_held, see the migration
	codeLockNotAvailable    = "55P03"
	codeSerializationFailed = "40001"
	codeDeadlockDetected    = "40P01"
	codeUniqueViolation     = "23505"
	codeDuplicateTable      = "42P07"
)

// isKeyTaken reports whether err is the unique violation of an insert into
// the key table: another request stored the key first.
func isKeyTaken(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == codeUniqueViolation && pgErr.TableName == "idempotency_keys"
}

func pgCode(err error) string {
	if err == nil {
		return "" // before pgErr, which escapes: no allocation for no error
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}

// isConflict reports whether err is a serialization failure or a deadlock,
// which running the transaction again may fix.
func isConflict(err error) bool {
	code := pgCode(err)
	return code == codeSerializationFailed || code == codeDeadlockDetected
}

// isUnavailable reports whether err means that the database cannot be used
// now, as opposed to an error in what was asked of it.
func isUnavailable(err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		// pgx returns its own errors, not PostgreSQL's, for a failed
		// connection, a closed or broken connection and network timeouts.
		return true
	}
	switch pgErr.Code[:2] {
	case "08", // connection exception
		"53", // insufficient resources, such as too many connections
		"57", // operator intervention: shutdown, statement timeout
		"58": // system error
		return true
	}
	return false
}

// commitOutcomeUnknown reports whether err, the failure of a round trip
// that carried a COMMIT, leaves the commit's outcome unknown: the server
// answered no error of its own (after which it rolls back), and the
// request may have been sent, so the server may have committed before the
// answer was lost.
func commitOutcomeUnknown(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return false
	}
	return !pgconn.SafeToRetry(err)
}

// errOutcomeUnknown wraps err, from a round trip that carried a COMMIT, for
// op: the commit may or may not have happened.
func errOutcomeUnknown(op string, err error) error {
	return fmt.Errorf("idempg: %s: %w (%w): %v", op, idemstore.ErrOutcomeUnknown, idemstore.ErrUnavailable, err)
}

// wrapErr translates an error of a database call made for op. Cancellation
// or expiry of ctx returns ctx's error; errors that mean the database cannot
// be used now wrap idemstore.ErrUnavailable; the rest are wrapped as they are.
func wrapErr(ctx context.Context, op string, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		return fmt.Errorf("idempg: %s: %w", op, ctxErr)
	}
	if isUnavailable(err) {
		return fmt.Errorf("idempg: %s: %w: %w", op, idemstore.ErrUnavailable, err)
	}
	return fmt.Errorf("idempg: %s: %w", op, err)
}
