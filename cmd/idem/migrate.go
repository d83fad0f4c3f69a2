package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
)

const migrateUsage = `Usage: idem migrate --db URL [--to VERSION]

Migrate moves the key table's schema to the newest version, or up or down to
--to VERSION (0 removes the key table). Each migration runs in its own
transaction; on PostgreSQL an advisory lock makes it safe while services
start and migrate at the same time. On MySQL and MariaDB, which commit DDL
at once, a named lock (GET_LOCK) does, and each migration is idempotent.

Flags:
`

// runMigrate is "idem migrate".
func runMigrate(ctx context.Context, c *cli, args []string) int {
	fs := flag.NewFlagSet("idem migrate", flag.ContinueOnError)
	fs.SetOutput(c.stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), migrateUsage)
		fs.PrintDefaults()
	}
	env := c.env()
	db := dbFlag(fs, env, "database `URL`: postgres://..., mysql://... or sqlite:PATH (required; env DATABASE_URL)")
	to := fs.Int("to", -1, "schema `version` to move to; -1 is the newest, 0 removes the key table")
	if env.Err() != nil {
		fmt.Fprintf(c.stderr, "idem migrate: %v\n", env.Err())
		return exitUsage
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	if *db == "" || fs.NArg() > 0 || *to < -1 {
		fmt.Fprintln(c.stderr, "idem migrate: --db is required, --to is -1 or more, and no arguments are taken")
		return exitUsage
	}
	store, err := openStore(ctx, *db, slog.New(slog.DiscardHandler))
	if err != nil {
		fmt.Fprintf(c.stderr, "idem migrate: %v\n", err)
		return exitFail
	}
	defer store.Close()
	before, err := store.SchemaVersion(ctx)
	if err == nil {
		err = store.MigrateTo(ctx, *to)
	}
	var after int
	if err == nil {
		after, err = store.SchemaVersion(ctx)
	}
	if err != nil {
		fmt.Fprintf(c.stderr, "idem migrate: %v\n", err)
		return exitFail
	}
	fmt.Fprintf(c.stdout, "schema version %d -> %d\n", before, after)
	return exitOK
}
