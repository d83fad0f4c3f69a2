// Package bench measures the cost of idem on the reference payments
// endpoint: POST /v1/payments over real HTTP on loopback, with the
// middleware in each mode and switched off, in one process on one database,
// interleaved in rounds so that a noisy machine affects every variant alike
// (see roundOrder).
// Results are throughput ratios to the bare endpoint.
package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/idemkit/idem/cmd/internal/database"
	"github.com/idemkit/idem/idemsqlite"
	"github.com/idemkit/idem/idemstore"
)

// purgePace returns the batch size and share that the purging side's purge
// runs with on db: cfg's, or the store's defaults.
func purgePace(cfg Config, db *database.DB) (batch int, share float64) {
	batch, share = cfg.PurgeBatch, cfg.PurgeShare
	if batch == 0 {
		batch = idemstore.PurgeBatchSizeDefault
		if db.SQLite != nil {
			batch = idemsqlite.PurgeBatchSizeDefault
		}
	}
	if share == 0 {
		share = idemstore.PurgeShareDefault
		if db.SQLite != nil {
			share = idemsqlite.PurgeShareDefault
		}
	}
	return batch, share
}

// Variants, in the order they run in the first round (see roundOrder).
const (
	Bare     = "bare"      // the endpoint without the middleware
	BareTx   = "bare-tx"   // the same, its insert in a transaction of its own
	Atomic   = "atomic"    // new keys, ModeAtomic
	TwoPhase = "two-phase" // new keys, ModeTwoPhase
	Replay   = "replay"    // retries of completed keys
)

// AllVariants lists every variant but the floors.
var AllVariants = []string{Bare, BareTx, Atomic, TwoPhase, Replay, Conflict}

// Config configures a run.
type Config struct {
	// DatabaseURL is postgres://... or sqlite:PATH. Use a scratch database:
	// the run adds payment and key rows. Required.
	DatabaseURL string
	// Duration is how long each variant runs in each round. Defaults to 3 s.
	// Ignored when Requests is set.
	Duration time.Duration
	// Requests, when above 0, is how many requests each variant sends in
	// each round, in place of a Duration: a run of fixed size, whatever the
	// speed of the machine. Defaults to 0 (run for Duration).
	Requests int64
	// Rounds is how many times the variants are interleaved. Defaults to 4,
	// an even number (see roundOrder).
	Rounds int
	// Concurrency is the number of clients sending at once. Defaults to 8.
	Concurrency int
	// Variants to run. Defaults to AllVariants; Bare always runs.
	Variants []string
	// BouncerURL reaches the same database as DatabaseURL through
	// PgBouncer in pool_mode = transaction, for BouncerVariants. Defaults
	// to none.
	BouncerURL string
	// Progress receives a line per variant and round. Defaults to io.Discard.
	Progress io.Writer
	// Prefill, when above 0, fills the key table with this many completed
	// keys (and their payments) before measuring, and measures the same
	// variants on an empty key table in the same rounds, each variant on
	// both one after the other: on PostgreSQL in the schemas bench_prefill
	// and bench_empty of the database, which it drops and creates anew; on
	// SQLite in PATH and PATH-empty, which it removes first. Defaults to 0.
	Prefill int64
	// PrefillPurge adds an expired backlog of PrefillBacklog keys
	// (created 25 to 48 hours ago, past the default retention) and
	// measures each variant a third time in every round, on the prefilled
	// table while the store's purge deletes the backlog (in its batches
	// and pauses, as the purge service does). Defaults to false.
	PrefillPurge bool
	// PrefillBacklog is the size of PrefillPurge's backlog. Size it so
	// that the purge lasts the whole run: the purge runs only while the
	// third side is measured. Defaults to a quarter of Prefill.
	PrefillBacklog int64
	// PurgeBatch is the batch size of PrefillPurge's purge. Defaults to
	// the store's (idemsqlite.PurgeBatchSizeDefault on SQLite, else
	// idemstore.PurgeBatchSizeDefault).
	PurgeBatch int
	// PurgeShare is the most of its time PrefillPurge's purge spends in
	// its batches (idemstore.PurgeParams.Share). Defaults to the store's
	// (idemsqlite.PurgeShareDefault on SQLite, else
	// idemstore.PurgeShareDefault); 1 sends them back to back.
	PurgeShare float64
	// Fresh runs the variants on tables without rows: on PostgreSQL in
	// the schema bench_run of the database, which it drops and creates
	// anew; on SQLite at PATH, which it removes first. The rows that
	// earlier runs left behind make every insert dearer as they grow (on
	// PostgreSQL, once the indexes outgrow shared_buffers) and runs on
	// one database drift apart: runs to compare start empty. With
	// Prefill, whose sides are made anew anyway, it changes nothing; on
	// MySQL it is refused. Defaults to false.
	Fresh bool
	// Drive runs the listed variants only, without bare, and Run returns
	// no results: the run that Instructions counts under callgrind.
	// Defaults to false.
	Drive bool
}

