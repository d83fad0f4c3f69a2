// Command paymentsd is idem's reference payments service: POST /v1/payments
// behind the Idempotency-Key contract, on embedded SQLite by default or on
// PostgreSQL.
//
//	go run ./cmd/paymentsd                 # 127.0.0.1:8080, sqlite:paymentsd.db
//	go run ./cmd/paymentsd -db postgres://postgres@127.0.0.1:5432/test
//	go run ./cmd/paymentsd -processor http://127.0.0.1:8081
//
// Every payment runs by phases (two-phase mode): a pending payment, the
// charge at the card processor with a key derived from the client's, the
// outcome. The processor is processord at -processor, or, without it, an
// in-process simulated one that declines amounts ending in 02. A
// resumer finishes payments whose client went away.
//
// GET /healthz is liveness, GET /readyz readiness (the key store answers
// and its schema is current), and GET /v1/idempotency-keys/{key} tells a
// client what became of one of its keys. Every request is logged in one
// line (-log-format text or json) with its X-Request-Id.
//
// Prometheus metrics are served at GET /metrics on a separate admin
// listener, -admin-addr (127.0.0.1:8082 by default; "off" disables it).
// Run with -h for every flag; each has an environment variable twin.
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
	"github.com/idemkit/idem/cmd/internal/payments"
	"github.com/idemkit/idem/cmd/internal/processor"
	"github.com/idemkit/idem/idemlog"
	"github.com/idemkit/idem/idemoutbox"
	"github.com/idemkit/idem/idemprom"
	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/internal/bearer"
	"github.com/idemkit/idem/internal/cmdrun"
)

func main() { cmdrun.Main("paymentsd", Run) }

// breakStore, set only in builds with the chaosbroken tag, breaks the key
// store, the payments repository and the ledger on purpose, for the chaos
// harness's tests (see cmd/internal/brokenstore).
var breakStore func(*database.DB, idemstore.Store, payments.Repo, payments.LedgerRepo) (idemstore.Store, payments.Repo, payments.LedgerRepo, error)

// clockNow, set only in builds with the chaosclock tag, is idem's clock
// (see chaosclock.go); nil is time.Now.
var clockNow func() time.Time

// beforePhase, set only in builds with the crashpoint tag, runs as each
// phase of a payment starts, so that the crash tests can kill paymentsd
// between two phases (see crashpoint.go).
var beforePhase func(ctx context.Context, point string)

// devTokens are used when no tokens are configured, with a warning that
// names the clients, never the tokens (README lists them).
const devTokens = "sk_test_alice=alice,sk_test_bob=bob"

// adminAddrDefault is the admin listener's address: loopback, so that
// /metrics is not served to the network unless asked to be.
const adminAddrDefault = "127.0.0.1:8082"

// options are the parsed flags.
type options struct {
	addr    string
	admin   string
	db      string
	tokens  string
	migrate bool
	// transactionPooling: PostgreSQL is reached through a pooler in
	// transaction mode.
	transactionPooling bool
	// noAdvisoryLocks: idempg without advisory locks
	// (idempg.Config.NoAdvisoryLocks), for databases that lack them.
	noAdvisoryLocks bool
	// idem is the service's one idempotency configuration: the flags
	// below fill its retention, lease, purge and resumer settings.
	idem           idem.Config
	purge          bool
	shutdown       time.Duration
	processor      string
	processorToken string

	// Operations.
	logFormat string
	otel      string // the OTLP/HTTP collector; "" traces nothing
	// Webhook delivery of the outbox's events.
	webhookURL     string
	webhookSecret  string
	webhookTimeout time.Duration
	webhookRetry   time.Duration
	webhookTries   int
	// Queues: transfer commands in, events out (see queue.go).
	transfersFrom string
	eventsTo      string
	// Webhooks received from the processor (processord -webhook-url).
	processorWebhookSecrets string

	// grpcAddr is the gRPC listener's address; "" serves no gRPC.
	grpcAddr string
}

