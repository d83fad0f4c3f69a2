package idempg_test

import (
	"context"
	"errors"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idempg"
	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/internal/pgtest"
)

func TestAdmin(t *testing.T) {
	t.Parallel()
	connString := pgtest.NewDatabase(t)
	admin := newPool(t, connString, 2)
	idemtest.RunAdminTests(t, idemtest.Harness{
		NewStore: func(t *testing.T) idem.Store {
			return setupOn(t, schemaPool(t, admin, connString), nil)
		},
	})
}

func TestReady(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	pool := newPool(t, pgtest.NewDatabase(t), 2)
	store, err := idempg.New(pool, &idempg.Config{Logger: quiet})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
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
	pool.Close()
	if err := store.Ready(ctx); !errors.Is(err, idem.ErrUnavailable) {
		t.Fatalf("Ready on a closed pool = %v, want ErrUnavailable", err)
	}
}
