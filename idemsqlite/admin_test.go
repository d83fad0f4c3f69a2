package idemsqlite_test

import (
	"context"
	"errors"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemtest"
)

func TestAdmin(t *testing.T) {
	t.Parallel()
	idemtest.RunAdminTests(t, idemtest.Harness{
		NewStore: func(t *testing.T) idem.Store { return openStore(t) },
	})
}

func TestReady(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := openUnmigrated(t)
	var sv *idem.SchemaVersionError
	if err := store.Ready(ctx); !errors.As(err, &sv) || sv.Have != 0 || sv.Want < 1 {
		t.Fatalf("Ready before migrating = %v, want a SchemaVersionError from 0", err)
	}
	if err := store.Migrate(ctx); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	if err := store.Ready(ctx); err != nil {
		t.Fatalf("Ready after migrating = %v", err)
	}
	store.Close()
	if err := store.Ready(ctx); err == nil {
		t.Fatal("Ready on a closed store succeeded")
	}
}
