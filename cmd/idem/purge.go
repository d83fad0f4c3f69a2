package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/database"
)

const purgeUsage = `Usage: idem purge --db URL [--older-than DURATION] [--batch N] [--dry-run]

Purge deletes idempotency keys created more than --older-than ago (the
retention you publish; default 24h), in batches, each its own short
statement, skipping rows that requests in flight hold. It never deletes a
key in flight: a key still started goes only once its lease was taken more
than --older-than ago, and --older-than must be longer than the service's
lease (--lock-timeout). Keys past retention are already treated as unused
by every claim; purging keeps the table from growing without bound.
paymentsd and any service that runs idem.Purger purge by themselves; use
this command for one-off runs, or on a schedule when that service is off.

--dry-run counts the keys that would be deleted and deletes nothing.

Flags:
`

// runPurge is "idem purge".
func runPurge(ctx context.Context, c *cli, args []string) int {
	fs := flag.NewFlagSet("idem purge", flag.ContinueOnError)
	fs.SetOutput(c.stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), purgeUsage)
		fs.PrintDefaults()
	}
	env := c.env()
	db := dbFlag(fs, env, "database `URL`: postgres://... or sqlite:PATH (required; env DATABASE_URL)")
	olderThan := fs.Duration("older-than", env.Duration("IDEM_PURGE_OLDER_THAN", idem.RetentionDefault), "delete keys created more than this `duration` ago (env IDEM_PURGE_OLDER_THAN)")
	batch := fs.Int("batch", idem.PurgeBatchSizeDefault, "keys deleted per statement")
	lockTimeout := fs.Duration("lock-timeout", env.Duration("IDEM_LOCK_TIMEOUT", idem.LockTimeoutDefault), "the service's two-phase lease `duration`; --older-than must be longer (env IDEM_LOCK_TIMEOUT)")
	dryRun := fs.Bool("dry-run", false, "count the keys that would be deleted; delete nothing")
	if env.Err() != nil {
		fmt.Fprintf(c.stderr, "idem purge: %v\n", env.Err())
		return exitUsage
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	if *db == "" || fs.NArg() > 0 || *olderThan <= 0 || *batch <= 0 {
		fmt.Fprintln(c.stderr, "idem purge: --db is required, --older-than and --batch must be positive, and no arguments are taken")
		return exitUsage
	}
	if *olderThan <= *lockTimeout {
		fmt.Fprintf(c.stderr, "idem purge: --older-than (%s) must be longer than the lease, --lock-timeout (%s): keys that young may be in flight\n", *olderThan, *lockTimeout)
		return exitUsage
	}
	store, err := openStore(ctx, *db, slog.New(slog.DiscardHandler))
	if err != nil {
		fmt.Fprintf(c.stderr, "idem purge: %v\n", err)
		return exitFail
	}
	defer store.Close()
	before := time.Now().Add(-*olderThan)
	if *dryRun {
		n, err := store.PurgeCount(ctx, database.PurgeParams{Before: before})
		if err != nil {
			fmt.Fprintf(c.stderr, "idem purge: %v\n", err)
			return exitFail
		}
		fmt.Fprintf(c.stdout, "dry run: would delete %d keys created before %s\n", n, before.UTC().Format(time.RFC3339))
		return exitOK
	}
	n, err := store.Purge(ctx, database.PurgeParams{Before: before, BatchSize: *batch})
	if err != nil {
		fmt.Fprintf(c.stderr, "idem purge: deleted %d keys, then: %v\n", n, err)
		return exitFail
	}
	fmt.Fprintf(c.stdout, "deleted %d keys created before %s\n", n, before.UTC().Format(time.RFC3339))
	return exitOK
}
