package bench

import (
	"bytes"
	"context"
	"encoding/json"
	neturl "net/url"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// storeURLs make a new scratch database of each store that a run
// measures on, by the store's name.
var storeURLs = map[string]func(t *testing.T) string{
	"sqlite":   func(t *testing.T) string { return "sqlite:" + filepath.Join(t.TempDir(), "bench.db") },
	"postgres": func(t *testing.T) string { return pgtest.NewDatabase(t) },
}

// TestRunMeasuresEveryVariant runs a short benchmark on each store and
// checks that every variant made its fixed count of requests without errors and the ratios
// are computed against the bare endpoint. It asserts no speed: speed
// targets live in docs/benchmarks.md and in `idem bench`.
func TestRunMeasuresEveryVariant(t *testing.T) {
	t.Parallel()
	for name, url := range storeURLs {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var progress bytes.Buffer
			results, err := Run(context.Background(), Config{
				DatabaseURL: url(t), Requests: 40, Rounds: 1, Concurrency: 4, Progress: &progress,
			})
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
			if len(results) != len(AllVariants) {
				t.Fatalf("%d results, want %d", len(results), len(AllVariants))
			}
			for _, r := range results {
				if r.Requests != 40 || r.Errors != 0 || r.PerSecond <= 0 || r.P99 < r.P50 {
					t.Errorf("%s: %+v; want 40 requests, no errors, p99 >= p50", r.Variant, r)
				}
			}
			if results[0].Variant != Bare || results[0].Ratio != 1 {
				t.Errorf("first result %+v, want the bare endpoint with ratio 1", results[0])
			}
			if results[1].Variant != BareTx || results[1].RatioTx != 1 {
				t.Errorf("second result %+v, want the bare endpoint in its own transaction with ratio to it 1", results[1])
			}
			if runtime.GOOS == "linux" {
				for _, r := range results {
					if r.CPU <= 0 {
						t.Errorf("%s: CPU per request %s, want > 0", r.Variant, r.CPU)
					}
				}
			}
			var js bytes.Buffer
			if err := WriteJSON(&js, results); err != nil {
				t.Fatalf("WriteJSON: %v", err)
			}
			var rep Report
			if err := json.Unmarshal(js.Bytes(), &rep); err != nil {
				t.Fatalf("the JSON report does not decode: %v\n%s", err, js.String())
			}
			if len(rep.Order) != len(AllVariants) || rep.Variants[Atomic].Requests != 40 || rep.Variants[Bare].Ratio != 1 ||
				rep.ConflictP99 == nil || *rep.ConflictP99 <= 0 || *rep.ConflictP99 < *rep.ConflictP50 {
				t.Errorf("JSON report %s; want every variant, 40 atomic requests, bare at ratio 1 and the conflict latencies", js.String())
			}
			var table bytes.Buffer
			WriteTable(&table, results)
			if !strings.Contains(table.String(), "two-phase") || !strings.Contains(table.String(), "vs tx") ||
				!strings.Contains(progress.String(), "round 1") {
				t.Errorf("table:\n%s\nprogress:\n%s", table.String(), progress.String())
			}
		})
	}
}

// TestDriveConflict runs the conflict variant one client at a time, as
// `idem bench --drive` (and so --instructions) does: the holder of the key
// keeps a connection of its own while the client sends the key again.
func TestDriveConflict(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, err := Run(ctx, Config{
		DatabaseURL: pgtest.NewDatabase(t), Requests: 5, Rounds: 1, Concurrency: 1,
		Variants: []string{Conflict}, Drive: true,
	})
	if err != nil {
		t.Fatalf("Run: %v (with one connection for the client and the holder both, the client waited behind the holder)", err)
	}
}

func TestRunRejectsUnknownVariant(t *testing.T) {
	t.Parallel()
	if _, err := Run(context.Background(), Config{DatabaseURL: "sqlite:x", Variants: []string{"fast"}}); err == nil {
		t.Fatal("Run with an unknown variant succeeded")
	}
}

// TestFloorVariants runs the floor variants, which write payments and key
// rows without the middleware, on PostgreSQL, and refuses them on SQLite.
func TestFloorVariants(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t)
	results, err := Run(context.Background(), Config{
		DatabaseURL: url, Requests: 40, Rounds: 1, Concurrency: 4, Variants: FloorVariants,
	})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if len(results) != 1+len(FloorVariants) {
		t.Fatalf("%d results, want bare and %d floor variants", len(results), len(FloorVariants))
	}
	var requests int64
	for _, r := range results[1:] {
		if r.Requests != 40 || r.Errors != 0 {
			t.Errorf("%s: %+v; want 40 requests and no errors", r.Variant, r)
		}
		requests += r.Requests
	}
	// Every request of a floor variant committed a payment and its
	// completed key row, both under the key the request carried.
	pool := openPool(t, url)
	var keys, matched int64
	if err := pool.QueryRow(context.Background(), `SELECT count(*), count(p.id) FROM idempotency_keys k
LEFT JOIN payments p ON p.client_id = k.client_id AND p.idempotency_key = k.idempotency_key
WHERE k.status = 'completed' AND k.idempotency_key LIKE 'bench-%'`).Scan(&keys, &matched); err != nil {
		t.Fatalf("count keys: %v", err)
	}
	if keys != requests || matched != requests {
		t.Errorf("%d completed key rows, %d with their payment; want %d of each, one per request", keys, matched, requests)
	}

	_, err = Run(context.Background(), Config{
		DatabaseURL: "sqlite:" + filepath.Join(t.TempDir(), "b.db"), Requests: 1, Rounds: 1,
		Variants: []string{Floor2RT},
	})
	if err == nil || !strings.Contains(err.Error(), "needs PostgreSQL") {
		t.Errorf("floor variant on SQLite: err %v, want one that says it needs PostgreSQL", err)
	}
}

