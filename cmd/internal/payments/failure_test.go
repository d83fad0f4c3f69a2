package payments

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idemkit/idem/idemstore"
)

// TestWriteFailure: a write that failed because the database could not be
// used is a 503 store-unavailable with Retry-After, which the client may
// retry with its key; any other failure is a 500.
func TestWriteFailure(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		err  error
		want int
	}{
		{"StoreUnavailable", fmt.Errorf("lock account: %w", errors.Join(idemstore.ErrUnavailable, io.ErrUnexpectedEOF)), http.StatusServiceUnavailable},
		{"ConnectionLost", fmt.Errorf("insert: %w", io.ErrUnexpectedEOF), http.StatusServiceUnavailable},
		{"AdminShutdown", &pgconn.PgError{Code: "57P01"}, http.StatusServiceUnavailable},
		{"ConnectionFailure", &pgconn.PgError{Code: "08006"}, http.StatusServiceUnavailable},
		{"UniqueViolation", &pgconn.PgError{Code: "23505"}, http.StatusInternalServerError},
		{"Other", errors.New("payments: a bug"), http.StatusInternalServerError},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rec := httptest.NewRecorder()
			writeFailure(rec, tt.err, "Nothing was moved.")
			if rec.Code != tt.want {
				t.Errorf("%v: %d, want %d", tt.err, rec.Code, tt.want)
			}
			if tt.want == http.StatusServiceUnavailable && rec.Header().Get("Retry-After") == "" {
				t.Errorf("%v: a 503 without Retry-After", tt.err)
			}
		})
	}
}
