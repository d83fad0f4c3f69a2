package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"runtime/pprof"
	"strings"

	"github.com/idemkit/idem/cmd/internal/bench"
)

const benchUsage = `Usage: idem bench --db URL [flags]

Bench measures what idem costs on the reference payments endpoint: POST
/v1/payments over real HTTP on loopback, in one process on one database,
without the middleware ("bare"; "bare-tx" with its insert in a transaction
of its own), with it in atomic and two-phase mode on new keys, and replaying
completed keys. The variants are interleaved in rounds so that a noisy
machine affects all alike (even rounds run all but the first listed in
reverse, so that none always runs right after the same one; use an even
number of rounds), and each is reported as a throughput ratio to the
bare endpoint and, when it ran, to bare-tx. Use a scratch database: the run
adds rows.

On PostgreSQL, the floor variants (floor-2rt, floor-2rt-read, floor-1rt,
floor-2commit; only when listed in --variants) run the endpoint without the
middleware, writing the payment and a completed key row by hand in the
fewest round trips that each shape of design allows: the best any
idempotency layer could do on this machine and database, to read the other
ratios against. floor-2rt checks nothing; floor-2rt-read adds the read of
the key after its lock that a layer which answers retries must make. replay-cold (only
when listed, PostgreSQL only) retries completed keys at a second instance
of the endpoint that never claimed them, as retries behind a load balancer
mostly arrive; replay's keys come back to the instance that claimed them,
which answers them at once. atomic-rows, two-phase-rows and replay-rows
(only when listed, PostgreSQL only) are atomic, two-phase and replay with
idempg.Config.NoAdvisoryLocks: claims and leaders by rows, as on databases
without advisory locks (see docs/scale-out.md). The app and db
columns are CPU time per request of this process and of the PostgreSQL
processes on this machine.

On MySQL and MariaDB (mysql://...), whose protocol has no pipelining, the
floors are floor-insert-first (atomic mode's shape: START TRANSACTION, the
started key row, the payment, the key row's update, COMMIT, one round trip
each) and floor-2commit (two-phase: the started key row committed on its
own, then the payment and the key row's update in a transaction); the
other floors are refused. The db column is not measured there.

Example:

	idem bench --db 'postgres://postgres@127.0.0.1:5432/bench?pool_max_conns=16'
	idem bench --db "$DATABASE_URL" --variants bare,bare-tx,atomic,floor-2rt,floor-1rt
	idem bench --db "$DATABASE_URL" --variants bare,atomic,floor-2rt,floor-2rt-read
	idem bench --db "$DATABASE_URL" --variants bare,atomic,replay,floor-2rt --plot bench.svg
	idem bench --db 'mysql://root@127.0.0.1:3306/bench' --variants bare,atomic,floor-insert-first,two-phase,floor-2commit,replay

Flags:
`

