package database

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func TestOpenMigratesAndPurgesBothStores(t *testing.T) {
	t.Parallel()
	for kind, url := range map[string]string{
		"sqlite":   "sqlite:" + filepath.Join(t.TempDir(), "k.db"),
		"postgres": pgtest.NewDatabase(t),
	} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db, err := Open(ctx, url, &Config{Migrate: true, Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			if (db.SQLite != nil) == (db.Postgres != nil) || db.Store() == nil || strings.Contains(db.Name, "@") {
				t.Fatalf("DB = %+v", db)
			}
			if v, err := db.SchemaVersion(ctx); err != nil || v < 1 {
				t.Fatalf("SchemaVersion = %d, %v; want migrated", v, err)
			}
			if n, err := db.Purge(ctx, PurgeParams{Before: time.Now()}); err != nil || n != 0 {
				t.Fatalf("Purge = %d, %v", n, err)
			}
			if err := db.MigrateTo(ctx, 0); err != nil {
				t.Fatal(err)
			}
			if v, err := db.SchemaVersion(ctx); err != nil || v != 0 {
				t.Fatalf("SchemaVersion after MigrateTo(0) = %d, %v", v, err)
			}
		})
	}
}

func TestOpenRefusesOtherURLsWithoutRepeatingThem(t *testing.T) {
	t.Parallel()
	_, err := Open(context.Background(), "mysql://user:hunter2@db/x", nil)
	if !errors.Is(err, ErrUnsupported) || strings.Contains(err.Error(), "hunter2") {
		t.Fatalf("Open(mysql://...) = %v, want ErrUnsupported without the URL", err)
	}
}
