// Command processord is a simulated card processor for idem's reference
// payments service: POST /v1/charges, itself behind the Idempotency-Key
// contract, with optional latency and failures. paymentsd -processor URL
// charges through it with keys derived by idem.DeriveKey.
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
	"os/signal"
	"syscall"
	"time"

	"github.com/idemkit/idem/idemsqlite"
	"github.com/idemkit/idem/internal/payments"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := Run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "processord:", err)
		}
		os.Exit(2)
	}
}

// Run runs the processor until ctx is done.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("processord", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", envOr("PROCESSORD_ADDR", "127.0.0.1:8081"), "listen address (env PROCESSORD_ADDR)")
	db := fs.String("db", envOr("PROCESSORD_DB", "processord.db"), "SQLite file for charges and keys (env PROCESSORD_DB)")
	delay := fs.Duration("delay", 0, "latency added to every charge")
	failRate := fs.Float64("fail-rate", 0, "probability (0 to 1) that a charge fails with 503 before charging")
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
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(stdout, "processord: listening on http://%s\n", ln.Addr())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	return srv.Shutdown(shutdownCtx)
}

func envOr(name, def string) string {
	if v, ok := os.LookupEnv(name); ok {
		return v
	}
	return def
}
