// Command processord is a simulated card processor for idem's reference
// payments service: POST /v1/charges, itself behind the Idempotency-Key
// contract, with optional latency and failures. paymentsd -processor URL
// charges through it with keys derived by idem.DeriveKey.
//
// Every request needs a bearer token of -tokens: POST /v1/charges, and GET
// /v1/charges/count?key=K, the number of charges the client made with key
// K (every charge of the client without key).
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/idemkit/idem/idemsqlite"
	"github.com/idemkit/idem/internal/bearer"
	"github.com/idemkit/idem/internal/cmdrun"
	"github.com/idemkit/idem/internal/processor"
)

func main() { cmdrun.Main("processord", Run) }

// Run runs the processor until ctx is done.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("processord", flag.ContinueOnError)
	fs.SetOutput(stderr)
	env := cmdrun.NewEnv(os.LookupEnv)
	addr := fs.String("addr", env.String("PROCESSORD_ADDR", "127.0.0.1:8081"), "listen address (env PROCESSORD_ADDR)")
	db := fs.String("db", env.String("PROCESSORD_DB", "processord.db"), "SQLite file for charges and keys (env PROCESSORD_DB)")
	tokenPairs := fs.String("tokens", "", "bearer tokens as token=client,token=client (env PROCESSORD_TOKENS; default: the development token of client paymentsd, which paymentsd sends by default, with a warning)")
	delay := fs.Duration("delay", env.Duration("PROCESSORD_DELAY", 0), "latency added to every charge (env PROCESSORD_DELAY)")
	failRate := fs.Float64("fail-rate", env.Float("PROCESSORD_FAIL_RATE", 0), "probability (0 to 1) that a charge fails with 503 before charging (env PROCESSORD_FAIL_RATE)")
	if err := env.Err(); err != nil {
		return err
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	// Read after parsing, so that -h never prints the tokens as a default.
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
	store, err := idemsqlite.Open(*db, &idemsqlite.Config{Logger: logger})
	if err != nil {
		return err
	}
	defer store.Close()
	if err := store.Migrate(ctx); err != nil {
		return err
	}
	h, err := processor.NewHandler(ctx, processor.Config{Store: store, Tokens: tokens, Delay: *delay, FailRate: *failRate, Logger: logger})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second, IdleTimeout: 2 * time.Minute}
	fmt.Fprintf(stdout, "processord: listening on http://%s\n", ln.Addr())
	return cmdrun.Serve(ctx, srv, ln, 30*time.Second)
}
