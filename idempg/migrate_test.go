package idempg_test

import (
	"context"
	"sync"
	"testing"

	"github.com/idemkit/idem/idempg"
	"github.com/idemkit/idem/internal/pgtest"
)

// tableExists reports whether the key table exists.
func tableExists(t testing.TB, store *idempg.Store) bool {
	t.Helper()
	var exists bool
	if err := store.Pool().QueryRow(context.Background(), `SELECT to_regclass('idempotency_keys') IS NOT NULL`).Scan(&exists); err != nil {
		t.Fatalf("look for the key table: %v", err)
	}
	return exists
}

// newestVersion is the number of the newest embedded migration.
const newestVersion = 10

func schemaVersion(t testing.TB, store *idempg.Store) int {
	t.Helper()
	v, err := store.SchemaVersion(context.Background())
	if err != nil {
		t.Fatalf("SchemaVersion: %v", err)
	}
	return v
}

func TestMigrateUpDownUp(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store, err := idempg.New(newPool(t, pgtest.NewDatabase(t), 2), &idempg.Config{Logger: quiet})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if v := schemaVersion(t, store); v != 0 || tableExists(t, store) {
		t.Fatalf("fresh database: version %d, table %v; want 0 and none", v, tableExists(t, store))
	}
	steps := []struct {
		name    string
		migrate func() error
		version int
		table   bool
	}{
		{"Up", func() error { return store.Migrate(ctx) }, newestVersion, true},
		{"UpAgainIsNoOp", func() error { return store.Migrate(ctx) }, newestVersion, true},
		{"DownToZero", func() error { return store.MigrateTo(ctx, 0) }, 0, false},
		{"DownAgainIsNoOp", func() error { return store.MigrateTo(ctx, 0) }, 0, false},
		{"UpAfterDown", func() error { return store.MigrateTo(ctx, newestVersion) }, newestVersion, true},
		{"DownToOne", func() error { return store.MigrateTo(ctx, 1) }, 1, true},
		{"UpToNewest", func() error { return store.Migrate(ctx) }, newestVersion, true},
	}
	for _, step := range steps {
		if err := step.migrate(); err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		if v, table := schemaVersion(t, store), tableExists(t, store); v != step.version || table != step.table {
			t.Fatalf("after %s: version %d, table %v; want %d, %v", step.name, v, table, step.version, step.table)
		}
	}
	if err := store.MigrateTo(ctx, newestVersion+1); err == nil {
		t.Errorf("MigrateTo(%d) succeeded; there is no such version", newestVersion+1)
	}
}

// TestMigrateConcurrently starts three instances on a fresh database at once.
func TestMigrateConcurrently(t *testing.T) {
	t.Parallel()
	connString := pgtest.NewDatabase(t)
	const instances = 3
	stores := make([]*idempg.Store, instances)
	for i := range stores {
		s, err := idempg.New(newPool(t, connString, 2), &idempg.Config{Logger: quiet})
		if err != nil {
			t.Fatalf("New: %v", err)
		}
		stores[i] = s
	}
	start := make(chan struct{})
	errs := make(chan error, instances)
	var wg sync.WaitGroup
	for _, s := range stores {
		wg.Go(func() {
			<-start
			errs <- s.Migrate(context.Background())
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("concurrent Migrate: %v", err)
		}
	}
	var applied int
	if err := stores[0].Pool().QueryRow(context.Background(), `SELECT count(*) FROM idem_schema_migrations`).Scan(&applied); err != nil || applied != newestVersion {
		t.Errorf("%d migrations recorded (err %v), want %d", applied, err, newestVersion)
	}
	for i, s := range stores {
		if v := schemaVersion(t, s); v != newestVersion {
			t.Errorf("instance %d sees version %d, want %d", i, v, newestVersion)
		}
	}
}
