package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	"github.com/idemkit/idem/cmd/internal/database"
	"github.com/idemkit/idem/cmd/internal/payments"
	"github.com/idemkit/idem/internal/pgtest"
)

// TestRunAllPrefills fills a key table before measuring, on each store,
// and measures the same variants on an empty one and on the prefilled one
// while the purge runs: the prefilled table holds the keys asked for (and
// the backlog, of which the purge deletes what it counts), and the report
// carries prefill, empty and purging.
func TestRunAllPrefills(t *testing.T) {
	t.Parallel()
	for name, url := range storeURLs {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			const keys, backlog, requests = 2000, 700, 30
			variants := []string{Atomic, TwoPhase, Replay}
			ctx := context.Background()
			dbURL := url(t)
			out, err := RunAll(ctx, Config{
				DatabaseURL: dbURL, Requests: requests, Rounds: 1, Concurrency: 2, Variants: variants,
				Prefill: keys, PrefillPurge: true, PrefillBacklog: backlog,
			})
			if err != nil {
				t.Fatalf("RunAll: %v", err)
			}
			p := out.Prefill
			if p == nil || p.Keys != keys || p.Backlog != backlog || len(p.Empty) != len(variants)+1 || len(p.Purging) != len(variants)+1 {
				t.Fatalf("prefill %+v; want %d keys, a backlog of %d and the empty and purging sides' results", p, keys, backlog)
			}
			if p.Size.Table <= 0 || p.Size.Indexes <= 0 {
				t.Errorf("size %+v; want the table and its indexes measured", p.Size)
			}
			prefilled := dbURL
			if name == "postgres" {
				prefilled = schemaURL(dbURL, "bench_prefill")
			}
			db, err := database.Open(ctx, prefilled, nil)
			if err != nil {
				t.Fatalf("open the prefilled side: %v", err)
			}
			left, err := db.PurgeCount(ctx, database.PurgeParams{Before: time.Now().Add(-24 * time.Hour)})
			db.Close()
			if err != nil || p.PurgeRows+left != backlog {
				t.Errorf("the purge counted %d keys deleted and %d expired are left (%v); want %d in all", p.PurgeRows, left, err, backlog)
			}
			for _, side := range [][]Result{out.Results, p.Empty, p.Purging} {
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
				rep.Empty[Atomic].Requests != requests || rep.Prefill.Ratios[Atomic].RPS <= 0 ||
				rep.Purging[Atomic].Requests != requests || rep.Prefill.PurgingRatios[Atomic].RPS <= 0 {
				t.Errorf("JSON report %s; want prefill with bytes per key and ratios, empty and purging", js.String())
			}
		})
	}
}

// TestPrefillFillsInTimeOrder checks the fill's rows directly, on each
// store: spread over the clients, in the order of their creation, each
// with its payment.
func TestPrefillFillsInTimeOrder(t *testing.T) {
	t.Parallel()
	for name, c := range map[string]struct {
		url       func(t *testing.T) string
		unordered string // keys created before a key written ahead of them
	}{
		"sqlite": {func(t *testing.T) string { return "sqlite:" + filepath.Join(t.TempDir(), "fill.db") },
			`SELECT count(*) FROM (SELECT created_at, lag(created_at) OVER (ORDER BY p.rowid) AS prev
FROM payments p JOIN idempotency_keys k ON k.client_id = p.client_id AND k.idempotency_key = p.idempotency_key) WHERE created_at < prev`},
		"postgres": {func(t *testing.T) string { return pgtest.NewDatabase(t) },
			`SELECT count(*) FROM (SELECT created_at, lag(created_at) OVER (ORDER BY ctid) AS prev FROM idempotency_keys) k WHERE created_at < prev`},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db, err := database.Open(ctx, c.url(t), &database.Config{Migrate: true})
			if err != nil {
				t.Fatalf("open: %v", err)
			}
			defer db.Close()
			if _, err := payments.NewRepo(ctx, db); err != nil {
				t.Fatalf("create payments: %v", err)
			}
			if _, err := prefill(ctx, Config{Prefill: 3000, PrefillPurge: true, PrefillBacklog: 500, Progress: &bytes.Buffer{}}, db); err != nil {
				t.Fatalf("prefill: %v", err)
			}
			query := func(q string, dest ...any) error {
				if db.SQLite != nil {
					return db.SQLite.DB().QueryRowContext(ctx, q).Scan(dest...)
				}
				return db.Pool.QueryRow(ctx, q).Scan(dest...)
			}
			var n, clients, paid, unordered int
			err = query(`SELECT count(*), count(DISTINCT client_id) FROM idempotency_keys`, &n, &clients)
			if err != nil || n != 3500 || clients < 900 {
				t.Fatalf("%d keys over %d clients (%v); want 3500 over most of the 1000 clients", n, clients, err)
			}
			err = query(`SELECT count(*) FROM payments p JOIN idempotency_keys k ON k.client_id = p.client_id AND k.idempotency_key = p.idempotency_key`, &paid)
			if err != nil || paid != n {
				t.Errorf("%d keys have their payment (%v); want all %d", paid, err, n)
			}
			if err := query(c.unordered, &unordered); err != nil || unordered != 0 {
				t.Errorf("%d keys created before the key written ahead of them (%v); want 0", unordered, err)
			}
			left, err := db.PurgeCount(ctx, database.PurgeParams{Before: time.Now().Add(-24 * time.Hour)})
			if err != nil || left != 500 {
				t.Errorf("%d keys past retention (%v); want the backlog, 500", left, err)
			}
		})
	}
}
