// Command idemproxy is a reverse proxy that gives any HTTP API the
// Idempotency-Key contract, with no change to its code: requests on key
// routes are claimed in a key store (embedded SQLite, PostgreSQL, Redis or
// Redis Cluster) before they are forwarded, their responses are stored,
// and retries get the stored response instead of a second forward.
//
//	IDEMPROXY_SECRET=$(openssl rand -hex 32) idemproxy \
//	    -upstream http://127.0.0.1:9000 -listen 127.0.0.1:8443 \
//	    -db sqlite:idemproxy.db -route 'POST /v1/*'
//
// Run with -h for every flag; each has an environment variable twin. See
// docs/proxy.md for deployment, identity and the outcome-unknown policies.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/cmd/internal/database"
	"github.com/idemkit/idem/cmd/internal/proxy"
	"github.com/idemkit/idem/idemprom"
	"github.com/idemkit/idem/internal/cmdrun"
)

func main() { cmdrun.Main("idemproxy", Run) }

const usage = `Usage: idemproxy -upstream URL [flags]

idemproxy forwards every request to the upstream. Requests on key routes
(default: every POST and PATCH) must carry an Idempotency-Key: the key is
claimed in the key store before the request is forwarded, the upstream's
response is stored, and a retry with the same key gets the stored response
(Idempotent-Replayed: true) instead of a second forward. Keys are scoped by
client: an HMAC of the bearer token or Basic credentials under -secret, or
the value of -client-header set by a trusted gateway.

When a forward fails after the request was sent (a timeout, a reset, or a
502/503/504 from a gateway in between), the client gets a 502 or 504 problem
outcome-unknown, and the route's policy decides what a retry
with that key gets: hold, the default (the same problem, and nothing is sent
upstream again, until an operator releases the key with "idemproxy
release"; "idemproxy held" lists such keys, "idemproxy held -h" says
more), retry (forwarded again with the same key: only for an upstream that
honours the forwarded Idempotency-Key), or probe
(named on a route only: the retry first asks the upstream's status URL,
-probe-url, and gets the operation's response if the upstream has it, is
forwarded if the upstream answers 404 with "Idempotency-Key-Status:
not-received", and gets the same problem otherwise; docs/proxy.md has the
status URL's contract).

Flags:
`

// options are the parsed flags.
type options struct {
	upstream, listen, adminAddr, db string
	routes                          []string
	clientHeader, secret            string
	dropKey, storeServerErrors      bool
	policy                          string
	probeURL                        string
	probeTimeout, upstreamTimeout   time.Duration
	maxStoredBytes                  int64
	trustForwarded                  bool
	migrate                         bool
	purgeInterval, shutdown         time.Duration
	readTimeout, writeTimeout       time.Duration
	// idem is the proxy's idempotency configuration: the flags below fill
	// its retention, lease, body limit, Prefer: wait, replay headers and
	// problem type base.
	idem idem.Config
}

// listFlag is a repeatable flag.
type listFlag struct{ values *[]string }

func (l listFlag) String() string {
	if l.values == nil {
		return ""
	}
	return strings.Join(*l.values, ", ")
}

func (l listFlag) Set(v string) error {
	*l.values = append(*l.values, v)
	return nil
}

