package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/idemkit/idem/cmd/internal/database"
	"github.com/idemkit/idem/cmd/internal/payments"
	"github.com/idemkit/idem/internal/pgtest"
)

// TestRunAllPrefills fills a key table before measuring, on each store,
// and measures the same variants on an empty one: the prefilled table
// holds the keys asked for (and the backlog, which the purge deletes
// while the prefilled side runs), and the report carries prefill and
// empty.
func TestRunAllPrefills(t *testing.T) {
	t.Parallel()
	for name, url := range map[string]func(t *testing.T) string{
		"sqlite":   func(t *testing.T) string { return "sqlite:" + filepath.Join(t.TempDir(), "bench.db") },
		"postgres": func(t *testing.T) string { return pgtest.NewDatabase(t) },
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			const keys, requests = 2000, 30
			variants := []string{Atomic, TwoPhase, Replay}
			out, err := RunAll(context.Background(), Config{
				DatabaseURL: url(t), Requests: requests, Rounds: 1, Concurrency: 2, Variants: variants,
				Prefill: keys, PrefillPurge: true,
			})
			if err != nil {
				t.Fatalf("RunAll: %v", err)
			}
			p := out.Prefill
			if p == nil || p.Keys != keys || p.Backlog != keys/4 || len(p.Empty) != len(variants)+1 {
				t.Fatalf("prefill %+v; want %d keys, a backlog of %d and the empty side's results", p, keys, keys/4)
			}
			if p.Size.Table <= 0 || p.Size.Indexes <= 0 {
				t.Errorf("size %+v; want the table and its indexes measured", p.Size)
			}
			if p.PurgeRows != keys/4 {
				t.Errorf("the purge deleted %d keys, want the backlog, %d", p.PurgeRows, keys/4)
			}
			for _, side := range [][]Result{out.Results, p.Empty} {
				for _, r := range side {
					if r.Requests != requests || r.Errors != 0 {
						t.Errorf("%s: %+v; want %d requests, no errors", r.Variant, r, requests)
					}
				}
			}
			var js bytes.Buffer
			if err := WriteOutcomeJSON(&js, out); err != nil {
				t.Fatalf("WriteOutcomeJSON: %v", err)
			}
			var rep Report
			if err := json.Unmarshal(js.Bytes(), &rep); err != nil {
				t.Fatalf("the JSON report does not decode: %v\n%s", err, js.String())
			}
			if rep.Prefill == nil || rep.Prefill.Keys != keys || rep.Prefill.TableBytesPerKey <= 0 ||
				rep.Empty[Atomic].Requests != requests || rep.Prefill.Ratios[Atomic].RPS <= 0 {
				t.Errorf("JSON report %s; want prefill with bytes per key and ratios, and empty", js.String())
			}
		})
	}
}

// TestPrefillFillsInTimeOrder checks the fill's rows directly: spread
// over the clients, created in the order of their index.
func TestPrefillFillsInTimeOrder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, err := database.Open(ctx, "sqlite:"+filepath.Join(t.TempDir(), "fill.db"), &database.Config{Migrate: true})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	defer db.Close()
	if _, err := payments.NewRepo(ctx, db); err != nil {
		t.Fatalf("create payments: %v", err)
	}
	if _, err := prefill(ctx, Config{Prefill: 3000, Progress: &bytes.Buffer{}}, db); err != nil {
		t.Fatalf("prefill: %v", err)
	}
	var n, clients, unordered int
	err = db.SQLite.DB().QueryRowContext(ctx, `SELECT count(*), count(DISTINCT client_id) FROM idempotency_keys`).Scan(&n, &clients)
	if err != nil || n != 3000 || clients < 900 {
		t.Fatalf("%d keys over %d clients (%v); want 3000 over most of the 1000 clients", n, clients, err)
	}
	err = db.SQLite.DB().QueryRowContext(ctx, `SELECT count(*) FROM (SELECT created_at, lag(created_at) OVER (ORDER BY rowid) AS prev
FROM payments p JOIN idempotency_keys k ON k.client_id = p.client_id AND k.idempotency_key = p.idempotency_key) WHERE created_at < prev`).Scan(&unordered)
	if err != nil || unordered != 0 {
		t.Errorf("%d keys created before the key inserted ahead of them (%v); want 0", unordered, err)
	}
}
