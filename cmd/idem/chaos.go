package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"strconv"

	"github.com/idemkit/idem/cmd/internal/chaos"
)

const chaosUsage = `Usage: idem chaos [flags]

Chaos deploys the reference payments service on this machine and audits it
under faults. From this checkout it builds paymentsd and processord, starts
a throwaway PostgreSQL cluster (initdb in a temporary directory; never your
server), processord and --instances paymentsd processes, all on 127.0.0.1,
and drives --clients clients for --duration: duplicate storms across
instances, retries with idemclient's backoff until a final answer,
reuse of a key with a changed body (which must get 422), and transfers
between accounts it opens first (atomic mode; some refused 402 for
insufficient funds), while a read-only transaction samples the sum of the
balances; one new payment in 12 has an amount that processord declines.

Meanwhile, on a schedule drawn from --seed, it kills paymentsd processes
(SIGKILL, then a restart), pauses them past their lease (SIGSTOP, then
SIGCONT), stops PostgreSQL as pg_ctl stop -m immediate does and starts it
again, and cuts the connection between one instance and PostgreSQL right
after (or before) a COMMIT; and through an in-process toxiproxy on every
link of every instance (to PostgreSQL, to processord, to the webhook
receiver) it delays answers past the timeouts, resets connections
mid-stream, or lets a peer accept and never answer. With --replication,
the primary streams to a standby, and failovers stop the primary as
pg_ctl stop -m immediate does, promote the standby, move every connection
to it, and make the next standby. Then it retries every unanswered operation to a
final answer, replays every acknowledged one on each instance, and checks
the history against the database: at most one payment and one processor
charge per key, every acknowledged payment stored with the acknowledged
body, every replay byte-identical, no answer with another client's
payment, no key left started, no 5xx but the documented 503s
(store-unavailable, outcome-unknown); and of the ledger: every acknowledged
transfer stored once, every 402 moving nothing, the sum of the balances
constant and none negative at every sample and at the end (bank_total_ok);
and of each declined payment: one payment recorded declined, no charge,
and its 402 payment-declined replayed byte for byte.

A progress line goes to stderr every 5 s; the summary goes to stdout, as
one JSON object with --json. The exit status is 1 on any violation, with the
history of the offending keys written to --violations; 2 for bad flags.
It needs Linux, Go and the PostgreSQL server binaries (initdb, postgres);
with --store mysql, the MariaDB ones instead (mariadb-install-db,
mariadbd): a throwaway mariadbd in a temporary directory, on a free port,
that the run kills with SIGKILL and starts again in place of PostgreSQL's
stops, with no commit cuts (their proxy speaks PostgreSQL's protocol).

Example:

	idem chaos --duration 15m --seed 42
	idem chaos --store mysql --duration 10m
	idem chaos --queue-broker rabbitmq --queue-commands 10000 --duration 2m

Flags:
`