// splitEnv splits an environment variable into its non-empty lines or
// comma-separated items.
func splitEnv(env *cmdrun.Env, name, sep string) []string {
	v, ok := env.Lookup(name)
	if !ok {
		return nil
	}
	var out []string
	for _, s := range strings.Split(v, sep) {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// breakConfig, set only in builds with the chaosbroken tag, breaks the
// routes' policies or the proxy's upstream transport on purpose, for the
// chaos harness's tests (broken.go).
var breakConfig func(*proxy.Config)

func parseFlags(args []string, stderr io.Writer, lookup func(string) (string, bool)) (*options, error) {
	fs := flag.NewFlagSet("idemproxy", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), usage)
		fs.PrintDefaults()
	}
	env := cmdrun.NewEnv(lookup)
	o := &options{}
	fs.StringVar(&o.upstream, "upstream", env.String("IDEMPROXY_UPSTREAM", ""), "base `URL` of the upstream API, http or https (required; env IDEMPROXY_UPSTREAM)")
	fs.StringVar(&o.listen, "listen", env.String("IDEMPROXY_LISTEN", "127.0.0.1:8443"), "`address` the proxy listens on, plain HTTP (env IDEMPROXY_LISTEN)")
	fs.StringVar(&o.adminAddr, "admin-addr", env.String("IDEMPROXY_ADMIN_ADDR", "127.0.0.1:9090"), "`address` of the admin listener with /metrics and /readyz; empty disables it (env IDEMPROXY_ADMIN_ADDR)")
	fs.StringVar(&o.db, "db", "sqlite:idemproxy.db", "key store: sqlite:PATH, postgres://..., mysql://..., redis://host:port/N or redis-cluster://host:port,host:port,... (seed addresses), the Redis ones with ?min_replicas=N&replica_timeout=D&prefix=P (env IDEMPROXY_DB)")
	fs.BoolVar(&o.migrate, "migrate", env.Bool("IDEMPROXY_MIGRATE", true), "apply the key store's migrations at start; safe with several instances (env IDEMPROXY_MIGRATE)")
	o.routes = splitEnv(env, "IDEMPROXY_ROUTES", "\n")
	fs.Var(listFlag{&o.routes}, "route", "key `route` 'METHOD /path [retry|hold|probe [PROBE-URL]]', a trailing * matching any rest of the path, repeatable (env IDEMPROXY_ROUTES, one per line; default: 'POST /*' and 'PATCH /*')")
	fs.StringVar(&o.clientHeader, "client-header", env.String("IDEMPROXY_CLIENT_HEADER", ""), "identify clients by this request `header`, set by a trusted gateway in front that removes it from incoming requests; default: by credentials (env IDEMPROXY_CLIENT_HEADER)")
	fs.StringVar(&o.secret, "secret", "", "`secret` of at least 16 bytes under which credentials are HMACed into client ids; prefer the environment variable, and give every instance the same one (env IDEMPROXY_SECRET)")
	fs.BoolVar(&o.dropKey, "drop-key", env.Bool("IDEMPROXY_DROP_KEY", false), "do not forward the Idempotency-Key header upstream (env IDEMPROXY_DROP_KEY)")
	fs.BoolVar(&o.storeServerErrors, "store-server-errors", env.Bool("IDEMPROXY_STORE_SERVER_ERRORS", true), "store and replay the upstream's own 5xx answers, as Stripe does; false forwards a retry again on retry and probe routes (hold routes always store them) (env IDEMPROXY_STORE_SERVER_ERRORS)")
	fs.StringVar(&o.policy, "outcome-unknown", env.String("IDEMPROXY_OUTCOME_UNKNOWN", string(proxy.PolicyHold)), "`policy` of routes without one when a forward's outcome is unknown: hold (never forwards a key twice) or retry (only for an upstream that honours the forwarded Idempotency-Key); probe is only ever named on a route (env IDEMPROXY_OUTCOME_UNKNOWN)")
	fs.StringVar(&o.probeURL, "probe-url", env.String("IDEMPROXY_PROBE_URL", ""), "status `URL` template of probe routes that name none: absolute, or a path under -upstream, with {key} where the key goes, such as /v1/requests/{key}; the upstream must keep the contract of docs/proxy.md (env IDEMPROXY_PROBE_URL)")
	fs.DurationVar(&o.probeTimeout, "probe-timeout", env.Duration("IDEMPROXY_PROBE_TIMEOUT", proxy.ProbeTimeoutDefault), "`timeout` of a probe of the status URL; -lock-timeout must exceed it plus -upstream-timeout when a route probes (env IDEMPROXY_PROBE_TIMEOUT)")
	fs.DurationVar(&o.upstreamTimeout, "upstream-timeout", env.Duration("IDEMPROXY_UPSTREAM_TIMEOUT", proxy.UpstreamTimeoutDefault), "`timeout` of a forward on a key route, to the end of the response (env IDEMPROXY_UPSTREAM_TIMEOUT)")
	fs.DurationVar(&o.idem.LockTimeout, "lock-timeout", env.Duration("IDEMPROXY_LOCK_TIMEOUT", proxy.LockTimeoutDefault), "`duration` of a key's lease before another request may take it over; longer than -upstream-timeout (env IDEMPROXY_LOCK_TIMEOUT)")
	fs.DurationVar(&o.idem.MaxPreferWait, "max-prefer-wait", env.Duration("IDEMPROXY_MAX_PREFER_WAIT", proxy.MaxPreferWaitDefault), "longest `duration` a duplicate sent with Prefer: wait=N waits for its key's first request instead of getting 409; 0 ignores Prefer: wait (env IDEMPROXY_MAX_PREFER_WAIT)")
	fs.DurationVar(&o.idem.Retention, "retention", env.Duration("IDEMPROXY_RETENTION", idem.RetentionDefault), "how long keys are kept (env IDEMPROXY_RETENTION)")
	fs.Int64Var(&o.idem.MaxBodyBytes, "max-body-bytes", int64(env.Int("IDEMPROXY_MAX_BODY_BYTES", idem.MaxBodyBytesDefault)), "largest request body on a key route, in `bytes`; larger ones get 413 (env IDEMPROXY_MAX_BODY_BYTES)")
	fs.Int64Var(&o.maxStoredBytes, "max-stored-bytes", int64(env.Int("IDEMPROXY_MAX_STORED_BYTES", proxy.MaxStoredBytesDefault)), "longest response body stored for replay, in `bytes`; responses always stream, and a retry of a longer one gets the problem idempotency-response-not-retained (env IDEMPROXY_MAX_STORED_BYTES)")
	o.idem.ReplayHeaders = splitEnv(env, "IDEMPROXY_REPLAY_HEADERS", ",")
	fs.Var(listFlag{&o.idem.ReplayHeaders}, "replay-header", "upstream response `header` stored and replayed besides Content-Type, Content-Language and Location, repeatable (env IDEMPROXY_REPLAY_HEADERS, comma-separated)")
	fs.BoolVar(&o.trustForwarded, "trust-forwarded", env.Bool("IDEMPROXY_TRUST_FORWARDED", false), "keep and append to incoming X-Forwarded-For and Forwarded headers; only behind a load balancer that sets them (env IDEMPROXY_TRUST_FORWARDED)")
	fs.StringVar(&o.idem.ProblemTypeBase, "problem-base", env.String("IDEMPROXY_PROBLEM_BASE", proxy.ProblemTypeBaseDefault), "prefix of problem type URIs; a path is served by the proxy (env IDEMPROXY_PROBLEM_BASE)")
	fs.DurationVar(&o.purgeInterval, "purge-interval", env.Duration("IDEMPROXY_PURGE_INTERVAL", 10*time.Minute), "time between runs of the purge, which deletes keys past -retention, and between an instance's tries to take the purge over: with several instances on one PostgreSQL database one at a time purges; 0 disables (env IDEMPROXY_PURGE_INTERVAL)")
	fs.DurationVar(&o.readTimeout, "read-timeout", env.Duration("IDEMPROXY_READ_TIMEOUT", 30*time.Second), "longest `duration` to read a request, headers and body; a key route's body that is not in by then gets 408 (env IDEMPROXY_READ_TIMEOUT)")
	fs.DurationVar(&o.writeTimeout, "write-timeout", env.Duration("IDEMPROXY_WRITE_TIMEOUT", 0), "longest `duration` to write a response, from the end of its request's headers; default: -lock-timeout plus -max-prefer-wait. A key route's forward bounds its own writes to well within its lease, and a client that stops reading gets no more while the answer is stored for its retry (env IDEMPROXY_WRITE_TIMEOUT)")
	fs.DurationVar(&o.shutdown, "shutdown-timeout", env.Duration("IDEMPROXY_SHUTDOWN_TIMEOUT", 30*time.Second), "how long requests in flight may finish on SIGINT/SIGTERM (env IDEMPROXY_SHUTDOWN_TIMEOUT)")
	if err := env.Err(); err != nil {
		return nil, err
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	// The database URL may hold a password and the secret is one: their
	// environment variables are read here, not as flag defaults, so that -h
	// never prints them.
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if v, ok := lookup("IDEMPROXY_DB"); ok && !set["db"] {
		o.db = v
	}
	if v, ok := lookup("IDEMPROXY_SECRET"); ok && !set["secret"] {
		o.secret = v
	}
	if o.upstream == "" {
		return nil, errors.New("-upstream is required")
	}
	return o, nil
}

// config turns the options into a proxy.Config, without the store.
func (o *options) config() (proxy.Config, error) {
	u, err := url.Parse(o.upstream)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return proxy.Config{}, fmt.Errorf("-upstream %q: want an absolute http or https URL", o.upstream)
	}
	cfg := proxy.Config{
		Upstream: u, DropKey: o.dropKey, DefaultPolicy: proxy.Policy(o.policy), ReleaseServerErrors: !o.storeServerErrors,
		UpstreamTimeout: o.upstreamTimeout, ProbeURL: o.probeURL, ProbeTimeout: o.probeTimeout,
		MaxStoredBytes: o.maxStoredBytes, TrustForwarded: o.trustForwarded, Idem: o.idem,
	}
	if o.idem.MaxPreferWait == 0 {
		cfg.Idem.MaxPreferWait = proxy.NoPreferWait // the flag's 0 is off
	}
	for _, s := range o.routes {
		rt, err := proxy.ParseRoute(s)
		if err != nil {
			return proxy.Config{}, err
		}
		cfg.Routes = append(cfg.Routes, rt)
	}
	if breakConfig != nil {
		breakConfig(&cfg)
	}
	switch {
	case o.clientHeader != "":
		cfg.Identity = proxy.HeaderIdentity(o.clientHeader)
		// A probe carries the identity as the request would.
		cfg.ProbeHeaders = []string{"Authorization", o.clientHeader}
	case o.secret == "":
		return proxy.Config{}, errors.New("-secret (or IDEMPROXY_SECRET) is required to identify clients by their credentials; or set -client-header")
	default:
		if cfg.Identity, err = proxy.CredentialIdentity([]byte(o.secret)); err != nil {
			return proxy.Config{}, errors.New("-secret must be at least 16 bytes")
		}
	}
	return cfg, nil
}

