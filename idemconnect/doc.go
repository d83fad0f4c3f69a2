// Package idemconnect gives connect-go services idem's contract: the
// interceptor of [Server] runs each unary call of the procedures it is
// given behind the idem middleware ([idem.New]), on the same stores and
// by the same rules as HTTP, and [NewClientInterceptor] sends one key per
// logical call.
//
// A call carries its key in the Idempotency-Key header (the
// "idempotency-key" metadata of the gRPC protocol), with the syntax and
// limits of HTTP's, or in a request field chosen per procedure
// ([MethodOpts.KeyField]: AIP-155's request_id or AEP-155's
// IdempotencyKey). Keys are scoped by the client that
// [idem.Config.ClientID] reads from the call's context, which the
// service's auth interceptor, placed before this one, fills. The
// fingerprint is of the procedure and the canonical JSON of the request
// message (see [idemrpc.Canonical]).
//
// The answers are those of package idemgrpc, as Connect errors with the
// same codes and details: INVALID_ARGUMENT for a missing or malformed key,
// ABORTED with RetryInfo (and the grpc-retry-pushback-ms metadata) while
// the first call runs, FAILED_PRECONDITION with BadRequest.FieldViolation
// for the same key with another request (Connect has no 422 either),
// UNAVAILABLE when the store is down or the outcome unknown, and the
// stored answer of a finished call, with the Idempotent-Replayed: true
// header. Every error carries a google.rpc.ErrorInfo of domain
// [idemrpc.ErrorDomain].
//
// Connect's generic responses are typed, so the interceptor is given each
// procedure with its response type ([NewProcedure]), which it needs to
// replay a stored response; procedures not given pass through untouched,
// as do those whose idempotency level is NoSideEffects or Idempotent.
package idemconnect
