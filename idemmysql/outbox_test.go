package idemmysql_test

import (
	"context"
	"testing"
	"time"

	"github.com/idemkit/idem/idemmysql"
	"github.com/idemkit/idem/idemtest"
)

func TestOutboxConformance(t *testing.T) {
	t.Parallel()
	idemtest.RunOutboxTests(t, idemtest.OutboxHarness{
		// Instances of a service: stores of their own on one database.
		NewStores: func(t *testing.T, n int) []idemtest.OutboxStore {
			dsn := newDatabase(t)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			stores := make([]idemtest.OutboxStore, n)
			for i := range stores {
				s, err := idemmysql.Open(ctx, dsn, nil)
				if err != nil {
					t.Fatalf("Open: %v", err)
				}
				t.Cleanup(func() { s.Close() })
				if err := s.Migrate(ctx); err != nil {
					t.Fatalf("Migrate: %v", err)
				}
				stores[i] = s
			}
			return stores
		},
	})
}
