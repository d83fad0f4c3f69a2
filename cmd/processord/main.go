// Command processord is a simulated card processor for idem's reference
// payments service: POST /v1/charges, itself behind the Idempotency-Key
// contract, with optional latency and failures. paymentsd -processor URL
// charges through it with keys derived by idem.DeriveKey.
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
	"github.com/idemkit/idem/internal/cmdrun"
	"github.com/idemkit/idem/internal/payments"
)

func main() { cmdrun.Main("processord", Run) }

// Run runs the processor until ctx is done.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("processord", flag.ContinueOnError)
	fs.SetOutput(stderr)
	env := cmdrun.NewEnv(os.LookupEnv)
	addr := fs.String("addr", env.String("PROCESSORD_ADDR", "127.0.0.1:8081"), "listen address (env PROCESSORD_ADDR)")
	db := fs.String("db", env.String("PROCESSORD_DB", "processord.db"), "SQLite file for charges and keys (env PROCESSORD_DB)")
	delay := fs.Duration("delay", env.Duration("PROCESSORD_DELAY", 0), "latency added to every charge (env PROCESSORD_DELAY)")
	failRate := fs.Float64("fail-rate", env.Float("PROCESSORD_FAIL_RATE", 0), "probability (0 to 1) that a charge fails with 503 before charging (env PROCESSORD_FAIL_RATE)")
	if err := env.Err(); err != nil {
		return err
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	logger := slog.New(slog.NewTextHandler(stderr, nil))
	store, err := idemsqlite.Open(*db, &idemsqlite.Config{Logger: logger})
	if err != nil {
		return err
	}
	defer store.Close()
	if err := store.Migrate(ctx); err != nil {
		return err
	}
	h, err := payments.NewProcessorHandler(ctx, payments.ProcessorConfig{Store: store, Delay: *delay, FailRate: *failRate, Logger: logger})
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
