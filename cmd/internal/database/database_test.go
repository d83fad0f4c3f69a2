package database

import (
	"context"
	"errors"
	"log/slog"
	neturl "net/url"
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
	_, err := Open(context.Background(), "oracle://user:hunter2@db/x", nil)
	if !errors.Is(err, ErrUnsupported) || strings.Contains(err.Error(), "hunter2") {
		t.Fatalf("Open(oracle://...) = %v, want ErrUnsupported without the URL", err)
	}
}

// TestOpenRefusesPoolerThatDropsStatements: through PgBouncer in
// transaction mode that does not keep prepared statements (Debian's 1.18),
// a URL with pgx's default query mode is refused at once, with what to add
// to it; the same URL with default_query_exec_mode=cache_describe opens, as
// does the direct URL.
func TestOpenRefusesPoolerThatDropsStatements(t *testing.T) {
	t.Parallel()
	direct := pgtest.NewDatabase(t)
	via := pgtest.StartBouncer(t, direct)
	bare := withoutQueryMode(t, via)
	ctx := context.Background()
	for _, pooling := range []bool{false, true} {
		_, err := Open(ctx, bare, &Config{TransactionPooling: pooling, Logger: slog.New(slog.DiscardHandler)})
		if !errors.Is(err, ErrStatementsNotKept) || !strings.Contains(err.Error(), "default_query_exec_mode=cache_describe") {
			t.Errorf("Open through PgBouncer without cache_describe (TransactionPooling %v) = %v; want ErrStatementsNotKept", pooling, err)
		}
	}
	for _, url := range []string{via, direct} {
		db, err := Open(ctx, url, &Config{TransactionPooling: url == via, Migrate: true, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatalf("Open = %v; want it open", err)
		}
		db.Close()
	}
}

// withoutQueryMode is url without its default_query_exec_mode: back to
// pgx's default, which prepares statements by name.
func withoutQueryMode(t *testing.T, url string) string {
	t.Helper()
	u, err := neturl.Parse(url)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Del("default_query_exec_mode")
	u.RawQuery = q.Encode()
	return u.String()
}
