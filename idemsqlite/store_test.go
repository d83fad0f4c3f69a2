package idemsqlite_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/idemkit/idem/idemsqlite"
	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/idemtest"
)

// openUnmigrated opens a store on a new, empty database file.
func openUnmigrated(t *testing.T) *idemsqlite.Store {
	t.Helper()
	store, err := idemsqlite.Open(filepath.Join(t.TempDir(), "idem.db"), nil)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { store.Close() })
	return store
}

func openStore(t *testing.T) *idemsqlite.Store {
	t.Helper()
	store := openUnmigrated(t)
	if err := store.Migrate(context.Background()); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	return store
}

func TestConformance(t *testing.T) {
	t.Parallel()
	idemtest.RunStoreTests(t, idemtest.Harness{
		NewStore: func(t *testing.T) idemstore.Store {
			store := openStore(t)
			if _, err := store.DB().Exec(`CREATE TABLE business (value TEXT NOT NULL)`); err != nil {
				t.Fatalf("create business table: %v", err)
			}
			return store
		},
		Write: func(ctx context.Context, s idemstore.Store, value string) error {
			tx, err := idemsqlite.TxFromContext(ctx)
			if err != nil {
				return err
			}
			_, err = tx.ExecContext(ctx, `INSERT INTO business (value) VALUES (?)`, value)
			return err
		},
		Count: func(t *testing.T, s idemstore.Store, value string) int {
			var n int
			if err := s.(*idemsqlite.Store).ReadDB().QueryRow(`SELECT count(*) FROM business WHERE value = ?`, value).Scan(&n); err != nil {
				t.Fatalf("count: %v", err)
			}
			return n
		},
		NewUnmigrated: func(t *testing.T) idemstore.Store { return openUnmigrated(t) },
	})
}

func TestSchemaVersionCreatesNothing(t *testing.T) {
	t.Parallel()
	store := openUnmigrated(t)
	if v, err := store.SchemaVersion(context.Background()); err != nil || v != 0 {
		t.Fatalf("SchemaVersion = %d, %v; want 0", v, err)
	}
	var n int
	if err := store.DB().QueryRow(`SELECT count(*) FROM sqlite_master`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d objects in the database after SchemaVersion (err %v); want none", n, err)
	}
}

func TestMigrateUpAndDown(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := openStore(t)
	if v, err := store.SchemaVersion(ctx); err != nil || v != newestVersion {
		t.Fatalf("SchemaVersion = %d, %v; want %d", v, err, newestVersion)
	}
	if err := store.MigrateTo(ctx, 1); err != nil { // down past the recovery points and the outbox
		t.Fatalf("MigrateTo(1): %v", err)
	}
	if err := store.Migrate(ctx); err != nil { // applying twice is a no-op
		t.Fatalf("second Migrate: %v", err)
	}
	if err := store.MigrateTo(ctx, 0); err != nil {
		t.Fatalf("MigrateTo(0): %v", err)
	}
	var n int
	if err := store.DB().QueryRow(`SELECT count(*) FROM sqlite_master WHERE name = 'idempotency_keys'`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("idempotency_keys after migrating down: count %d, err %v; want gone", n, err)
	}
	if err := store.Migrate(ctx); err != nil {
		t.Fatalf("Migrate after down: %v", err)
	}
	if v, _ := store.SchemaVersion(ctx); v != newestVersion {
		t.Fatalf("SchemaVersion = %d after re-migrating, want %d", v, newestVersion)
	}
}

// newestVersion is the number of the newest embedded migration.
const newestVersion = 6

// TestConfigDefaultsAndSettings: a zero BusyTimeout or ReadConns takes the
// default, and a set one is used as given. The defaults are the documented
// 5 s and 4, spelled out, not read from the constants.
func TestConfigDefaultsAndSettings(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name      string
		cfg       *idemsqlite.Config
		busyMS    int
		readConns int
	}{
		{"Defaults", nil, 5000, 4},
		{"Set", &idemsqlite.Config{BusyTimeout: 1234 * time.Millisecond, ReadConns: 3}, 1234, 3},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			store, err := idemsqlite.Open(filepath.Join(t.TempDir(), "idem.db"), tt.cfg)
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			t.Cleanup(func() { store.Close() })
			var busy int
			if err := store.DB().QueryRow(`PRAGMA busy_timeout`).Scan(&busy); err != nil {
				t.Fatalf("PRAGMA busy_timeout: %v", err)
			}
			if busy != tt.busyMS {
				t.Errorf("busy_timeout = %d ms, want %d", busy, tt.busyMS)
			}
			if n := store.ReadDB().Stats().MaxOpenConnections; n != tt.readConns {
				t.Errorf("read connections = %d, want %d", n, tt.readConns)
			}
		})
	}
}
