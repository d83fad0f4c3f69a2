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
// the key's transaction ([ModeAtomic]), so the business writes and the stored
// response commit together or not at all. A store may claim the key only with
// the handler's first statement ([idemstore.ClaimParams.Speculative]; idempg does), so
// atomic-mode handlers must not have effects outside the transaction: the
// code before the first statement can run and be discarded, when the claim
// finds the key held or completed and the request is answered from it. Handlers that call other systems use
// [ModeTwoPhase] with a fenced lease, and pass [DeriveKey] downstream.
//
// The root package depends on the standard library only. Stores live in
// idemsqlite (embedded SQLite), idempg (PostgreSQL) and idemtest (memory, and
// the conformance suite every store passes).
//
// # Who uses what
//
// Handler authors need [New] with a [Config] and its policies
// ([RequirePolicy], [OutcomePolicy]), the [Mode], [ScopeFromContext] and
// [DeriveKey] inside a handler, [ContextWithScope] in its tests, and, to
// answer their own errors in the same format, [ProblemKind], [WriteProblem]
// and [ProblemsHandler]. Two-phase handlers with large responses stream
// them with [StreamResponse] (and [BreakResponse] when one breaks off).
// Dashboards read [Metrics] and [Results].
//
// Store authors implement [idemstore.Store] and [idemstore.Lease] over [idemstore.ClaimParams],
// [idemstore.ClaimResult], [idemstore.Record] and [idemstore.Response], decide expiry and takeover with
// [idemstore.Expired] and [idemstore.ClaimParams.CanTakeOver], return [idemstore.ErrLeaseLost],
// [idemstore.ErrLeaseEnded] and [idemstore.ErrUnavailable], check a purge's [idemstore.PurgeParams] with
// Validate and decide what it deletes with [idemstore.PurgeParams.Purges], implement
// [idemstore.PurgeStore] and [idemstore.PurgeLock] (and [idemstore.KeyStatsStore]) for the [Purger], and
// run idemtest.RunStoreTests.
//
// Operators and services add [NewStatusHandler] (what became of a client's
// key), [NewReadyHandler] over a [idemstore.Readier] (readiness),
// idemlog.New (one log line per request, with idemlog.RequestIDFromContext),
// and a [Purger] ([NewPurger]) that deletes keys past retention, one
// instance at a time, reporting through [PurgeMetrics] and
// [KeyStatsMetrics];
// stores implement [idemstore.KeyAdmin] for the idem keys command and run
// idemtest.RunAdminTests.
//
// Handlers that call other systems between database writes split the work
// into [Phases] with recovery points, and a [Resumer] finishes the ones
// whose client went away; stores support them through [idemstore.RecoveryLease] and
// [idemstore.RecoveryStore].
//
// Code that claims keys itself, outside the middleware (a queue consumer
// calling idempg's Store.ClaimTx), builds the request hash with
// idemfingerprint.New.
package idem
