package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/cmd/internal/database"
	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/internal/keyspec"
)

const keysUsage = `Usage: idem keys <list|show|release|delete> [flags] [CLIENT KEY]

Keys lets an operator find and free idempotency keys: a key left "started"
by a request whose process died blocks its client's retries with 409 until
its lease expires, and on a service whose lease is long that is a stuck key.

	idem keys list    [--client C] [--state started|completed] [--older-than D] [--limit N]
	idem keys show    CLIENT KEY [--with-body]
	idem keys release CLIENT KEY [--force] [--reason TEXT]
	idem keys delete  CLIENT KEY --i-know --reason TEXT

list and show never print response bodies unless --with-body. release frees
a started key so that the client's next retry runs; it refuses a completed
key, and a key whose lease is live unless --force. delete removes a
completed key, so that its next request runs again: it needs --i-know and a
--reason, which is logged. Every command takes --db (env DATABASE_URL) and
--json. Run "idem keys <command> -h" for its flags.

A lease is live until the expiry its store recorded when its holder claimed
the key (the service's lock timeout then). --lock-timeout serves only for
leases without one, taken by a service built before the store recorded it.
`

// keysCommands are the subcommands of "idem keys".
var keysCommands = map[string]func(ctx context.Context, c *cli, args []string) int{
	"list": runKeysList, "show": runKeysShow, "release": runKeysRelease, "delete": runKeysDelete,
}

// runKeys is "idem keys".
func runKeys(ctx context.Context, c *cli, args []string) int {
	if len(args) == 0 {
		fmt.Fprint(c.stderr, keysUsage)
		return exitUsage
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		fmt.Fprint(c.stdout, keysUsage)
		return exitOK
	}
	run, ok := keysCommands[args[0]]
	if !ok {
		fmt.Fprintf(c.stderr, "idem keys: unknown command %q\n\n%s", args[0], keysUsage)
		return exitUsage
	}
	return run(ctx, c, args[1:])
}

// keysFlags are the flags every keys command has.
type keysFlags struct {
	fs          *flag.FlagSet
	name        string
	db          *string
	json        *bool
	lockTimeout *time.Duration
	envErr      error // a twin variable that does not parse
}

func (c *cli) keysFlagSet(name, usage string) *keysFlags {
	fs := flag.NewFlagSet("idem keys "+name, flag.ContinueOnError)
	fs.SetOutput(c.stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), usage)
		fs.PrintDefaults()
	}
	env := c.env()
	k := &keysFlags{fs: fs, name: name}
	k.db = fs.String("db", env.String("DATABASE_URL", ""), "database `URL`: postgres://..., mysql://..., sqlite:PATH, or idemproxy's redis://host:port/N or redis-cluster://host:port,... (required; env DATABASE_URL)")
	k.json = fs.Bool("json", false, "print JSON, for scripts")
	k.lockTimeout = fs.Duration("lock-timeout", env.Duration("IDEM_LOCK_TIMEOUT", idem.LockTimeoutDefault), "the service's two-phase lease length (its -lock-timeout), for a lease whose store recorded no expiry (taken by an older build): such a lease younger than this is live (env IDEM_LOCK_TIMEOUT)")
	k.envErr = env.Err()
	return k
}

// parse parses flags and positional arguments in any order, and checks
// that there are want positional arguments. It returns the exit code to
// stop with, or -1 to go on.
func (k *keysFlags) parse(c *cli, args []string, want int) ([]string, int) {
	if k.envErr != nil {
		fmt.Fprintf(c.stderr, "idem keys %s: %v\n", k.name, k.envErr)
		return nil, exitUsage
	}
	var pos []string
	for {
		if err := k.fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, exitOK
			}
			return nil, exitUsage
		}
		args = k.fs.Args()
		if len(args) == 0 {
			break
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
	switch {
	case *k.db == "":
		fmt.Fprintf(c.stderr, "idem keys %s: --db is required (or DATABASE_URL)\n", k.name)
		return nil, exitUsage
	case len(pos) != want && want == 0:
		fmt.Fprintf(c.stderr, "idem keys %s: takes no arguments, got %q\n", k.name, pos)
		return nil, exitUsage
	case len(pos) != want:
		fmt.Fprintf(c.stderr, "idem keys %s: want CLIENT KEY, got %d arguments\n", k.name, len(pos))
		return nil, exitUsage
	case *k.lockTimeout <= 0:
		fmt.Fprintf(c.stderr, "idem keys %s: --lock-timeout must be positive\n", k.name)
		return nil, exitUsage
	}
	return pos, -1
}

