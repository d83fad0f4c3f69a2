package idempg_test

import (
	"testing"

	"github.com/idemkit/idem/idempg"
	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/internal/pgtest"
)

func TestWatermarkConformance(t *testing.T) {
	t.Parallel()
	idemtest.RunWatermarkTests(t, idemtest.WatermarkHarness{
		// Instances of a service: a store and a pool each, one database.
		NewStores: func(t *testing.T, n int) []idemtest.WatermarkStore {
			connString := pgtest.NewDatabase(t)
			stores := make([]idemtest.WatermarkStore, n)
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
