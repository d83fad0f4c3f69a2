package bench

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/cmd/internal/database"
)

// TestRunAllFresh runs twice with Fresh on each store: each run measures
// on tables without the rows of the one before (its key table holds its
// own keys only), and on PostgreSQL the database's own schema gets none.
func TestRunAllFresh(t *testing.T) {
	t.Parallel()
	for name, url := range storeURLs {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			const requests = 25
			ctx := context.Background()
			dbURL := url(t)
			fresh := dbURL // where the runs write
			if name == "postgres" {
				fresh = schemaURL(dbURL, "bench_run")
			}
			for run := 1; run <= 2; run++ {
				out, err := RunAll(ctx, Config{
					DatabaseURL: dbURL, Requests: requests, Rounds: 1, Concurrency: 2,
					Variants: []string{Atomic}, Fresh: true,
				})
				if err != nil {
					t.Fatalf("run %d: RunAll: %v", run, err)
				}
				for _, r := range out.Results {
					if r.Requests != requests || r.Errors != 0 {
						t.Fatalf("run %d: %s: %+v; want %d requests, no errors", run, r.Variant, r, requests)
					}
				}
				if keys := countKeys(ctx, t, fresh); keys != requests {
					t.Errorf("run %d: the run's key table holds %d keys; want its own %d", run, keys, requests)
				}
			}
			if name == "postgres" {
				// The database's own schema: migrated by the count, never
				// written by the runs.
				if keys := countKeys(ctx, t, dbURL); keys != 0 {
					t.Errorf("the database's own key table holds %d keys; want none", keys)
				}
			}
		})
	}
}

// countKeys returns how many keys the key table at url holds.
func countKeys(ctx context.Context, t *testing.T, url string) int64 {
	t.Helper()
	db, err := database.Open(ctx, url, &database.Config{Migrate: true})
	if err != nil {
		t.Fatalf("open %s: %v", url, err)
	}
	defer db.Close()
	n, err := db.PurgeCount(ctx, database.PurgeParams{Before: time.Now().Add(time.Hour)})
	if err != nil {
		t.Fatalf("count keys: %v", err)
	}
	return n
}

// TestFreshNeedsPostgresOrSQLite refuses --fresh on MySQL, whose tables
// it cannot make anew, before it connects to anything.
func TestFreshNeedsPostgresOrSQLite(t *testing.T) {
	t.Parallel()
	_, err := RunAll(context.Background(), Config{
		DatabaseURL: "mysql://root@127.0.0.1:1/bench", Requests: 1, Rounds: 1, Variants: []string{Atomic}, Fresh: true,
	})
	if err == nil || !strings.Contains(err.Error(), "--fresh need") {
		t.Fatalf("RunAll on MySQL with Fresh: %v; want the refusal of --fresh", err)
	}
}