// Result is one variant's total over all rounds.
type Result struct {
	Variant  string
	Requests int64
	Errors   int64 // answers other than the expected status
	// FirstError is what the first of them got: the status and the start
	// of the body, or the transport's error; empty when none failed.
	FirstError string
	Elapsed    time.Duration
	PerSecond  float64
	// Ratio is PerSecond divided by the bare endpoint's.
	Ratio float64
	// RatioTx is PerSecond divided by that of the bare endpoint with its
	// insert in a transaction of its own; 0 when that variant did not run.
	RatioTx  float64
	P50, P99 time.Duration
	// CPU is the CPU time per request of this process: HTTP clients,
	// server, middleware and database driver. On Linux only, else 0.
	CPU time.Duration
	// DBCPU is the CPU time per request of the PostgreSQL processes on
	// this machine, when they can be read (Linux, a local server); else 0.
	// SQLite runs inside this process, in CPU.
	DBCPU time.Duration
}

// Run runs the benchmark.
func Run(ctx context.Context, cfg Config) ([]Result, error) {
	out, err := RunAll(ctx, cfg)
	if err != nil || out == nil {
		return nil, err
	}
	return out.Results, nil
}

// Outcome is what RunAll measured.
type Outcome struct {
	// Results are the variants' figures; with Config.Prefill, on the
	// prefilled key table.
	Results []Result
	// Prefill is the prefilled table and the same variants on an empty
	// one, measured in the same rounds; nil without Config.Prefill.
	Prefill *PrefillOutcome
}