func parseFlags(args []string, stderr io.Writer) (*options, error) {
	fs := flag.NewFlagSet("paymentsd", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := &options{}
	env := cmdrun.NewEnv(os.LookupEnv)
	fs.StringVar(&o.addr, "addr", env.String("PAYMENTSD_ADDR", "127.0.0.1:8080"), "listen address (env PAYMENTSD_ADDR)")
	fs.StringVar(&o.grpcAddr, "grpc-addr", env.String("PAYMENTSD_GRPC_ADDR", ""), "gRPC listen address of payments.v1.PaymentService, with the HTTP API's tokens, store and processor; empty serves no gRPC. Connect clients use the HTTP address (env PAYMENTSD_GRPC_ADDR)")
	fs.StringVar(&o.admin, "admin-addr", env.String("PAYMENTSD_ADMIN_ADDR", adminAddrDefault), "admin listen address, serving GET /metrics without authentication; keep it off the public network. \"\" or \"off\" disables it (env PAYMENTSD_ADMIN_ADDR)")
	o.db = env.String("DATABASE_URL", "sqlite:paymentsd.db")
	fs.Var((*cmdrun.Redacted)(&o.db), "db", "database `URL`: sqlite:PATH, postgres://... or mysql://... (env DATABASE_URL)")
	fs.StringVar(&o.tokens, "tokens", "", "bearer tokens as token=client,token=client (env PAYMENTSD_TOKENS; default: the development tokens of clients alice and bob, with a warning)")
	fs.BoolVar(&o.migrate, "migrate", env.Bool("PAYMENTSD_MIGRATE", true), "apply database migrations at start; safe with several instances (env PAYMENTSD_MIGRATE)")
	fs.BoolVar(&o.transactionPooling, "transaction-pooling", env.Bool("PAYMENTSD_TRANSACTION_POOLING", false), "PostgreSQL is reached through a pooler in transaction mode, such as PgBouncer's pool_mode=transaction (env PAYMENTSD_TRANSACTION_POOLING)")
	fs.BoolVar(&o.noAdvisoryLocks, "no-advisory-locks", env.Bool("PAYMENTSD_NO_ADVISORY_LOCKS", false), "take no PostgreSQL advisory lock: claims by key rows, the purge and resumer leaders by lease rows, migrations and tables made under a table lock; for databases without advisory locks, see docs/scale-out.md (env PAYMENTSD_NO_ADVISORY_LOCKS)")
	fs.DurationVar(&o.idem.Retention, "retention", env.Duration("PAYMENTSD_RETENTION", idem.RetentionDefault), "how long keys are kept (env PAYMENTSD_RETENTION)")
	fs.DurationVar(&o.idem.LockTimeout, "lock-timeout", env.Duration("PAYMENTSD_LOCK_TIMEOUT", idem.LockTimeoutDefault), "two-phase lease length before takeover (env PAYMENTSD_LOCK_TIMEOUT)")
	fs.DurationVar(&o.shutdown, "shutdown-timeout", env.Duration("PAYMENTSD_SHUTDOWN_TIMEOUT", 30*time.Second), "how long in-flight requests may finish on SIGINT/SIGTERM (env PAYMENTSD_SHUTDOWN_TIMEOUT)")
	fs.StringVar(&o.processor, "processor", env.String("PAYMENTSD_PROCESSOR", ""), "base URL of the card processor (processord) that payments charge; empty charges an in-process simulated processor, which declines amounts ending in 02 (env PAYMENTSD_PROCESSOR)")
	fs.DurationVar(&o.idem.Resume.Interval, "resumer-interval", env.Duration("PAYMENTSD_RESUMER_INTERVAL", idem.ResumeIntervalDefault), "how often the resumer finishes payments whose client went away; 0 disables (env PAYMENTSD_RESUMER_INTERVAL)")
	fs.StringVar(&o.processorToken, "processor-token", "", "bearer token sent to the card processor (env PAYMENTSD_PROCESSOR_TOKEN; default: processord's development token, with a warning)")
	// Operations.
	fs.StringVar(&o.logFormat, "log-format", env.String("PAYMENTSD_LOG_FORMAT", "text"), "log format: text or json; every request is logged in one line with its request id (env PAYMENTSD_LOG_FORMAT)")
	// Webhooks: events are enqueued with every payment; these deliver them.
	o.webhookURL = env.String("PAYMENTSD_WEBHOOK_URL", "")
	fs.Var((*cmdrun.Redacted)(&o.webhookURL), "webhook-url", "`URL` that receives every event as a signed Standard Webhooks POST; empty delivers nothing, events are still listed at GET /v1/events (env PAYMENTSD_WEBHOOK_URL)")
	fs.StringVar(&o.webhookSecret, "webhook-secret", "", "secret that signs webhooks, whsec_ followed by the base64 of 24 to 64 bytes; required with -webhook-url (env PAYMENTSD_WEBHOOK_SECRET)")
	fs.DurationVar(&o.webhookTimeout, "webhook-timeout", env.Duration("PAYMENTSD_WEBHOOK_TIMEOUT", idemoutbox.WebhookTimeoutDefault), "time limit of one webhook delivery attempt (env PAYMENTSD_WEBHOOK_TIMEOUT)")
	fs.DurationVar(&o.webhookRetry, "webhook-retry", env.Duration("PAYMENTSD_WEBHOOK_RETRY", idemoutbox.BackoffBase), "wait before the first retry of a failed webhook, doubling per attempt up to 1h, jittered (env PAYMENTSD_WEBHOOK_RETRY)")
	fs.IntVar(&o.webhookTries, "webhook-max-attempts", env.Int("PAYMENTSD_WEBHOOK_MAX_ATTEMPTS", idemoutbox.MaxAttemptsDefault), "delivery attempts before an event is parked as dead (env PAYMENTSD_WEBHOOK_MAX_ATTEMPTS)")
	fs.StringVar(&o.processorWebhookSecrets, "processor-webhook-secret", "", "secrets, comma-separated during a rotation, that verify the processor's webhooks (processord -webhook-secret); set, POST "+payments.ProcessorEventsPath+" receives them, on SQLite or PostgreSQL (env PAYMENTSD_PROCESSOR_WEBHOOK_SECRET)")
	// The purge service.
	purgeFlags(fs, env, o)
	otelFlags(fs, env, o)
	// Queues.
	queueFlags(fs, env, o)
	if err := env.Err(); err != nil {
		return nil, err
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	// Secrets are read from the environment after parsing, so that -h
	// never prints them as defaults.
	if o.tokens == "" {
		o.tokens = env.String("PAYMENTSD_TOKENS", "")
	}
	if o.processorToken == "" {
		o.processorToken = env.String("PAYMENTSD_PROCESSOR_TOKEN", "")
	}
	if o.webhookSecret == "" {
		o.webhookSecret = env.String("PAYMENTSD_WEBHOOK_SECRET", "")
	}
	if o.processorWebhookSecrets == "" {
		o.processorWebhookSecrets = env.String("PAYMENTSD_PROCESSOR_WEBHOOK_SECRET", "")
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	return o, nil
}

// Run runs the service until ctx is done, then shuts down gracefully: the
// listener closes, in-flight requests finish (their transactions commit or
// roll back whole), and the database closes.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseFlags(args, stderr)
	if err != nil {
		return cmdrun.Usage(err)
	}
	logger, err := newLogger(o.logFormat, stderr)
	if err != nil {
		return err
	}
	if o.tokens == "" {
		o.tokens = devTokens
	}
	tokens, err := bearer.Parse(o.tokens)
	if err != nil {
		return fmt.Errorf("-tokens: %w", err)
	}
	if o.tokens == devTokens {
		logger.Warn("paymentsd: no tokens configured; accepting the development tokens (see README), never do this in production", "clients", strings.Join(tokens.Clients(), ","))
	}
	if _, set := os.LookupEnv("PAYMENTSD_MODE"); set {
		logger.Warn("paymentsd: PAYMENTSD_MODE is no longer read; payments always run by phases in two-phase mode")
	}

	db, err := database.Open(ctx, o.db, &database.Config{
		Migrate: o.migrate, TransactionPooling: o.transactionPooling, NoAdvisoryLocks: o.noAdvisoryLocks, Logger: logger,
	})
	if err != nil {
		return err
	}
	defer db.Close()
	repo, err := payments.NewRepo(ctx, db)
	if err != nil {
		return err
	}
	ledger, err := payments.NewLedgerRepo(ctx, db)
	if err != nil {
		return err
	}
	store := db.Store()
	if breakStore != nil {
		if store, repo, ledger, err = breakStore(db, store, repo, ledger); err != nil {
			return err
		}
	}

	var proc payments.Processor
	if o.processor != "" {
		if o.processorToken == "" {
			logger.Warn("paymentsd: no processor token configured; sending processord's development token, never do this in production")
			o.processorToken = processor.DevToken
		}
		if proc, err = payments.NewProcessorClient(o.processor, o.processorToken, nil); err != nil {
			return err
		}
	} else {
		logger.Info("paymentsd: no -processor; charging an in-process simulated processor")
		proc = payments.NewSimulatedProcessor()
	}
	metrics := idemprom.New(nil)
	outboxMetrics := idemprom.NewOutbox(nil)
	consumerMetrics := idemprom.NewConsumer(nil)
	registry := prometheus.NewRegistry()
	registry.MustRegister(metrics, outboxMetrics, consumerMetrics, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	relay, err := newRelay(o, db, outboxMetrics, logger)
	if err != nil {
		return err
	}
	var eventsTo string
	if o.eventsTo != "" {
		if relay != nil {
			return cmdrun.Usage(errors.New("-events-to and -webhook-url exclude each other: events go to one place"))
		}
		pub, shown, closePub, err := newEventsPublisher(ctx, o.eventsTo)
		if err != nil {
			return err
		}
		defer closePub()
		if relay, err = idemoutbox.NewRelay(db.Outbox(), pub, &idemoutbox.RelayConfig{Logger: logger, Metrics: outboxMetrics}); err != nil {
			return err
		}
		eventsTo = shown
	}
	ic := o.idem
	ic.Logger, ic.Metrics, ic.Now = logger, metrics, clockNow
	if o.otel != "" {
		tracer, stopTracing, err := startTracing(ctx, o.otel, logger)
		if err != nil {
			return err
		}
		defer stopTracing() // after the service, the resumer and the purge stopped
		ic.Tracer = tracer
	}
	events, err := processorEvents(ctx, o, db, ic, logger)
	if err != nil {
		return err
	}
	svc, err := payments.NewService(payments.Config{
		Repo: repo, Store: store, Tokens: tokens, Processor: proc, Logger: logger, Outbox: db.Outbox(), Ledger: ledger, BeforePhase: beforePhase,
		Idem: ic, ProcessorEvents: events,
	})
	if err != nil {
		return err
	}
	rpc, err := svc.RPC()
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", o.addr)
	if err != nil {
		return err
	}
	srv := &http.Server{
		Handler:           idemlog.New(&idemlog.Config{Logger: logger})(traced(o.otel != "", withConnect(svc.Handler(), rpc))),
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	var adminLn net.Listener
	if o.admin != "" && o.admin != "off" {
		if adminLn, err = net.Listen("tcp", o.admin); err != nil {
			ln.Close()
			return fmt.Errorf("admin listener: %w", err)
		}
	}
	grpcLn, err := listenGRPC(o.grpcAddr)
	if err != nil {
		ln.Close()
		if adminLn != nil {
			adminLn.Close()
		}
		return err
	}
	fmt.Fprintf(stdout, "paymentsd: listening on http://%s (database %s, processor %s)\n", ln.Addr(), db.Name, processorName(o.processor))
	if grpcLn != nil {
		fmt.Fprintf(stdout, "paymentsd: gRPC (payments.v1.PaymentService) on %s\n", grpcLn.Addr())
	}
	if adminLn != nil {
		fmt.Fprintf(stdout, "paymentsd: admin endpoint (GET /metrics) at http://%s\n", adminLn.Addr())
	}

	stopPurge, err := startPurge(ctx, o.purge, db, svc.IdemConfig(), logger)
	if err != nil {
		ln.Close()
		if adminLn != nil {
			adminLn.Close()
		}
		if grpcLn != nil {
			grpcLn.Close()
		}
		return err
	}
	relayCtx, stopRelay := context.WithCancel(ctx)
	relayDone := make(chan struct{})
	if relay == nil {
		close(relayDone)
	} else {
		// Only the host: the URL's path or query may carry a credential.
		u, _ := url.Parse(o.webhookURL)
		if eventsTo != "" {
			fmt.Fprintf(stdout, "paymentsd: publishing events to %s\n", eventsTo)
		} else {
			fmt.Fprintf(stdout, "paymentsd: delivering events to %s://%s\n", u.Scheme, u.Host)
		}
		go func() {
			defer close(relayDone)
			relay.Run(relayCtx)
		}()
	}
	// The relay stops when ctx ends; a batch under way is delivered again
	// by the next instance (at least once). Run waits for it before the
	// database closes.
	defer func() { stopRelay(); <-relayDone; stopPurge() }()
	if rs, ok := db.Store().(idemstore.RecoveryStore); ok && o.idem.Resume.Interval > 0 {
		resumer, err := idem.NewResumer(rs, svc.IdemConfig())
		if err != nil {
			return err
		}
		resumerCtx, stopResumer := context.WithCancel(ctx)
		resumerDone := make(chan struct{})
		go func() {
			defer close(resumerDone)
			resumer.Run(resumerCtx)
		}()
		defer func() {
			stopResumer()
			<-resumerDone // a key under way is released; before the database closes
		}()
	}

	stopTransfers, err := startTransfers(ctx, o, svc, tokens, consumerMetrics, logger, stdout)
	if err != nil {
		ln.Close()
		if adminLn != nil {
			adminLn.Close()
		}
		return err
	}
	defer stopTransfers() // before the database closes

	ctx, stop := context.WithCancel(ctx)
	defer stop()
	adminDone := make(chan error, 1)
	if adminLn == nil {
		adminDone <- nil
	} else {
		admin := http.NewServeMux()
		admin.Handle("GET /metrics", promhttp.HandlerFor(registry, promhttp.HandlerOpts{}))
		adminSrv := &http.Server{
			Handler:           admin,
			ReadHeaderTimeout: 10 * time.Second,
			ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
		}
		go func() {
			err := cmdrun.Serve(ctx, adminSrv, adminLn, o.shutdown)
			stop() // a failed admin listener stops the service too
			adminDone <- err
		}()
	}
	grpcDone := serveGRPC(ctx, stop, rpc, grpcLn, o.shutdown, logger)
	err = cmdrun.Serve(ctx, srv, ln, o.shutdown)
	stop()
	if grpcErr := <-grpcDone; err == nil && grpcErr != nil {
		err = fmt.Errorf("gRPC listener: %w", grpcErr)
	}
	if adminErr := <-adminDone; err == nil && adminErr != nil {
		err = fmt.Errorf("admin listener: %w", adminErr)
	}
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, "paymentsd: stopped")
	return nil
}

// processorName names the card processor in the start line: its URL's
// host (the path or query may carry a credential), or "simulated".
func processorName(base string) string {
	if base == "" {
		return "simulated"
	}
	if u, err := url.Parse(base); err == nil && u.Host != "" {
		return u.Scheme + "://" + u.Host
	}
	return "at -processor"
}

// newLogger returns the service's logger in the -log-format format.
func newLogger(format string, w io.Writer) (*slog.Logger, error) {
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, nil)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, nil)), nil
	}
	return nil, fmt.Errorf("-log-format %q: want text or json", format)
}

