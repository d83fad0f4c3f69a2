package idemsqlite_test

import (
	"testing"

	"github.com/idemkit/idem/idemtest"
)

func TestOutboxConformance(t *testing.T) {
	t.Parallel()
	idemtest.RunOutboxTests(t, idemtest.OutboxHarness{
		// One relay per database file: every instance is the same store.
		NewStores: func(t *testing.T, n int) []idemtest.OutboxStore {
			store := openStore(t)
			stores := make([]idemtest.OutboxStore, n)
			for i := range stores {
				stores[i] = store
			}
			return stores
		},
	})
}