// RunAll runs the benchmark, with Config.Prefill too.
func RunAll(ctx context.Context, cfg Config) (*Outcome, error) {
	if cfg.DatabaseURL == "" {
		return nil, errors.New("bench: a database URL is required")
	}
	if cfg.Duration <= 0 {
		cfg.Duration = 3 * time.Second
	}
	if cfg.Rounds <= 0 {
		cfg.Rounds = 4
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 8
	}
	if len(cfg.Variants) == 0 {
		cfg.Variants = AllVariants
	}
	known := slices.Concat(AllVariants, FloorVariants, MySQLFloorVariants, BouncerVariants, RowVariants, []string{ReplayCold})
	for _, v := range cfg.Variants {
		if !slices.Contains(known, v) {
			return nil, fmt.Errorf("bench: unknown variant %q; want one of %s", v, strings.Join(known, ", "))
		}
	}
	if !slices.Contains(cfg.Variants, Bare) && !cfg.Drive {
		cfg.Variants = append([]string{Bare}, cfg.Variants...)
	}
	if cfg.Progress == nil {
		cfg.Progress = io.Discard
	}

	if (cfg.Prefill > 0 || cfg.Fresh) && slices.ContainsFunc(cfg.Variants, func(v string) bool { return slices.Contains(BouncerVariants, v) }) {
		return nil, errors.New("bench: --prefill and --fresh do not run the PgBouncer variants")
	}
	if cfg.PurgeBatch < 0 || !idemstore.ValidPurgeShare(cfg.PurgeShare) {
		return nil, errors.New("bench: the purge's batch size must not be negative, and its share must be from 0 to 1")
	}

	// One connection more than the clients: the conflict variant's holder
	// keeps its own open while the clients send its key.
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: cfg.Concurrency + 1, MaxConnsPerHost: cfg.Concurrency + 1}}
	var (
		rigs    []*rig
		sides   []side
		fill    *PrefillOutcome
		expired int64 // the backlog before the purging side's first pass
	)
	defer func() {
		for _, g := range rigs {
			g.close()
		}
	}()
	if cfg.Prefill <= 0 {
		url := cfg.DatabaseURL
		if cfg.Fresh {
			urls, err := emptyURLs(ctx, url, "run")
			if err != nil {
				return nil, err
			}
			url = urls[0]
		}
		g, err := newRig(ctx, cfg, url, client)
		if err != nil {
			return nil, err
		}
		rigs, sides = append(rigs, g), append(sides, side{})
	} else {
		urls, err := emptyURLs(ctx, cfg.DatabaseURL, "prefill", "empty")
		if err != nil {
			return nil, err
		}
		for _, url := range urls {
			g, err := newRig(ctx, cfg, url, client)
			if err != nil {
				return nil, err
			}
			rigs = append(rigs, g)
		}
		sides = append(sides, side{name: "prefill"}, side{rig: 1, name: "empty"})
		if cfg.PrefillPurge {
			sides = append(sides, side{name: "purging", purge: true})
		}
		if fill, err = prefill(ctx, cfg, rigs[0].db); err != nil {
			return nil, err
		}
		if cfg.PrefillPurge {
			fill.PurgeBatch, fill.PurgeShare = purgePace(cfg, rigs[0].db)
			if expired, err = rigs[0].db.PurgeCount(ctx, database.PurgeParams{Before: time.Now().Add(-24 * time.Hour)}); err != nil {
				return nil, fmt.Errorf("bench: count the backlog: %w", err)
			}
		}
	}
	for _, g := range rigs {
		if err := g.prepare(ctx, cfg, client); err != nil {
			return nil, err
		}
	}

	totals := make([]map[string]*tally, len(sides))
	for i := range sides {
		totals[i] = map[string]*tally{}
		for _, v := range cfg.Variants {
			totals[i][v] = &tally{}
		}
	}
	width := nameWidth(cfg.Variants)
	for round := 1; round <= cfg.Rounds; round++ {
		for _, v := range roundOrder(cfg.Variants, round) {
			for i, sd := range sides {
				g := rigs[sd.rig]
				stop := func() error { return nil }
				if sd.purge {
					stop = fill.purgeDuring(ctx, g.db, database.PurgeParams{BatchSize: cfg.PurgeBatch, Share: cfg.PurgeShare})
				}
				t, err := g.run(ctx, cfg, client, v)
				err = errors.Join(err, stop())
				if err != nil {
					return nil, err
				}
				totals[i][v].add(t)
				label := v
				if sd.name != "" {
					label = sd.name + " " + v
				}
				fmt.Fprintf(cfg.Progress, "round %d %-*s %8.0f req/s  p50 %6.2f ms  p99 %6.2f ms  errors %d\n",
					round, width+8, label, float64(t.n)/t.elapsed.Seconds(), ms(t.quantile(0.50)), ms(t.quantile(0.99)), t.errors)
				if t.firstError != "" {
					fmt.Fprintf(cfg.Progress, "round %d %-*s the first error: %s\n", round, width+8, label, t.firstError)
				}
				if err := ctx.Err(); err != nil {
					return nil, err
				}
			}
		}
	}

	if cfg.Drive {
		return nil, nil
	}
	if fill != nil && cfg.PrefillPurge {
		left, err := rigs[0].db.PurgeCount(ctx, database.PurgeParams{Before: time.Now().Add(-24 * time.Hour)})
		if err != nil {
			return nil, fmt.Errorf("bench: count the backlog left: %w", err)
		}
		fill.PurgeRows = expired - left
	}
	out := &Outcome{Results: results(cfg, totals[0]), Prefill: fill}
	if fill != nil {
		fill.Empty = results(cfg, totals[1])
		if cfg.PrefillPurge {
			fill.Purging = results(cfg, totals[2])
		}
	}
	return out, nil
}