// newRelay returns the relay that posts the outbox's events to
// -webhook-url, or nil when there is none.
func newRelay(o *options, db *database.DB, m idemoutbox.Metrics, logger *slog.Logger) (*idemoutbox.Relay, error) {
	if o.webhookURL == "" {
		return nil, nil
	}
	u, err := url.Parse(o.webhookURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, errors.New("-webhook-url: want an http:// or https:// URL")
	}
	if o.webhookSecret == "" {
		return nil, errors.New("-webhook-secret (or PAYMENTSD_WEBHOOK_SECRET) is required with -webhook-url")
	}
	if _, err := idemoutbox.ParseSecret(o.webhookSecret); err != nil {
		return nil, fmt.Errorf("-webhook-secret: %w", err) // never repeats the secret
	}
	if o.webhookTimeout <= 0 || o.webhookRetry <= 0 || o.webhookTries <= 0 {
		return nil, errors.New("-webhook-timeout, -webhook-retry and -webhook-max-attempts must be positive")
	}
	wh, err := idemoutbox.NewWebhook(&idemoutbox.WebhookConfig{URL: o.webhookURL, Secret: o.webhookSecret, Timeout: o.webhookTimeout})
	if err != nil {
		return nil, err
	}
	return idemoutbox.NewRelay(db.Outbox(), wh, &idemoutbox.RelayConfig{
		MaxAttempts: o.webhookTries, Backoff: idemoutbox.ExponentialBackoff(o.webhookRetry, idemoutbox.BackoffMax),
		Logger: logger, Metrics: m,
	})
}
