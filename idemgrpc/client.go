package idemgrpc

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/idemkit/idem/idemrpc"
)

// ClientOpts configure [UnaryClientInterceptor]; see [idemrpc.ClientOpts].
type ClientOpts = idemrpc.ClientOpts

// UnaryClientInterceptor returns an interceptor that sends one
// idempotency key per logical call in the "idempotency-key" metadata: the
// key of [idemrpc.WithKey] or [idemrpc.WithCall] when the context has one,
// else a new one per call. The key is attached before gRPC's own retries
// and hedges (gRFC A6), so every copy and retry of the call carries it and
// the server runs the call once. A call whose context already carries
// idempotency-key metadata keeps it.
//
// When the server answers ABORTED (the key is in flight) or UNAVAILABLE
// with a RetryInfo, the interceptor waits its delay and sends the call
// again with the same key, up to opts.MaxAttempts times in all.
func UnaryClientInterceptor(opts *ClientOpts) (grpc.UnaryClientInterceptor, error) {
	o, err := opts.WithDefaults()
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, callOpts ...grpc.CallOption) error {
		if !o.NeedsKey(method) {
			return invoker(ctx, method, req, reply, cc, callOpts...)
		}
		if md, _ := metadata.FromOutgoingContext(ctx); len(md.Get(idemrpc.HeaderKey)) == 0 {
			ctx = metadata.AppendToOutgoingContext(ctx, idemrpc.HeaderKey, idemrpc.KeyFor(ctx))
		}
		for attempt := 1; ; attempt++ {
			err := invoker(ctx, method, req, reply, cc, callOpts...)
			if err == nil || attempt >= o.MaxAttempts {
				return err
			}
			st, _ := status.FromError(err)
			delay, ok := idemrpc.RetryDelay(st.Proto())
			if !ok {
				return err
			}
			if idemrpc.Wait(ctx, delay, o.MaxRetryDelay) != nil {
				return err
			}
		}
	}, nil
}
