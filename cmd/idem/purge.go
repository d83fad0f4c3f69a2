package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/cmd/internal/database"
)

const purgeUsage = `Usage: idem purge --db URL [--retention D] [--older-than D] [--batch N] [--share F] [--dry-run] [--i-know --reason TEXT]

Purge deletes idempotency keys created more than --older-than ago (default:
--retention, the retention the service publishes, 24h unless you set it),
in batches, each its own short statement, skipping rows that requests in
flight hold. It never deletes a key in flight: a key still started goes
only once its lease was taken more than --older-than ago, and --older-than
must be longer than the service's lease (--lock-timeout). Keys past
retention are already treated as unused by every claim; purging keeps the
table from growing without bound. paymentsd and any service that runs
idem.Purger purge by themselves; use this command for one-off runs, or on a
schedule when that service is off.

It paces itself as the purge service does: after each batch it pauses long
enough that its batches take at most --share of its time (0.2, or 0.1 on
SQLite: with 0.2 a batch that took 50 ms is followed by a pause of 200 ms),
so that requests get the database for the rest. --share 1 sends the batches back to back, for a
service that is off.

An --older-than shorter than --retention deletes completed keys that
clients may still retry with, and each such retry runs its operation again
(a second charge). Purge refuses it unless --i-know and a --reason, which is
logged. Set --retention (or IDEM_RETENTION) to the service's -retention:
nothing else tells this command what the service publishes.

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
	db := dbFlag(fs, env, "database `URL`: postgres://..., mysql://... or sqlite:PATH (required; env DATABASE_URL)")
	retention := fs.Duration("retention", env.Duration("IDEM_RETENTION", idem.RetentionDefault), "the retention the service publishes (its -retention, idem.Config.Retention): a shorter --older-than needs --i-know (env IDEM_RETENTION)")
	olderThan := fs.Duration("older-than", env.Duration("IDEM_PURGE_OLDER_THAN", 0), "delete keys created more than this `duration` ago; 0 means --retention (env IDEM_PURGE_OLDER_THAN)")
	batch := fs.Int("batch", 0, "keys deleted per statement; 0 means the store's (100 on SQLite, else 5000)")
	share := fs.Float64("share", 0, "the most of its time the purge spends in its batches, from 0 to 1: after a batch that took d it pauses d × (1 − share) / share; 0 means the store's (0.1 on SQLite, else 0.2); 1 sends the batches back to back")
	lockTimeout := fs.Duration("lock-timeout", env.Duration("IDEM_LOCK_TIMEOUT", idem.LockTimeoutDefault), "the service's two-phase lease `duration`; --older-than must be longer (env IDEM_LOCK_TIMEOUT)")
	dryRun := fs.Bool("dry-run", false, "count the keys that would be deleted; delete nothing")
	iKnow := fs.Bool("i-know", false, "confirm an --older-than shorter than --retention: completed keys that clients may still retry with are deleted, and those retries run their operations again")
	reason := fs.String("reason", "", "why, for the log (required with --i-know)")
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
	if *db == "" || fs.NArg() > 0 || *olderThan < 0 || *retention <= 0 || *batch < 0 || !(*share >= 0 && *share <= 1) {
		fmt.Fprintln(c.stderr, "idem purge: --db is required, --retention must be positive, --batch must not be negative, --share must be from 0 to 1, --older-than must not be negative, and no arguments are taken")
		return exitUsage
	}
	if *olderThan == 0 {
		*olderThan = *retention
	}
	if *olderThan <= *lockTimeout {
		fmt.Fprintf(c.stderr, "idem purge: --older-than (%s) must be longer than the lease, --lock-timeout (%s): keys that young may be in flight\n", *olderThan, *lockTimeout)
		return exitUsage
	}
	early := *olderThan < *retention // deletes keys that clients may still retry with
	if early && !*dryRun && (!*iKnow || strings.TrimSpace(*reason) == "") {
		fmt.Fprintf(c.stderr, "idem purge: refused: --older-than (%s) is shorter than the retention (%s, --retention): it deletes completed keys that clients may still retry with, and each such retry runs its operation again. Nothing was deleted. Pass --i-know and --reason \"why\" to purge anyway, or set --retention to the service's -retention.\n", *olderThan, *retention)
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
		if early {
			fmt.Fprintf(c.stdout, "--older-than (%s) is shorter than the retention (%s): a real run needs --i-know and --reason\n", *olderThan, *retention)
		}
		return exitOK
	}
	n, err := store.Purge(ctx, database.PurgeParams{Before: before, BatchSize: *batch, Share: *share})
	if early {
		operator, _ := c.lookupEnv("USER")
		slog.New(slog.NewTextHandler(c.stderr, nil)).Warn("idem purge: purged keys younger than the retention",
			"older_than", olderThan.String(), "retention", retention.String(), "deleted", n, "operator", operator, "reason", *reason)
	}
	if err != nil {
		fmt.Fprintf(c.stderr, "idem purge: deleted %d keys, then: %v\n", n, err)
		return exitFail
	}
	fmt.Fprintf(c.stdout, "deleted %d keys created before %s\n", n, before.UTC().Format(time.RFC3339))
	return exitOK
}
