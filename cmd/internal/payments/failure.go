package payments

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemstore"
	"github.com/jackc/pgx/v5/pgconn"
)

// writeFailure answers a write that failed in the request's transaction,
// which then rolls back: 503 store-unavailable with Retry-After when the
// database could not be used just then (a retry with the same key can
// succeed), 500 otherwise. detail says what was not done.
func writeFailure(w http.ResponseWriter, err error, detail string) {
	if databaseUnavailable(err) {
		idem.WriteProblem(w, idem.ProblemUnavailable.Kind().New(idem.ProblemTypeBaseDefault, "The database could not be reached. "+detail), 1)
		return
	}
	problem(w, ProblemInternal, detail)
}

// databaseUnavailable reports whether err says that the database could not
// be used: the stores wrap such failures in idemstore.ErrUnavailable; a
// repository's own statements return the driver's errors.
func databaseUnavailable(err error) bool {
	var pgErr *pgconn.PgError
	var netErr net.Error
	switch {
	case errors.Is(err, idemstore.ErrUnavailable), errors.Is(err, context.DeadlineExceeded),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.As(err, &netErr),
		pgconn.SafeToRetry(err), pgconn.Timeout(err):
		return true
	case errors.As(err, &pgErr):
		// Class 08: connection exception; 57P01-57P03: shutdown, cannot
		// connect now.
		return strings.HasPrefix(pgErr.Code, "08") || strings.HasPrefix(pgErr.Code, "57P")
	}
	return false
}
