// Package idem makes payment-style HTTP endpoints safe to retry.
//
// A client that times out on POST /v1/payments cannot know whether the charge
// happened. With idem the client sends an Idempotency-Key header; the
// middleware returned by [New] claims the key in a [idemstore.Store] before the handler
// runs, stores the handler's response, and replays that response byte for
// byte when the same client retries with the same key and the same request.
//
// The contract follows the IETF draft draft-ietf-httpapi-idempotency-key-header
// and Stripe's v1 behaviour:
//
//   - a missing key on a route that requires one: 400;
//   - a malformed, repeated or over-long key: 400;
//   - a retry after the first request finished: the stored response, with
//     Idempotent-Replayed: true;
//   - a retry while the first request still runs: 409 with Retry-After;
//   - the same key with a different request: 422, naming the fields that differ.
//
// Every error is an RFC 9457 problem document (application/problem+json) with
// a stable type URI and a machine-readable [ProblemCode]; see [Problems].
//
// Keys are always scoped by the authenticated client ([Config.ClientID]), and
// requests are compared by a fingerprint (idemfingerprint.Fingerprint): SHA-256 over the method, the path,
// the canonical query string and the canonical body (RFC 8785 for JSON, sorted
// pairs for form bodies).
//
// Stores that share a database with the business data run the handler inside
// the key's transaction ([ModeAtomic]), so the business writes and the
// stored response commit together or not at all. A store may claim the key
// only with the handler's first statement (idempg does), so atomic-mode
// handlers must not have effects outside the transaction: the code before
// the first statement can run and be discarded, when the claim finds the
// key held or completed and the request is answered from it. Handlers that
// call other systems use [ModeTwoPhase] with a fenced lease, and pass
// [DeriveKey] downstream.
//
// # One configuration
//
// A service declares one [Config] and builds everything from it: the
// middleware ([New]), the [Purger] that deletes keys past retention
// ([NewPurger]), the [Resumer] that finishes phased operations whose client
// went away ([NewResumer]), the key-status handler ([NewStatusHandler]) and
// the readiness handler ([NewReadyHandler]). Retention, the lock timeout,
// the store timeout, the clock, the replay headers, the outcome policy and
// the problem type base are then declared once; a purger cannot delete keys
// that the middleware still promises to replay. See the example "Service".
//
// # Packages
//
// This package is for service authors: the middleware and its [Config],
// policies ([RequirePolicy], [OutcomePolicy]), the [Mode], [Phases] and
// [DeriveKey], [ScopeFromContext] inside a handler and [ContextWithScope]
// in its tests, the problems it answers ([Problems], and [ProblemKind],
// [WriteProblem] and [ProblemsHandler] for a service's own errors),
// [StreamResponse] for large two-phase responses, and the [Metrics] and
// [Results] that dashboards read. It depends on the standard library only,
// as do the other packages of its module:
//
//   - idemstore, for store authors: the Store and Lease interfaces, the
//     values and errors they exchange, the optional purge, recovery,
//     key-admin and readiness interfaces, and rules.go, where every rule of
//     the key's state machine lives once;
//   - idemtest: the memory store, a hand-moved Clock, and the conformance
//     suites every store passes;
//   - idemclient: the retrying client;
//   - idemoutbox: the outbox and its webhook relay;
//   - idemfingerprint: the request hash, for code that claims keys itself
//     (a queue consumer calling idempg's Store.ClaimTx);
//   - idemlog: one log line per request, with its request id.
//
// Stores and integrations with a dependency are modules of their own:
// idempg (PostgreSQL, pgx), idemsqlite (embedded SQLite) and idemprom
// (Prometheus).
package idem
