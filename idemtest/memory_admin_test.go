package idemtest_test

import (
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemtest"
)

func TestMemoryStoreAdmin(t *testing.T) {
	t.Parallel()
	idemtest.RunAdminTests(t, idemtest.Harness{
		NewStore: func(*testing.T) idem.Store { return idemtest.NewMemoryStore() },
	})
}
