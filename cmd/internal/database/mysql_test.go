package database

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/cmd/internal/mysqltest"
)

func TestMySQLDSN(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ url, want string }{
		{"mysql://app:s%40cret@db.internal:3307/shop", "app:s@cret@tcp(db.internal:3307)/shop"},
		{"mysql://app@db/shop?tls=true&timeout=5s", "app@tcp(db:3306)/shop?tls=true&timeout=5s"},
		{"mysql://root@[::1]/x", "root@tcp([::1]:3306)/x"},
	} {
		got, err := MySQLDSN(tt.url)
		if err != nil || got != tt.want {
			t.Errorf("MySQLDSN(%q) = %q, %v; want %q", tt.url, got, err, tt.want)
		}
	}
	for _, bad := range []string{"mysql://app:hunter2@db", "mysql://app:hunter2@/x", "mysql://app:hunter2@db/x?timeout=forever"} {
		if _, err := MySQLDSN(bad); err == nil || strings.Contains(err.Error(), "hunter2") {
			t.Errorf("MySQLDSN(%q) = %v, want an error without the password", bad, err)
		}
	}
}

func TestOpenMySQLMigratesAndPurges(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, err := Open(ctx, mysqltest.NewDatabase(t), &Config{Migrate: true, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if db.MySQL == nil || db.Store() == nil || db.PurgeStore() == nil || db.Outbox() == nil || strings.Contains(db.Name, "@") {
		t.Fatalf("DB = %+v", db)
	}
	if v, err := db.SchemaVersion(ctx); err != nil || v < 1 {
		t.Fatalf("SchemaVersion = %d, %v; want migrated", v, err)
	}
	if n, err := db.Purge(ctx, PurgeParams{Before: time.Now()}); err != nil || n != 0 {
		t.Fatalf("Purge = %d, %v", n, err)
	}
	if n, err := db.PurgeCount(ctx, PurgeParams{Before: time.Now()}); err != nil || n != 0 {
		t.Fatalf("PurgeCount = %d, %v", n, err)
	}
	if err := db.MigrateTo(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if v, err := db.SchemaVersion(ctx); err != nil || v != 0 {
		t.Fatalf("SchemaVersion after MigrateTo(0) = %d, %v", v, err)
	}
}
