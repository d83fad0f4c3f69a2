package idemtest_test

import (
	"testing"

	"github.com/idemkit/idem/idemtest"
)

func TestMemoryStoreOutbox(t *testing.T) {
	t.Parallel()
	idemtest.RunOutboxTests(t, idemtest.OutboxHarness{
		// Relays on one MemoryStore share its taken set: every instance is
		// the same store.
		NewStores: func(t *testing.T, n int) []idemtest.OutboxStore {
			s := idemtest.NewMemoryStore()
			stores := make([]idemtest.OutboxStore, n)
			for i := range stores {
				stores[i] = s
			}
			return stores
		},
	})
}
