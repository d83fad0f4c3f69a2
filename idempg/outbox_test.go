package idempg_test

import (
	"testing"

	"github.com/idemkit/idem/idempg"
	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/internal/pgtest"
)

func TestOutboxConformance(t *testing.T) {
	t.Parallel()
	idemtest.RunOutboxTests(t, idemtest.OutboxHarness{
		// Instances of a service: a store and a pool each, one database.
		NewStores: func(t *testing.T, n int) []idemtest.OutboxStore {
			connString := pgtest.NewDatabase(t)
			stores := make([]idemtest.OutboxStore, n)
			for i := range stores {
				s, err := idempg.New(newPool(t, connString, 4), &idempg.Config{Logger: quiet})
				if err != nil {
					t.Fatalf("New: %v", err)
				}
				if err := s.Migrate(t.Context()); err != nil {
					t.Fatalf("Migrate: %v", err)
				}
				stores[i] = s
			}
			return stores
		},
	})
}