// Run runs the proxy until ctx is done, then shuts down gracefully: the
// listeners close, requests in flight finish, and the store closes.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return run(ctx, args, stdout, stderr, os.LookupEnv)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer, lookup func(string) (string, bool)) error {
	if len(args) > 0 && (args[0] == "held" || args[0] == "release") {
		return runKeys(ctx, args[0], args[1:], stdout, stderr, lookup)
	}
	o, err := parseFlags(args, stderr, lookup)
	if err != nil {
		return cmdrun.Usage(err)
	}
	cfg, err := o.config()
	if err != nil {
		return cmdrun.Usage(err)
	}
	if err := cfg.Validate(); err != nil {
		return cmdrun.Usage(err) // before the store is opened or migrated
	}
	logger := slog.New(slog.NewTextHandler(stderr, nil))
	db, err := database.Open(ctx, o.db, &database.Config{Migrate: o.migrate, Redis: true, Logger: logger})
	if err != nil {
		return err
	}
	defer db.Close()

	metrics := idemprom.New(nil)
	forwards := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "idemproxy_forwards_total",
		Help: "Forwards of requests on key routes, by route and result: answered, not_sent (the key was released) or outcome_unknown.",
	}, []string{"route", "result"})
	probes := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "idemproxy_probes_total",
		Help: "Probes of the upstream's status URL by retries of keys whose outcome is unknown, by route and result: completed (replayed), not_received (forwarded), unknown (the key stays unknown) or failed (no answer in time).",
	}, []string{"route", "result"})
	registry := prometheus.NewRegistry()
	registry.MustRegister(metrics, forwards, probes, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	cfg.Store, cfg.Idem.Logger, cfg.Idem.Metrics = db.Store(), logger, metrics
	cfg.Forwards = forwardCounter{forwards}
	cfg.Probes = probeCounter{probes}
	px, err := proxy.New(&cfg)
	if err != nil {
		return err
	}
	var purger *idem.Purger
	if o.purgeInterval > 0 && db.PurgeStore() != nil { // Redis expires keys itself
		ic := px.IdemConfig()
		ic.Purge.Interval = o.purgeInterval
		purger, err = idem.NewPurger(db.PurgeStore(), ic)
		if err != nil {
			return err
		}
	}

	ln, err := net.Listen("tcp", o.listen)
	if err != nil {
		return err
	}
	writeTimeout := o.writeTimeout
	if writeTimeout == 0 {
		writeTimeout = o.idem.LockTimeout + o.idem.MaxPreferWait
	}
	srv := &http.Server{
		Handler:           px,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       o.readTimeout,
		WriteTimeout:      writeTimeout,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	fmt.Fprintf(stdout, "idemproxy: listening on http://%s, forwarding to %s (key store %s)\n", ln.Addr(), cfg.Upstream, db.Name)

	serveCtx, stop := context.WithCancel(ctx)
	defer stop()
	adminDone := make(chan error, 1)
	if o.adminAddr != "" {
		aln, err := net.Listen("tcp", o.adminAddr)
		if err != nil {
			ln.Close()
			return err
		}
		admin := http.NewServeMux()
		admin.Handle("GET /metrics", promhttp.HandlerFor(registry, promhttp.HandlerOpts{}))
		admin.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
			pingCtx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
			defer cancel()
			if err := ping(pingCtx, db); err != nil {
				logger.Warn("idemproxy: readiness: key store unreachable", "err", err)
				http.Error(w, "key store unreachable", http.StatusServiceUnavailable)
				return
			}
			fmt.Fprintln(w, "ok")
		})
		asrv := &http.Server{Handler: admin, ReadHeaderTimeout: 10 * time.Second}
		fmt.Fprintf(stdout, "idemproxy: admin on http://%s (/metrics, /readyz)\n", aln.Addr())
		go func() { adminDone <- cmdrun.Serve(serveCtx, asrv, aln, o.shutdown) }()
	} else {
		adminDone <- nil
	}
	purgeDone := make(chan struct{})
	go func() {
		defer close(purgeDone)
		if purger != nil {
			purger.Run(serveCtx) // gives the purge lock up when serveCtx ends
		}
	}()
	err = cmdrun.Serve(serveCtx, srv, ln, o.shutdown)
	stop()
	<-purgeDone
	if aerr := <-adminDone; err == nil {
		err = aerr
	}
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, "idemproxy: stopped")
	return nil
}

// forwardCounter counts forwards in a Prometheus counter.
type forwardCounter struct{ c *prometheus.CounterVec }

func (f forwardCounter) Forward(_ context.Context, route string, result proxy.ForwardResult) {
	f.c.WithLabelValues(route, string(result)).Inc()
}

// probeCounter counts probes in a Prometheus counter.
type probeCounter struct{ c *prometheus.CounterVec }

func (p probeCounter) Probe(_ context.Context, route string, result proxy.ProbeResult) {
	p.c.WithLabelValues(route, string(result)).Inc()
}