// open opens the database and returns its key admin.
func (k *keysFlags) open(ctx context.Context, c *cli) (*database.DB, idemstore.KeyAdmin, int) {
	// Redis too: idemproxy's keys may live there (idemredis scans every
	// primary to list them).
	db, err := database.Open(ctx, *k.db, &database.Config{Redis: true, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		fmt.Fprintf(c.stderr, "idem keys %s: %v\n", k.name, err)
		return nil, nil, exitFail
	}
	switch {
	case db.SQLite != nil:
		return db, db.SQLite, -1
	case db.Redis != nil:
		return db, db.Redis, -1
	case db.MySQL != nil:
		return db, db.MySQL, -1
	}
	return db, db.Postgres, -1
}

const keysListUsage = `Usage: idem keys list --db URL [--client C] [--state started|completed] [--older-than D] [--limit N] [--json]

List prints keys, oldest first: client, key, state, age, lease expiry and
token, and the stored response's status. It never prints response bodies.
A started key whose lease has expired ("expired" in LEASE) is stuck: its
holder died. See "idem keys release".

Flags:
`

func runKeysList(ctx context.Context, c *cli, args []string) int {
	k := c.keysFlagSet("list", keysListUsage)
	client := k.fs.String("client", "", "list only this client's keys")
	state := k.fs.String("state", "", "list only keys in this state: started or completed")
	olderThan := k.fs.Duration("older-than", 0, "list only keys created more than this `duration` ago")
	limit := k.fs.Int("limit", idemstore.ListKeysLimitDefault, "list at most this many keys")
	if _, code := k.parse(c, args, 0); code >= 0 {
		return code
	}
	if *state != "" && *state != string(idemstore.StatusInFlight) && *state != string(idemstore.StatusCompleted) {
		fmt.Fprintf(c.stderr, "idem keys list: --state %q: want started or completed\n", *state)
		return exitUsage
	}
	if *olderThan < 0 || *limit <= 0 {
		fmt.Fprintln(c.stderr, "idem keys list: --older-than must not be negative and --limit must be positive")
		return exitUsage
	}
	db, admin, code := k.open(ctx, c)
	if code >= 0 {
		return code
	}
	defer db.Close()
	now := c.clock()
	p := idemstore.ListKeysParams{ClientID: *client, Status: idemstore.Status(*state), Limit: *limit}
	if *olderThan > 0 {
		p.CreatedBefore = now.Add(-*olderThan)
	}
	recs, err := admin.ListKeys(ctx, p)
	if err != nil {
		fmt.Fprintf(c.stderr, "idem keys list: %v\n", err)
		return exitFail
	}
	views := make([]keyView, len(recs))
	for i, rec := range recs {
		views[i] = viewOf(rec, now, *k.lockTimeout, false)
	}
	if *k.json {
		return c.printJSON(views)
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "CLIENT\tKEY\tSTATE\tAGE\tLEASE\tTOKEN\tSTATUS\tREQUEST")
	for _, v := range views {
		status := "-"
		if v.ResponseStatus != 0 {
			status = strconv.Itoa(v.ResponseStatus)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s %s\n", printable(v.Client), printable(v.Key), v.State,
			roundDuration(time.Duration(v.AgeSeconds*float64(time.Second))), v.leaseText(now), v.Token, status, v.Method, v.Path)
	}
	tw.Flush()
	fmt.Fprintf(c.stdout, "%d %s\n", len(views), plural(len(views), "key", "keys"))
	return exitOK
}

const keysShowUsage = `Usage: idem keys show --db URL CLIENT KEY [--with-body] [--json]

Show prints everything stored for one key: the first request (method, path,
fingerprint), its state, lease and fencing token, and the stored response's
status and headers. The response body only with --with-body.

Flags:
`

func runKeysShow(ctx context.Context, c *cli, args []string) int {
	k := c.keysFlagSet("show", keysShowUsage)
	withBody := k.fs.Bool("with-body", false, "print the stored response body too (it may hold personal data)")
	pos, code := k.parse(c, args, 2)
	if code >= 0 {
		return code
	}
	db, admin, code := k.open(ctx, c)
	if code >= 0 {
		return code
	}
	defer db.Close()
	now := c.clock()
	rec, err := admin.GetKey(ctx, idemstore.Scope{ClientID: pos[0], Key: pos[1]})
	if err != nil {
		fmt.Fprintf(c.stderr, "idem keys show: %v\n", err)
		return exitFail
	}
	v := viewOf(rec, now, *k.lockTimeout, *withBody)
	if *k.json {
		return c.printJSON(v)
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0)
	row := func(name, value string) { fmt.Fprintf(tw, "%s\t%s\n", name, value) }
	row("client", printable(v.Client))
	row("key", printable(v.Key))
	row("key digest", v.KeyDigest+" (as in the service's logs)")
	row("state", v.State)
	row("request", v.Method+" "+v.Path)
	row("request hash", v.RequestHash)
	row("created", fmt.Sprintf("%s (%s ago)", v.Created.Format(time.RFC3339Nano), roundDuration(now.Sub(v.Created))))
	row("lease", v.leaseText(now)+v.leaseSource(*k.lockTimeout))
	row("token", strconv.FormatInt(v.Token, 10))
	if v.State == string(idemstore.StatusCompleted) {
		row("response status", strconv.Itoa(v.ResponseStatus))
		for name, values := range v.ResponseHeaders {
			for _, value := range values {
				row("response header", name+": "+value)
			}
		}
		switch {
		case v.ResponseBody != nil:
			row("response body", *v.ResponseBody)
		case v.ResponseBodyBase64 != "":
			row("response body (base64)", v.ResponseBodyBase64)
		default:
			row("response body", "(not shown; --with-body)")
		}
	}
	tw.Flush()
	return exitOK
}

const keysReleaseUsage = `Usage: idem keys release --db URL CLIENT KEY [--force] [--reason TEXT] [--json]

Release frees a started key so that the client's next retry with it, and
the same request, runs the operation. The key keeps its first request: a
different request with it still gets 422. The fencing token grows, so the
first holder, should it still be running, can no longer store its response.

It refuses a completed key: that would let the operation run a second time
(see "idem keys delete"). It refuses a key whose lease is live, unless
--force: its holder may still be running. Before releasing, make sure the
first request's work did not happen, or cannot happen twice.

Flags:
`

// releaseChecklist is what an operator checks before freeing a key.
func releaseChecklist(client, key string) string {
	return fmt.Sprintf(`Before the client retries, check whether the first request's work happened:
  - the service's logs for key_digest=%s (client %s): how far did the request get,
    and does a request line say outcome=executed?
  - the business records written under this key (in paymentsd: a payment with this
    idempotency_key for this client), and the other systems it calls (a charge at the
    processor under the key derived from this one);
  - that no process still runs the request (its lease has expired, or it was stopped).
If the work happened, do not release: the retry would run it again, except for calls
that other systems deduplicate by the derived key.
`, keyspec.Digest(key), client)
}

func runKeysRelease(ctx context.Context, c *cli, args []string) int {
	k := c.keysFlagSet("release", keysReleaseUsage)
	force := k.fs.Bool("force", false, "release even if the lease is live: its holder's response will be refused and its writes in this database rolled back, but what it did elsewhere stands")
	reason := k.fs.String("reason", "", "why, for the log")
	pos, code := k.parse(c, args, 2)
	if code >= 0 {
		return code
	}
	db, admin, code := k.open(ctx, c)
	if code >= 0 {
		return code
	}
	defer db.Close()
	scope := idemstore.Scope{ClientID: pos[0], Key: pos[1]}
	now := c.clock()
	before, err := admin.ReleaseKey(ctx, idemstore.ReleaseKeyParams{Scope: scope, Now: now, LockTimeout: *k.lockTimeout, Force: *force})
	var live *idemstore.LeaseLiveError
	switch {
	case errors.As(err, &live):
		fmt.Fprintf(c.stderr, "idem keys release: refused: the lease is live until %s (in %s): its holder may still be running.\n%sWait for the lease to expire, or pass --force once you are sure.\n",
			live.Expires.UTC().Format(time.RFC3339), roundDuration(live.Expires.Sub(now)), releaseChecklist(scope.ClientID, scope.Key))
		return exitFail
	case errors.Is(err, idemstore.ErrKeyCompleted):
		fmt.Fprintln(c.stderr, "idem keys release: refused: the key is completed, and releasing it would let the operation run a second time. Its response is replayed to every retry. To remove it anyway, use \"idem keys delete --i-know --reason ...\".")
		return exitFail
	case err != nil:
		fmt.Fprintf(c.stderr, "idem keys release: %v\n", err)
		return exitFail
	}
	c.audit("released", scope, before, *reason, *force)
	v := viewOf(before, now, *k.lockTimeout, false)
	if *k.json {
		return c.printJSON(map[string]any{"released": v})
	}
	fmt.Fprintf(c.stdout, "released %s %s (token %d, created %s ago): the next request with this key and the same body runs the operation.\n",
		printable(scope.ClientID), printable(scope.Key), before.Token, roundDuration(now.Sub(before.CreatedAt)))
	fmt.Fprint(c.stdout, releaseChecklist(scope.ClientID, scope.Key))
	return exitOK
}

const keysDeleteUsage = `Usage: idem keys delete --db URL CLIENT KEY --i-know --reason TEXT [--json]

Delete removes a completed key. Its stored response is gone: the next
request with the key runs the operation again, as a new one, which may do
it twice. Use it for a key whose stored response is wrong and whose client
must be able to repeat the operation. The reason is logged. Started keys
are refused: release them.

Flags:
`

func runKeysDelete(ctx context.Context, c *cli, args []string) int {
	k := c.keysFlagSet("delete", keysDeleteUsage)
	iKnow := k.fs.Bool("i-know", false, "confirm that the operation may run again for this key")
	reason := k.fs.String("reason", "", "why, for the log (required)")
	pos, code := k.parse(c, args, 2)
	if code >= 0 {
		return code
	}
	if !*iKnow || strings.TrimSpace(*reason) == "" {
		fmt.Fprintln(c.stderr, "idem keys delete: deleting a completed key lets its operation run a second time; pass --i-know and --reason \"why\"")
		return exitUsage
	}
	db, admin, code := k.open(ctx, c)
	if code >= 0 {
		return code
	}
	defer db.Close()
	scope := idemstore.Scope{ClientID: pos[0], Key: pos[1]}
	before, err := admin.DeleteKey(ctx, scope)
	switch {
	case errors.Is(err, idemstore.ErrKeyInFlight):
		fmt.Fprintln(c.stderr, "idem keys delete: refused: the key is started, not completed; use \"idem keys release\", which keeps its fencing token")
		return exitFail
	case err != nil:
		fmt.Fprintf(c.stderr, "idem keys delete: %v\n", err)
		return exitFail
	}
	c.audit("deleted", scope, before, *reason, false)
	v := viewOf(before, c.clock(), *k.lockTimeout, false)
	if *k.json {
		return c.printJSON(map[string]any{"deleted": v})
	}
	fmt.Fprintf(c.stdout, "deleted %s %s (completed with status %d): the next request with this key runs the operation again.\n",
		printable(scope.ClientID), printable(scope.Key), before.Response.StatusCode)
	return exitOK
}

// audit logs an operator's change of a key to stderr, with the key's
// digest, never the key.
func (c *cli) audit(action string, scope idemstore.Scope, before *idemstore.Record, reason string, force bool) {
	operator, _ := c.lookupEnv("USER")
	attrs := []any{"action", action, "client_id", scope.ClientID, "key_digest", keyspec.Digest(scope.Key),
		"state", string(before.Status), "token", before.Token, "operator", operator, "reason", reason}
	if force {
		attrs = append(attrs, "force", true)
	}
	slog.New(slog.NewTextHandler(c.stderr, nil)).Warn("idem keys: "+action+" a key", attrs...)
}

func (c *cli) printJSON(v any) int {
	enc := json.NewEncoder(c.stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		fmt.Fprintf(c.stderr, "idem keys: %v\n", err)
		return exitFail
	}
	return exitOK
}

// printable quotes a client or key that a person could misread: empty, or
// with spaces or quotes.
func printable(s string) string {
	if s == "" || strings.ContainsAny(s, " \t\"'\\") {
		return strconv.Quote(s)
	}
	return s
}

func roundDuration(d time.Duration) string {
	switch {
	case d >= time.Hour:
		return d.Round(time.Minute).String()
	case d >= time.Second:
		return d.Round(time.Second).String()
	}
	return d.Round(time.Millisecond).String()
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
