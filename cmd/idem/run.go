package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"
)

// Exit codes shared by every subcommand.
const (
	exitOK    = 0 // success; for check: every required check passed
	exitFail  = 1 // the command ran and found a failure
	exitUsage = 2 // bad arguments, flags or environment
)

// command is one subcommand of idem.
type command struct {
	name    string
	summary string // one line for the usage listing
	run     func(ctx context.Context, c *cli, args []string) int
}

// commands returns the subcommands in the order usage lists them. To add a
// subcommand, write its file (name.go with a runName function and its own
// flag.FlagSet) and add one line here.
func commands() []command {
	return []command{
		{"check", "test a live endpoint against the Idempotency-Key contract", runCheck},
		{"bench", "measure idem on the reference payments endpoint, as ratios to the bare endpoint", runBench},
		{"migrate", "move the key table's schema to the newest version, or to a given one", runMigrate},
		{"purge", "delete keys older than the retention period", runPurge},
		{"keys", "list, show, release or delete keys: find and free stuck keys", runKeys},
		{"outbox", "show the outbox's backlog and dead events, and retry dead events", runOutbox},
		{"chaos", "run the payments service under kills, pauses and cuts, then audit every answer", runChaos},
	}
}

// cli is what a subcommand gets from the process: output streams and the
// environment, so that tests can drive everything in-process.
type cli struct {
	stdout    io.Writer
	stderr    io.Writer
	lookupEnv func(string) (string, bool)
	// now is the clock; nil means time.Now. Tests move it.
	now func() time.Time
}

// clock returns the time now.
func (c *cli) clock() time.Time {
	if c.now == nil {
		return time.Now()
	}
	return c.now()
}

// Run runs the idem command line args (without the program name), writing to
// stdout and stderr, and returns the exit code: 0 on success, 1 when the
// command found a failure, 2 for usage errors.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c := &cli{stdout: stdout, stderr: stderr, lookupEnv: os.LookupEnv}
	return c.run(ctx, args)
}

func (c *cli) run(ctx context.Context, args []string) int {
	if len(args) == 0 {
		c.usage(c.stderr)
		return exitUsage
	}
	name := args[0]
	switch name {
	case "help", "-h", "-help", "--help":
		if name == "help" && len(args) > 1 {
			return c.help(ctx, args[1])
		}
		c.usage(c.stdout)
		return exitOK
	}
	cmd, ok := lookup(name)
	if !ok {
		if strings.HasPrefix(name, "-") {
			fmt.Fprintf(c.stderr, "idem: flag %s must follow a command\n\n", name)
		} else {
			fmt.Fprintf(c.stderr, "idem: unknown command %q\n\n", name)
		}
		c.usage(c.stderr)
		return exitUsage
	}
	return cmd.run(ctx, c, args[1:])
}

// help prints a subcommand's flags to stdout.
func (c *cli) help(ctx context.Context, name string) int {
	cmd, ok := lookup(name)
	if !ok {
		fmt.Fprintf(c.stderr, "idem: unknown command %q\n\n", name)
		c.usage(c.stderr)
		return exitUsage
	}
	out := &cli{stdout: c.stdout, stderr: c.stdout, lookupEnv: c.lookupEnv, now: c.now}
	return cmd.run(ctx, out, []string{"-h"})
}

func lookup(name string) (command, bool) {
	for _, cmd := range commands() {
		if cmd.name == name {
			return cmd, true
		}
	}
	return command{}, false
}

func (c *cli) usage(w io.Writer) {
	fmt.Fprint(w, `idem is the operator tool for services that use idem, the Idempotency-Key toolkit.

Usage:

	idem <command> [flags]

Commands:

`)
	tw := tabwriter.NewWriter(w, 0, 0, 3, ' ', 0)
	for _, cmd := range commands() {
		fmt.Fprintf(tw, "\t%s\t%s\n", cmd.name, cmd.summary)
	}
	tw.Flush()
	fmt.Fprint(w, `
Run "idem help <command>" or "idem <command> -h" for a command's flags.
Most flags have an environment-variable twin, named in their help.
`)
}