// runBench is "idem bench".
func runBench(ctx context.Context, c *cli, args []string) int {
	fs := flag.NewFlagSet("idem bench", flag.ContinueOnError)
	fs.SetOutput(c.stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), benchUsage)
		fs.PrintDefaults()
	}
	env := c.env()
	var (
		db             = dbFlag(fs, env, "database `URL`: postgres://..., mysql://... or sqlite:PATH (required; env DATABASE_URL)")
		duration       = fs.Duration("duration", env.Duration("IDEM_BENCH_DURATION", 0), "`time` each variant runs per round (default 3s; env IDEM_BENCH_DURATION)")
		requests       = fs.Int("requests", env.Int("IDEM_BENCH_REQUESTS", 0), "`number` of requests each variant sends per round, in place of --duration (env IDEM_BENCH_REQUESTS)")
		rounds         = fs.Int("rounds", env.Int("IDEM_BENCH_ROUNDS", 0), "`number` of interleaved rounds, even ones running all variants but the first in reverse (default 4; env IDEM_BENCH_ROUNDS)")
		concurrency    = fs.Int("concurrency", env.Int("IDEM_BENCH_CONCURRENCY", 0), "`number` of clients sending at once (default 8; env IDEM_BENCH_CONCURRENCY)")
		variants       = fs.String("variants", env.String("IDEM_BENCH_VARIANTS", strings.Join(bench.AllVariants, ",")), "comma-separated `list` of variants; bare always runs (env IDEM_BENCH_VARIANTS)")
		bouncer        = fs.String("pgbouncer", env.String("IDEM_BENCH_PGBOUNCER", ""), "`URL` of the same database through PgBouncer in pool_mode = transaction, for the variants bare-pgbouncer and atomic-pgbouncer (env IDEM_BENCH_PGBOUNCER)")
		asJSON         = fs.Bool("json", false, "print the figures as one JSON object instead of a table (fields in docs/benchmarks.md)")
		plotFile       = fs.String("plot", "", "also draw the run as an SVG image, throughput ratios with the floors marked and p50/p99 latencies, to `file`")
		cpuProfile     = fs.String("cpuprofile", "", "write a CPU profile of the whole run, for go tool pprof, to `file`; each variant's requests carry the label variant=NAME (pprof -tagfocus)")
		instr          = fs.Bool("instructions", false, "count this process's instructions per request of each of --variants (default atomic, two-phase, replay, floor-2rt-read) under valgrind --tool=callgrind, by package, from two runs of --requests (default 300) and twice as many requests, one at a time (PostgreSQL, MySQL or MariaDB)")
		prefillN       = fs.Int64("prefill", 0, "fill the key table with `number` completed keys (and their payments), spread over 1,000 clients and the last 23 hours, by statements the server fills itself on PostgreSQL, before measuring, and measure the same variants on an empty key table in the same rounds; on PostgreSQL in the schemas bench_prefill and bench_empty, dropped and made anew; on SQLite in PATH and PATH-empty, removed first")
		prefillPurge   = fs.Bool("prefill-purge", false, "with --prefill, add an expired backlog of --prefill-backlog keys and measure each variant a third time in every round, on the prefilled table while the purge deletes the backlog")
		purgeBatch     = fs.Int("purge-batch", 0, "with --prefill-purge, the purge's batch size, in keys (default the store's: 100 on SQLite, else 5000)")
		purgeShare     = fs.Float64("purge-share", 0, "with --prefill-purge, the most of its time the purge spends in its batches, from 0 to 1: after a batch of d it pauses d × (1 − share) / share; 1 sends them back to back (default the store's, as the purge service's: 0.1 on SQLite, else 0.2)")
		prefillBacklog = fs.Int64("prefill-backlog", 0, "with --prefill-purge, the `number` of expired keys (default a quarter of --prefill); size it so that the purge lasts the whole run")
		callgrindDir   = fs.String("callgrind-dir", "", "with --instructions, keep the callgrind files in `dir`, as callgrind.VARIANT.REQUESTS, for callgrind_annotate (default a temporary directory, removed)")
		fresh          = fs.Bool("fresh", false, "measure on tables without rows: on PostgreSQL in the schema bench_run of the database, dropped and made anew; on SQLite at PATH, removed first (the rows of earlier runs make inserts dearer as they grow, and runs on one database drift apart)")
		drive          = fs.Bool("drive", false, "send --requests requests of --variants one at a time, without bare, and print nothing: what --instructions runs under callgrind")
	)
	if env.Err() != nil {
		fmt.Fprintf(c.stderr, "idem bench: %v\n", env.Err())
		return exitUsage
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	if *db == "" || fs.NArg() > 0 {
		fmt.Fprintln(c.stderr, "idem bench: --db is required and takes no arguments")
		return exitUsage
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintf(c.stderr, "idem bench: cpu profile: %v\n", err)
			return exitFail
		}
		defer func() {
			pprof.StopCPUProfile()
			f.Close()
		}()
	}
	if *instr {
		return runInstructions(ctx, c, fs, *db, *variants, *requests, *callgrindDir, *asJSON)
	}
	if *drive {
		_, err := bench.Run(ctx, bench.Config{
			DatabaseURL: *db, Requests: int64(*requests), Rounds: 1, Concurrency: 1,
			Variants: strings.Split(*variants, ","), Drive: true,
		})
		if err != nil {
			fmt.Fprintf(c.stderr, "idem bench: %v\n", err)
			return exitFail
		}
		return exitOK
	}
	outcome, err := bench.RunAll(ctx, bench.Config{
		DatabaseURL: *db, Duration: *duration, Requests: int64(*requests), BouncerURL: *bouncer, Rounds: *rounds, Concurrency: *concurrency,
		Variants: strings.Split(*variants, ","), Progress: c.stderr, Prefill: *prefillN, PrefillPurge: *prefillPurge, PrefillBacklog: *prefillBacklog, PurgeBatch: *purgeBatch, PurgeShare: *purgeShare,
		Fresh: *fresh,
	})
	if err != nil {
		fmt.Fprintf(c.stderr, "idem bench: %v\n", err)
		return exitFail
	}
	results := outcome.Results
	if *plotFile != "" {
		if err := writePlot(*plotFile, results); err != nil {
			fmt.Fprintf(c.stderr, "idem bench: %v\n", err)
			return exitFail
		}
	}
	if *asJSON {
		if err := bench.WriteOutcomeJSON(c.stdout, outcome); err != nil {
			fmt.Fprintf(c.stderr, "idem bench: %v\n", err)
			return exitFail
		}
		return exitOK
	}
	bench.WriteOutcome(c.stdout, outcome)
	return exitOK
}

// writePlot draws the run's Report to the SVG file at path.
func writePlot(path string, results []bench.Result) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("plot: %w", err)
	}
	if err := bench.WritePlot(f, bench.NewReport(results)); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("plot: %w", err)
	}
	return nil
}

// runInstructions is "idem bench --instructions": this binary, run again
// with --drive under callgrind.
func runInstructions(ctx context.Context, c *cli, fs *flag.FlagSet, db, variants string, requests int, dir string, asJSON bool) int {
	exe, err := os.Executable()
	if err != nil {
		fmt.Fprintf(c.stderr, "idem bench: %v\n", err)
		return exitFail
	}
	cfg := bench.InstrConfig{DatabaseURL: db, Requests: requests, Command: []string{exe, "bench"}, Dir: dir, Progress: c.stderr}
	fs.Visit(func(f *flag.Flag) {
		if f.Name == "variants" {
			cfg.Variants = strings.Split(variants, ",")
		}
	})
	results, err := bench.Instructions(ctx, cfg)
	if err != nil {
		fmt.Fprintf(c.stderr, "idem bench: %v\n", err)
		return exitFail
	}
	if asJSON {
		enc := json.NewEncoder(c.stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(results); err != nil {
			fmt.Fprintf(c.stderr, "idem bench: %v\n", err)
			return exitFail
		}
		return exitOK
	}
	bench.WriteInstructions(c.stdout, results)
	return exitOK
}
