package bench

import (
	"context"
	"database/sql"
	"slices"
	"strings"
	"testing"

	"github.com/idemkit/idem/cmd/internal/database"
	"github.com/idemkit/idem/cmd/internal/mysqltest"
)

// TestRunOnMySQL runs every variant and the MySQL floors on a MariaDB
// (or MySQL) database with a fixed count of requests: no errors, and every
// request of a floor variant committed a payment and its completed key
// row under the key the request carried. It asserts no speed.
func TestRunOnMySQL(t *testing.T) {
	t.Parallel()
	url := mysqltest.NewDatabase(t)
	variants := slices.Concat(AllVariants, []string{FloorInsertFirst, Floor2Commit})
	results, err := Run(context.Background(), Config{
		DatabaseURL: url, Requests: 40, Rounds: 1, Concurrency: 4, Variants: variants,
	})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if len(results) != len(variants) {
		t.Fatalf("%d results, want %d", len(results), len(variants))
	}
	for _, r := range results {
		if r.Requests != 40 || r.Errors != 0 {
			t.Errorf("%s: %+v; want 40 requests and no errors", r.Variant, r)
		}
	}
	dsn, err := database.MySQLDSN(url)
	if err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	// The floors' key rows are the completed ones with no request_fields:
	// the middleware's carry the per-field digests of the JSON body.
	var completed, withPayment int64
	if err := db.QueryRow(`SELECT count(*), count(p.id) FROM idempotency_keys k
LEFT JOIN payments p ON p.client_id = k.client_id AND p.idempotency_key = k.idempotency_key
WHERE k.status = 'completed' AND k.request_fields IS NULL`).Scan(&completed, &withPayment); err != nil {
		t.Fatalf("count keys: %v", err)
	}
	if completed != 80 || withPayment != 80 {
		t.Errorf("%d completed key rows written by the floors, %d with their payment; want 80 of each", completed, withPayment)
	}

	_, err = Run(context.Background(), Config{DatabaseURL: url, Requests: 1, Rounds: 1, Variants: []string{Floor2RT}})
	if err == nil || !strings.Contains(err.Error(), "needs PostgreSQL") {
		t.Errorf("floor-2rt on MySQL: err %v, want one that says it needs PostgreSQL", err)
	}
}
