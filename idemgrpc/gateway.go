package idemgrpc

import (
	"net/textproto"
	"strings"

	"github.com/idemkit/idem/idemrpc"
)

// GatewayHeaderMatcher returns a grpc-gateway incoming header matcher
// that passes the Idempotency-Key header on as the "idempotency-key"
// metadata, and leaves every other header to next (runtime.DefaultHeaderMatcher,
// which drops Idempotency-Key):
//
//	mux := runtime.NewServeMux(runtime.WithIncomingHeaderMatcher(
//		idemgrpc.GatewayHeaderMatcher(runtime.DefaultHeaderMatcher)))
//
// It takes and returns plain functions, so that this package does not
// depend on grpc-gateway.
func GatewayHeaderMatcher(next func(string) (string, bool)) func(string) (string, bool) {
	return func(key string) (string, bool) {
		if strings.EqualFold(key, idemrpc.HeaderKey) {
			return idemrpc.HeaderKey, true
		}
		return next(key)
	}
}

// GatewayOutgoingHeaderMatcher returns a grpc-gateway outgoing header
// matcher that passes the "idempotent-replayed" header metadata on as the
// HTTP Idempotent-Replayed header, and leaves other metadata to next
// (runtime.DefaultHeaderMatcher's outgoing counterpart prefixes it with
// Grpc-Metadata-), for runtime.WithOutgoingHeaderMatcher.
func GatewayOutgoingHeaderMatcher(next func(string) (string, bool)) func(string) (string, bool) {
	return func(key string) (string, bool) {
		if strings.EqualFold(key, idemrpc.HeaderReplayed) {
			return textproto.CanonicalMIMEHeaderKey(idemrpc.HeaderReplayed), true
		}
		return next(key)
	}
}
