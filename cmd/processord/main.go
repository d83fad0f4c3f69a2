// Command processord is a simulated card processor for idem's reference
// payments service: POST /v1/charges, itself behind the Idempotency-Key
// contract, on SQLite or PostgreSQL. paymentsd -processor URL charges
// through it with keys derived by idem.DeriveKey.
//
//	go run ./cmd/processord                                  # sqlite:processord.db
//	go run ./cmd/processord -lose-rate 0.3 -timeout-rate 0.1 -seed 7
//
// It fails the ways real processors do, each at a rate drawn from -seed:
// -fail-rate answers 503 before charging, -lose-rate charges and closes the
// connection without an answer, -timeout-rate charges and answers only
// after the caller gave up. Amounts ending in 02 are declined (402), a
// final answer stored like a charge. A key charges at most once, ever,
// restarts included.
//
// Every request needs a bearer token of -tokens. GET /v1/charges lists the
// client's charges, newest first, with their idempotency keys and outcomes
// (?limit=, ?cursor=, ?idempotency_key=K); GET /v1/charges/count?key=K
// counts them. With -webhook-url and -webhook-secret, every charge also
// sends a signed Standard Webhook (charge.succeeded, charge.declined),
// written in the charge's transaction and relayed at least once, which
// paymentsd -processor-webhook-secret receives. Run with -h for every flag;
// each has an environment variable twin.
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
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/idemkit/idem/cmd/internal/database"
	"github.com/idemkit/idem/cmd/internal/processor"
	"github.com/idemkit/idem/internal/bearer"
	"github.com/idemkit/idem/internal/cmdrun"
)

func main() { cmdrun.Main("processord", Run) }

// Run runs the processor until ctx is done.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("processord", flag.ContinueOnError)
	fs.SetOutput(stderr)
	env := cmdrun.NewEnv(os.LookupEnv)
	addr := fs.String("addr", env.String("PROCESSORD_ADDR", "127.0.0.1:8081"), "listen address (env PROCESSORD_ADDR)")
	// -h shows the database URL with its password hidden.
	db := env.String("PROCESSORD_DB", "sqlite:processord.db")
	fs.Var((*cmdrun.Redacted)(&db), "db", "database `URL` for charges and keys: sqlite:PATH or postgres://...; a bare PATH is an SQLite file (env PROCESSORD_DB)")
	tokenPairs := fs.String("tokens", "", "bearer tokens as token=client,token=client (env PROCESSORD_TOKENS; default: the development token of client paymentsd, which paymentsd sends by default, with a warning)")
	delay := fs.Duration("delay", env.Duration("PROCESSORD_DELAY", 0), "latency added to every charge (env PROCESSORD_DELAY)")
	failRate := fs.Float64("fail-rate", env.Float("PROCESSORD_FAIL_RATE", 0), "probability (0 to 1) that a charge fails with 503 before charging (env PROCESSORD_FAIL_RATE)")
	loseRate := fs.Float64("lose-rate", env.Float("PROCESSORD_LOSE_RATE", 0), "probability (0 to 1) that a charge is made and the connection then closed without an answer (env PROCESSORD_LOSE_RATE)")
	timeoutRate := fs.Float64("timeout-rate", env.Float("PROCESSORD_TIMEOUT_RATE", 0), fmt.Sprintf("probability (0 to 1) that a charge is made and answered only after the caller gave up, at most %s later (env PROCESSORD_TIMEOUT_RATE)", processor.HoldMaxDefault))
	var wo webhookOptions
	wo.url = env.String("PROCESSORD_WEBHOOK_URL", "")
	fs.Var((*cmdrun.Redacted)(&wo.url), "webhook-url", "`URL` that receives a signed Standard Webhooks POST for every charge (charge.succeeded, charge.declined), from an outbox in the charge's transaction; empty sends none (env PROCESSORD_WEBHOOK_URL)")
	fs.StringVar(&wo.secret, "webhook-secret", "", "secret that signs webhooks, whsec_ followed by the base64 of 24 to 64 bytes; required with -webhook-url (env PROCESSORD_WEBHOOK_SECRET)")
	seed := fs.Uint64("seed", envSeed(env), "seed of the failure draws: the same seed and the same sequence of charges fail the same way; 0 picks a random seed, which is logged (env PROCESSORD_SEED)")
	if err := env.Err(); err != nil {
		return err
	}
	if err := fs.Parse(args); err != nil {
		return cmdrun.Usage(err)
	}
	if fs.NArg() > 0 {
		return cmdrun.Usage(fmt.Errorf("unexpected arguments: %q", fs.Args()))
	}
	if *failRate+*loseRate+*timeoutRate > 1 {
		return fmt.Errorf("-fail-rate, -lose-rate and -timeout-rate add up to %g; they must add up to at most 1", *failRate+*loseRate+*timeoutRate)
	}
	// Read after parsing, so that -h never prints secrets as defaults.
	if wo.secret == "" {
		wo.secret = env.String("PROCESSORD_WEBHOOK_SECRET", "")
	}
	if *tokenPairs == "" {
		*tokenPairs = env.String("PROCESSORD_TOKENS", "")
	}
	logger := slog.New(slog.NewTextHandler(stderr, nil))
	dev := *tokenPairs == ""
	if dev {
		*tokenPairs = processor.DevToken + "=paymentsd"
	}
	tokens, err := bearer.Parse(*tokenPairs)
	if err != nil {
		return fmt.Errorf("-tokens: %w", err)
	}
	if dev {
		logger.Warn("processord: no tokens configured; accepting the development token of client paymentsd (see README), never do this in production")
	}
	url := db
	if !strings.Contains(url, ":") {
		url = "sqlite:" + url // a bare path, as processord took before it spoke PostgreSQL
	}
	if !strings.HasPrefix(url, "sqlite:") && !strings.HasPrefix(url, "postgres://") && !strings.HasPrefix(url, "postgresql://") {
		// Its ledger of charges is written for these two; refused before
		// anything is opened or migrated. The URL is not repeated: it may
		// hold a password.
		return cmdrun.Usage(errors.New("-db: want sqlite:PATH or a postgres:// URL"))
	}
	store, err := database.Open(ctx, url, &database.Config{Migrate: true, Logger: logger})
	if err != nil {
		return err
	}
	defer store.Close()
	relay, err := newRelay(wo, store, logger)
	if err != nil {
		return err
	}
	pc := processor.Config{
		Store: store.Store(), Tokens: tokens, Delay: *delay,
		FailRate: *failRate, LoseRate: *loseRate, TimeoutRate: *timeoutRate, Seed: *seed,
		Logger: logger,
	}
	if relay != nil {
		pc.Events = store.Outbox()
	}
	h, err := processor.NewHandler(ctx, pc)
	if err != nil {
		return err
	}
	relayCtx, stopRelay := context.WithCancel(ctx)
	// The relay stops before the database closes; a batch under way is
	// delivered again at the next start (at least once).
	defer runRelay(relayCtx, relay)()
	defer stopRelay()
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second, IdleTimeout: 2 * time.Minute}
	logger.Info("processord: serving", "db", store.Name)
	fmt.Fprintf(stdout, "processord: listening on http://%s\n", ln.Addr())
	return cmdrun.Serve(ctx, srv, ln, 30*time.Second)
}

// envSeed reads PROCESSORD_SEED, an unsigned integer.
func envSeed(env *cmdrun.Env) uint64 {
	v, ok := env.Lookup("PROCESSORD_SEED")
	if !ok {
		return 0
	}
	seed, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
	if err != nil {
		env.Fail("PROCESSORD_SEED", v, "an unsigned integer")
	}
	return seed
}