// roundOrder returns the order the variants run in, in the given round
// (from 1): odd rounds run them as listed, even rounds run the first
// first and the others in reverse. A variant's figures carry some of
// what the one before it left behind (the database's writes to flush,
// the heap's garbage): run in one order every round, the variant after
// the heaviest (bare, which runs most requests) paid for it every time:
// on PostgreSQL here that lowered atomic over floor-2rt-read by about
// 0.035 (docs/benchmarks.md, "A fair order"). In the usual run of three
// (bare and the two to compare) each two rounds run each variant right
// after each other one exactly once, counting across the rounds'
// boundary; with more, the second and the last listed still trade places.
func roundOrder(variants []string, round int) []string {
	if round%2 == 1 || len(variants) < 3 {
		return variants
	}
	out := make([]string, 0, len(variants))
	out = append(out, variants[0])
	for i := len(variants) - 1; i > 0; i-- {
		out = append(out, variants[i])
	}
	return out
}

// side is one of the tables a run measures each variant on, one after the
// other in every round: the run's only one; or, with Config.Prefill, the
// prefilled key table, the empty one, and with Config.PrefillPurge the
// prefilled one while the purge runs.
type side struct {
	rig   int    // index of the rig in RunAll's rigs
	name  string // in the progress lines
	purge bool   // the purge runs while the side is measured
}

// results are the Results of one side of a run.
func results(cfg Config, totals map[string]*tally) []Result {
	bare := totals[Bare].rate()
	var out []Result
	for _, v := range cfg.Variants {
		t := totals[v]
		r := Result{
			Variant: v, Requests: t.n, Errors: t.errors, FirstError: t.firstError, Elapsed: t.elapsed,
			PerSecond: t.rate(), Ratio: t.rate() / bare,
			P50: t.quantile(0.50), P99: t.quantile(0.99),
			CPU: t.perRequest(t.cpu), DBCPU: t.perRequest(t.dbCPU),
		}
		if tx, ok := totals[BareTx]; ok && tx.rate() > 0 {
			r.RatioTx = t.rate() / tx.rate()
		}
		out = append(out, r)
	}
	return out
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// WriteTable writes results as a table: ratios to the bare endpoint, and to
// the bare endpoint with a transaction of its own when that variant ran.
func WriteTable(w io.Writer, results []Result) {
	withTx := slices.ContainsFunc(results, func(r Result) bool { return r.RatioTx > 0 })
	var names []string
	for _, r := range results {
		names = append(names, r.Variant)
	}
	width := nameWidth(names)
	fmt.Fprintf(w, "%-*s %10s %10s %8s", width, "variant", "requests", "req/s", "ratio")
	if withTx {
		fmt.Fprintf(w, " %9s", "vs tx")
	}
	fmt.Fprintf(w, " %9s %9s %7s %11s %10s\n", "p50 ms", "p99 ms", "errors", "app us/req", "db us/req")
	for _, r := range results {
		fmt.Fprintf(w, "%-*s %10d %10.0f %7.2fx", width, r.Variant, r.Requests, r.PerSecond, r.Ratio)
		if withTx {
			fmt.Fprintf(w, " %8.2fx", r.RatioTx)
		}
		fmt.Fprintf(w, " %9.2f %9.2f %7d %11.0f %10.0f\n", ms(r.P50), ms(r.P99), r.Errors, us(r.CPU), us(r.DBCPU))
	}
	for _, r := range results {
		if r.FirstError != "" {
			fmt.Fprintf(w, "%s: %d errors; the first got: %s\n", r.Variant, r.Errors, r.FirstError)
		}
	}
}

// nameWidth is the width of a column of variant names: the longest name's,
// and no less than 10, so that the columns after it line up.
func nameWidth(names []string) int {
	width := 10
	for _, n := range names {
		width = max(width, len(n))
	}
	return width
}
