package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"google.golang.org/grpc/reflection"

	"github.com/idemkit/idem/cmd/internal/payments"
)

// withConnect serves PaymentService over Connect (and gRPC-Web) on the
// HTTP API's address, next to api.
func withConnect(api http.Handler, rpc *payments.RPC) http.Handler {
	mux := http.NewServeMux()
	path, h := rpc.ConnectHandler()
	mux.Handle(path, h)
	mux.Handle("/", api)
	return mux
}

// listenGRPC listens on -grpc-addr, or returns nil when it is empty.
func listenGRPC(addr string) (net.Listener, error) {
	if addr == "" {
		return nil, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("gRPC listener: %w", err)
	}
	return ln, nil
}

// serveGRPC serves the gRPC API on ln until ctx ends, then stops
// gracefully within shutdown, and reports on the channel how it ended. A
// failed listener calls stop, which stops the service too. A nil ln
// serves nothing.
func serveGRPC(ctx context.Context, stop func(), rpc *payments.RPC, ln net.Listener, shutdown time.Duration, logger *slog.Logger) <-chan error {
	done := make(chan error, 1)
	if ln == nil {
		done <- nil
		return done
	}
	srv := rpc.NewGRPCServer()
	reflection.Register(srv) // for grpcurl and other tools that list services
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	go func() {
		select {
		case err := <-served:
			stop()
			done <- err
			return
		case <-ctx.Done():
		}
		graceful := make(chan struct{})
		go func() { srv.GracefulStop(); close(graceful) }()
		select {
		case <-graceful:
		case <-time.After(shutdown):
			logger.Warn("paymentsd: gRPC calls still running at the shutdown timeout; stopping them")
			srv.Stop()
		}
		<-served
		done <- nil
	}()
	return done
}
