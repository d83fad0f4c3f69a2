package idemmysql_test

import (
	"context"
	"testing"

	"github.com/idemkit/idem/idemmysql"
	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/idemtest"
)

// harness is the conformance suites' harness: each store has a database
// of its own, with a business table.
func harness() idemtest.Harness {
	return idemtest.Harness{
		NewStore: func(t *testing.T) idemstore.Store {
			store := openStore(t)
			if _, err := store.DB().Exec(`CREATE TABLE business (value VARCHAR(255) NOT NULL) ENGINE = InnoDB`); err != nil {
				t.Fatalf("create business table: %v", err)
			}
			return store
		},
		Write: func(ctx context.Context, s idemstore.Store, value string) error {
			tx, err := idemmysql.TxFromContext(ctx)
			if err != nil {
				return err
			}
			_, err = tx.ExecContext(ctx, `INSERT INTO business (value) VALUES (?)`, value)
			return err
		},
		Count: func(t *testing.T, s idemstore.Store, value string) int {
			var n int
			if err := s.(*idemmysql.Store).DB().QueryRow(`SELECT COUNT(*) FROM business WHERE value = ?`, value).Scan(&n); err != nil {
				t.Fatalf("count: %v", err)
			}
			return n
		},
		NewUnmigrated: func(t *testing.T) idemstore.Store { return openUnmigrated(t) },
	}
}

func TestConformance(t *testing.T) {
	t.Parallel()
	idemtest.RunStoreTests(t, harness())
}

func TestAdminConformance(t *testing.T) {
	t.Parallel()
	idemtest.RunAdminTests(t, harness())
}
