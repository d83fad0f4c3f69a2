package idemtest_test

import (
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemtest"
)

func TestMemoryStore(t *testing.T) {
	t.Parallel()
	idemtest.RunStoreTests(t, idemtest.Harness{
		NewStore: func(t *testing.T) idem.Store { return idemtest.NewMemoryStore() },
	})
}
