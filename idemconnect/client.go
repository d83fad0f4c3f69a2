package idemconnect

import (
	"context"
	"slices"

	"connectrpc.com/connect"

	"github.com/idemkit/idem/idemrpc"
)

// ClientOpts configure [NewClientInterceptor]; see [idemrpc.ClientOpts].
// Without Methods, a procedure gets a key unless its idempotency level is
// NoSideEffects or Idempotent.
type ClientOpts = idemrpc.ClientOpts

// NewClientInterceptor returns an interceptor for connect clients that
// sends one key per logical call in the Idempotency-Key header: the key
// of [idemrpc.WithKey] or [idemrpc.WithCall] when the context has one,
// else a new one per call. A request that already has the header keeps
// it. When the server answers ABORTED (the key is in flight) or
// UNAVAILABLE with a RetryInfo, it waits the delay and sends the call
// again with the same key, up to opts.MaxAttempts times in all.
func NewClientInterceptor(opts *ClientOpts) (connect.Interceptor, error) {
	o, err := opts.WithDefaults()
	if err != nil {
		return nil, err
	}
	return connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			spec := req.Spec()
			needs := !exempt(spec.IdempotencyLevel)
			if o.Methods != nil {
				needs = slices.Contains(o.Methods, spec.Procedure)
			}
			if !spec.IsClient || !needs {
				return next(ctx, req)
			}
			if req.Header().Get(idemrpc.HeaderKey) == "" {
				req.Header().Set(idemrpc.HeaderKey, idemrpc.KeyFor(ctx))
			}
			for attempt := 1; ; attempt++ {
				res, err := next(ctx, req)
				if err == nil || attempt >= o.MaxAttempts {
					return res, err
				}
				delay, ok := idemrpc.RetryDelay(statusOf(err))
				if !ok || idemrpc.Wait(ctx, delay, o.MaxRetryDelay) != nil {
					return res, err
				}
			}
		}
	}), nil
}
