// Package idemrpc is what idem's gRPC ([github.com/idemkit/idem/idemgrpc])
// and Connect ([github.com/idemkit/idem/idemconnect]) interceptors share:
// the translation of a unary RPC into a request for the idem middleware,
// and of the middleware's answer back into an RPC answer, so that an RPC
// handler gets the contract an HTTP handler gets, on the same stores and by
// the same rules, with no second claim loop.
//
// It depends on protobuf and on the google.rpc status types only; the
// interceptors live in modules of their own, so that a Connect service does
// not pull in grpc-go, nor a gRPC service Connect.
//
// # The call as an HTTP request
//
// [Server.Call] turns a call into an in-process POST request to the
// middleware built by [idem.New]:
//
//   - the path is the method's full name, "/payments.v1.PaymentService/CreatePayment":
//     it is what the store records with the key, what the key-status handler
//     shows, what [idem.Config.Require] sees (exempt methods there as routes
//     are exempted), and what [idem.ResumeOpts.Operations] is keyed by
//     ("POST /payments.v1.PaymentService/CreatePayment");
//   - the Idempotency-Key field is the "idempotency-key" metadata, with the
//     syntax and limits of the HTTP header, or the request field that
//     [MethodOpts.KeyField] names (an AIP-155 request_id, or an AEP-155
//     IdempotencyKey message, whose "key" is used);
//   - the body is the canonical JSON of the request message (see [Canonical]),
//     which the middleware fingerprints by RFC 8785 as it does any JSON body;
//   - the context is the call's, so [idem.Config.ClientID] reads the client
//     that the service's auth interceptor put there.
//
// The handler runs with the context an HTTP handler gets (the store's
// transaction in [idem.ModeAtomic], the lease, [idem.DeriveKey]); its answer,
// the response message or an error status, is recorded as the HTTP
// response that the middleware stores and replays (see [WriteMessage] and
// [WriteStatus]). What the middleware answers is then translated back: see
// [Answer] and the table in docs/grpc.md.
package idemrpc