// TestReplayCold runs the cold replays: each request retries a completed
// key of its own, at an instance that never claimed it, and gets the
// replay: no payment is made under any of the keys.
func TestReplayCold(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t)
	results, err := Run(context.Background(), Config{
		DatabaseURL: url, Requests: 40, Rounds: 2, Concurrency: 4, Variants: []string{ReplayCold},
	})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if len(results) != 2 || results[1].Variant != ReplayCold || results[1].Requests != 80 || results[1].Errors != 0 {
		t.Fatalf("results %+v; want bare, then replay-cold with 80 requests and no errors", results)
	}
	pool := openPool(t, url)
	var keys, paid int64
	if err := pool.QueryRow(context.Background(), `SELECT
    (SELECT count(*) FROM idempotency_keys WHERE idempotency_key LIKE 'bench-cold-%'),
    (SELECT count(*) FROM payments WHERE idempotency_key LIKE 'bench-cold-%')`).Scan(&keys, &paid); err != nil {
		t.Fatalf("count: %v", err)
	}
	if keys != 80 || paid != 0 {
		t.Errorf("%d cold keys and %d payments under them; want 80 keys, one per request, and no payment", keys, paid)
	}

	_, err = Run(context.Background(), Config{
		DatabaseURL: "sqlite:" + filepath.Join(t.TempDir(), "b.db"), Requests: 1, Rounds: 1,
		Variants: []string{ReplayCold},
	})
	if err == nil || !strings.Contains(err.Error(), "needs PostgreSQL") {
		t.Errorf("replay-cold on SQLite: err %v, want one that says it needs PostgreSQL", err)
	}
}

func openPool(t *testing.T, url string) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatalf("open pool: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// TestBouncerVariants runs the variants through a real PgBouncer in front
// of the benchmark's database, and refuses them without one.
func TestBouncerVariants(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t)
	results, err := Run(context.Background(), Config{
		DatabaseURL: url, BouncerURL: pgtest.StartBouncer(t, url), Requests: 40, Rounds: 1, Concurrency: 4,
		Variants: BouncerVariants,
	})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if len(results) != 1+len(BouncerVariants) {
		t.Fatalf("%d results, want bare and %d variants through PgBouncer", len(results), len(BouncerVariants))
	}
	for _, r := range results {
		if r.Requests != 40 || r.Errors != 0 {
			t.Errorf("%s: %+v; want 40 requests and no errors", r.Variant, r)
		}
	}
	_, err = Run(context.Background(), Config{DatabaseURL: url, Requests: 1, Rounds: 1, Variants: []string{AtomicPgBouncer}})
	if err == nil || !strings.Contains(err.Error(), "--pgbouncer") {
		t.Errorf("a PgBouncer variant without PgBouncer: err %v, want one that names --pgbouncer", err)
	}
}

// TestBouncerWithoutStatementsIsRefused: through a PgBouncer that cannot
// keep pgx's prepared statements (Debian's 1.18, say), with pgx's default
// query mode, most requests would fail; the run must refuse at once and
// say how to fix the URL. A PgBouncer that keeps them must run cleanly.
func TestBouncerWithoutStatementsIsRefused(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t)
	via, err := neturl.Parse(pgtest.StartBouncer(t, url))
	if err != nil {
		t.Fatal(err)
	}
	q := via.Query()
	q.Del("default_query_exec_mode") // back to pgx's default, which prepares by name
	via.RawQuery = q.Encode()
	results, err := Run(context.Background(), Config{
		DatabaseURL: url, BouncerURL: via.String(), Requests: 40, Rounds: 1, Concurrency: 4,
		Variants: []string{AtomicPgBouncer},
	})
	if err != nil {
		if !strings.Contains(err.Error(), "default_query_exec_mode=cache_describe") {
			t.Fatalf("Run: %v; want a refusal that names default_query_exec_mode=cache_describe", err)
		}
		return
	}
	for _, r := range results {
		if r.Errors != 0 {
			t.Errorf("%s: %d errors (the first got %s); the check passed, so want none", r.Variant, r.Errors, r.FirstError)
		}
	}
}
