// Package idemgrpc gives grpc-go services idem's contract: the unary
// server interceptor of [Server] runs each call behind the idem middleware
// ([idem.New]), on the same stores and by the same rules as HTTP, and
// [UnaryClientInterceptor] sends one key per logical call.
//
// A call carries its key in the "idempotency-key" metadata, with the
// syntax and limits of the HTTP Idempotency-Key header, or in a request
// field chosen per method ([MethodOpts.KeyField]: AIP-155's request_id or
// AEP-155's IdempotencyKey). Keys are scoped by the client that
// [idem.Config.ClientID] reads from the call's context, which the
// service's auth interceptor, chained before this one, fills. The
// fingerprint is of the method's full name and the canonical JSON of the
// request message (see [idemrpc.Canonical]).
//
// The answers:
//
//	missing or malformed key          INVALID_ARGUMENT, ErrorInfo IDEMPOTENCY_KEY_MISSING / _MALFORMED
//	no client identity                UNAUTHENTICATED, ErrorInfo UNAUTHENTICATED
//	the first call is still running   ABORTED, ErrorInfo IDEMPOTENCY_KEY_IN_FLIGHT, RetryInfo,
//	                                  and the grpc-retry-pushback-ms trailer
//	same key, another request         FAILED_PRECONDITION, ErrorInfo IDEMPOTENCY_KEY_REUSED,
//	                                  BadRequest.FieldViolation per differing field
//	store down, outcome unknown,      UNAVAILABLE, ErrorInfo STORE_UNAVAILABLE / OUTCOME_UNKNOWN /
//	operation unfinished              OPERATION_UNFINISHED, RetryInfo
//	a retry of a finished call        the stored response or error status, with the header
//	                                  metadata idempotent-replayed: true
//
// gRPC has no code for HTTP's 422: the mismatch is FAILED_PRECONDITION,
// told from other FAILED_PRECONDITIONs by its ErrorInfo. Every ErrorInfo has
// the domain [idemrpc.ErrorDomain].
//
// In [idem.ModeAtomic] the handler's context carries the store's
// transaction (idempg.TxFromContext, idemsqlite.TxFromContext), as an HTTP
// handler's does; in [idem.ModeTwoPhase] a handler runs [idem.Phases] with
// [RunPhases], and calls other systems with [idem.DeriveKey].
//
// grpc-gateway drops the Idempotency-Key header by default: pass
// [GatewayHeaderMatcher] to runtime.WithIncomingHeaderMatcher.
package idemgrpc