// runChaos is "idem chaos".
func runChaos(ctx context.Context, c *cli, args []string) int {
	fs := flag.NewFlagSet("idem chaos", flag.ContinueOnError)
	fs.SetOutput(c.stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), chaosUsage)
		fs.PrintDefaults()
	}
	env := c.env()
	var (
		duration    = fs.Duration("duration", env.Duration("IDEM_CHAOS_DURATION", chaos.DurationDefault), "`time` of traffic and faults; settling and checking come after (env IDEM_CHAOS_DURATION)")
		store       = fs.String("store", env.String("IDEM_CHAOS_STORE", chaos.StorePostgres), "`database` of paymentsd: postgres (a throwaway cluster shared by the instances), mysql (a throwaway mariadbd shared by the instances, killed with SIGKILL and restarted; no commit cuts, full disks, failovers nor proxy workload) or sqlite (one instance on its embedded file; needs --instances 1; no database restarts nor commit cuts) (env IDEM_CHAOS_STORE)")
		replication = fs.String("replication", env.String("IDEM_CHAOS_REPLICATION", ""), "`mode` of a streaming standby for the PostgreSQL primary, sync or async; failovers then stop the primary, promote the standby and move every connection to it (default: none; env IDEM_CHAOS_REPLICATION)")
		instances   = fs.Int("instances", env.Int("IDEM_CHAOS_INSTANCES", chaos.InstancesDefault), "`number` of paymentsd processes (env IDEM_CHAOS_INSTANCES)")
		clients     = fs.Int("clients", env.Int("IDEM_CHAOS_CLIENTS", chaos.ClientsDefault), "`number` of concurrent clients (env IDEM_CHAOS_CLIENTS)")
		seed        = fs.String("seed", env.String("IDEM_CHAOS_SEED", ""), "`number` that draws the faults and the traffic; the same seed replays the same schedule (default: random, printed in the summary; env IDEM_CHAOS_SEED)")
		asJSON      = fs.Bool("json", env.Bool("IDEM_CHAOS_JSON", false), "print the summary as one JSON object (env IDEM_CHAOS_JSON)")
		violations  = fs.String("violations", env.String("IDEM_CHAOS_VIOLATIONS", ""), "`file` for the history of the offending keys, one JSON object a line (default chaos-violations-SEED.jsonl; env IDEM_CHAOS_VIOLATIONS)")
		logs        = fs.String("logs", env.String("IDEM_CHAOS_LOGS", ""), "`directory` to keep the processes' logs in (default: a temporary directory, kept only after a violation; env IDEM_CHAOS_LOGS)")
		report      = fs.String("report", env.String("IDEM_CHAOS_REPORT", ""), "`file` for a self-contained HTML page of the run: attempts per second by answer with every fault marked, latency percentiles over time, the invariants and each violation's history (env IDEM_CHAOS_REPORT)")
		queued      = fs.Bool("queue", env.Bool("IDEM_CHAOS_QUEUE", false), "add transfers sent as commands to a throwaway broker (--queue-broker), which paymentsd consumes with -transfers-from through a faulty link of each instance's own; PostgreSQL only (env IDEM_CHAOS_QUEUE)")
		queueBroker = fs.String("queue-broker", env.String("IDEM_CHAOS_QUEUE_BROKER", chaos.QueueNATS), "`broker` of the queued transfers: nats (a throwaway nats-server with JetStream on a file store, killed with SIGKILL and restarted during the traffic) or rabbitmq (a throwaway RabbitMQ node, never the shared server; commands published with confirms) (env IDEM_CHAOS_QUEUE_BROKER)")
		commands    = fs.Int("queue-commands", env.Int("IDEM_CHAOS_QUEUE_COMMANDS", 0), "`number` of transfer commands to publish to the broker over --duration, every tenth twice and every twentieth also over HTTP with the same key; without --queue they are the whole traffic (env IDEM_CHAOS_QUEUE_COMMANDS)")
		source      = fs.String("source", env.String("IDEM_CHAOS_SOURCE", ""), "`directory` of the idem checkout to build paymentsd and processord from (default: the module of the working directory; env IDEM_CHAOS_SOURCE)")
	)
	if env.Err() != nil {
		fmt.Fprintf(c.stderr, "idem chaos: %v\n", env.Err())
		return exitUsage
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	if fs.NArg() > 0 || *duration <= 0 || *instances < 1 || *clients < 1 || *commands < 0 {
		fmt.Fprintln(c.stderr, "idem chaos: --duration, --instances and --clients must be positive, --queue-commands not negative, and no arguments are taken")
		return exitUsage
	}
	s := rand.Uint64() >> 1
	if *seed != "" {
		var err error
		if s, err = strconv.ParseUint(*seed, 10, 64); err != nil {
			fmt.Fprintf(c.stderr, "idem chaos: --seed %q: want a non-negative integer\n", *seed)
			return exitUsage
		}
	}
	src := *source
	if src == "" {
		var err error
		if src, err = chaos.ModuleDir("."); err != nil {
			fmt.Fprintf(c.stderr, "idem chaos: %v; or name a checkout with --source\n", err)
			return exitUsage
		}
	}
	var workloads []chaos.Weighted
	proxies := 0
	switch {
	case *queued:
		workloads = append(chaos.DefaultWorkloads(), chaos.Weighted{Workload: chaos.QueuedTransfer{}, Weight: 3})
	case *commands > 0:
		// The commands alone: no HTTP workload, so no idemproxy either.
		workloads, proxies = []chaos.Weighted{}, -1
	}
	sum, err := chaos.Run(ctx, chaos.Config{
		Duration: *duration, Store: *store, Replication: *replication, Instances: *instances, Clients: *clients, Seed: s,
		SourceDir: src, ViolationsFile: *violations, ReportFile: *report, LogDir: *logs, Progress: c.stderr,
		Workloads: workloads, Proxies: proxies, Queue: *queueBroker, QueueCommands: *commands,
	})
	if err != nil {
		fmt.Fprintf(c.stderr, "idem chaos: %v\n", err)
		return exitFail
	}
	if *asJSON {
		enc := json.NewEncoder(c.stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(sum); err != nil {
			fmt.Fprintf(c.stderr, "idem chaos: %v\n", err)
			return exitFail
		}
	} else {
		sum.WriteText(c.stdout)
	}
	if sum.Violations > 0 {
		return exitFail
	}
	return exitOK
}
