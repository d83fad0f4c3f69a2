package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"time"
)

const outboxUsage = `Usage: idem outbox <stats|retry-dead> --db URL [EVENT_ID ...]

Outbox shows and repairs the transactional outbox, the events that
services enqueue with their business writes and relays deliver as signed
webhooks (see docs/outbox.md).

	idem outbox stats      --db URL   pending events, the oldest one's age, dead events
	idem outbox retry-dead --db URL [EVENT_ID ...]
	                                  make dead events pending again (all of them, or
	                                  those named), once the receiver is fixed

Flags:
`

// runOutbox is "idem outbox".
func runOutbox(ctx context.Context, c *cli, args []string) int {
	if len(args) == 0 {
		fmt.Fprint(c.stderr, outboxUsage)
		return exitUsage
	}
	sub := args[0]
	switch sub {
	case "-h", "-help", "--help", "help":
		fmt.Fprint(c.stdout, outboxUsage)
		return exitOK
	case "stats", "retry-dead":
	default:
		fmt.Fprintf(c.stderr, "idem outbox: unknown command %q\n\n%s", sub, outboxUsage)
		return exitUsage
	}
	fs := flag.NewFlagSet("idem outbox "+sub, flag.ContinueOnError)
	fs.SetOutput(c.stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), outboxUsage)
		fs.PrintDefaults()
	}
	env := c.env()
	db := dbFlag(fs, env, "database `URL`: postgres://..., mysql://... or sqlite:PATH (required; env DATABASE_URL)")
	if env.Err() != nil {
		fmt.Fprintf(c.stderr, "idem outbox: %v\n", env.Err())
		return exitUsage
	}
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	if *db == "" || (sub == "stats" && fs.NArg() > 0) {
		fmt.Fprintf(c.stderr, "idem outbox %s: --db is required; only retry-dead takes event ids\n", sub)
		return exitUsage
	}
	store, err := openStore(ctx, *db, slog.New(slog.DiscardHandler))
	if err != nil {
		fmt.Fprintf(c.stderr, "idem outbox: %v\n", err)
		return exitFail
	}
	defer store.Close()
	outbox := store.Outbox()
	now := c.clock()
	if sub == "retry-dead" {
		n, err := outbox.RetryDead(ctx, now, fs.Args()...)
		if err != nil {
			fmt.Fprintf(c.stderr, "idem outbox retry-dead: %v\n", err)
			return exitFail
		}
		fmt.Fprintf(c.stdout, "%d dead events are pending again\n", n)
		return exitOK
	}
	st, err := outbox.OutboxStats(ctx)
	if err != nil {
		fmt.Fprintf(c.stderr, "idem outbox stats: %v\n", err)
		return exitFail
	}
	oldest := "-"
	if !st.OldestPending.IsZero() {
		oldest = max(now.Sub(st.OldestPending), 0).Round(time.Second).String()
	}
	fmt.Fprintf(c.stdout, "pending %d\noldest_pending_age %s\ndead %d\n", st.Pending, oldest, st.Dead)
	return exitOK
}
