package idemtest_test

import (
	"testing"

	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/idemtest"
)

func TestMemoryStoreAdmin(t *testing.T) {
	t.Parallel()
	idemtest.RunAdminTests(t, idemtest.Harness{
		NewStore: func(*testing.T) idemstore.Store { return idemtest.NewMemoryStore() },
	})
}
