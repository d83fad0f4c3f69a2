package idemsqlite_test

import (
	"testing"

	"github.com/idemkit/idem/idemtest"
)

func TestWatermarkConformance(t *testing.T) {
	t.Parallel()
	idemtest.RunWatermarkTests(t, idemtest.WatermarkHarness{
		// One store serves every instance: SQLite has one writer per file.
		NewStores: func(t *testing.T, n int) []idemtest.WatermarkStore {
			store := openStore(t)
			stores := make([]idemtest.WatermarkStore, n)
			for i := range stores {
				stores[i] = store
			}
			return stores
		},
	})
}
