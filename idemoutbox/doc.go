// Package idemoutbox is a transactional outbox for idem's stores: events
// that must reach another system are written in the same transaction as
// the business change they describe, and delivered afterwards, at least
// once, by a [Relay]. A crash after the commit never loses an event; a
// rollback never sends one.
//
// # Enqueueing
//
// A handler behind the idem middleware enqueues an event with [Enqueue],
// passing its request context (which carries the lease's transaction) and
// the store (idempg.Store and idemsqlite.Store implement [Store]):
//
//	ev, err := idemoutbox.Enqueue(r.Context(), store, idemoutbox.EventParams{
//		Purpose: "payment.succeeded",
//		Type:    "payment.succeeded",
//		Payload: body,
//	})
//
// The event's id is derived from the client, the idempotency key and the
// purpose ([EventID]), so a rerun of the handler (a conflict rerun, a
// takeover of an expired lease, a retry after a rollback) writes the same
// id, and a second insert of it does nothing: one request, one event per
// purpose.
//
// # Delivery
//
// A [Relay] takes due events from the store in bounded batches, hands them
// to a [Deliverer] ([Webhook] posts them, signed), and records each
// outcome: delivered, retried later with exponential backoff and jitter,
// or, after [RelayConfig.MaxAttempts] attempts, parked as dead. On
// PostgreSQL the batch's rows stay locked (SELECT ... FOR UPDATE SKIP
// LOCKED) from the moment they are taken until their outcomes commit, so
// any number of relays on one database never deliver one event at the same
// time; on SQLite a store delivers one batch at a time in its process.
// Delivered events are kept for [RelayConfig.Retention] and then purged.
//
// Delivery is at least once: an event whose delivery succeeded but whose
// outcome was not recorded (the relay stopped or crashed in between) is
// delivered again. Receivers deduplicate by the webhook-id header.
//
// # Webhooks
//
// [Webhook] follows the Standard Webhooks scheme: a POST whose JSON body is
// {"type": ..., "timestamp": ..., "data": <payload>}, with the headers
// webhook-id (the event id), webhook-timestamp (Unix seconds of the attempt)
// and webhook-signature ("v1," followed by the base64 HMAC-SHA256 of
// id + "." + timestamp + "." + body, keyed by the secret). Secrets are
// written "whsec_" followed by the base64 of 24 to 64 key bytes
// ([NewSecret], [ParseSecret]).
// Receivers check a request with [Verify] or [VerifyRequest], which compare
// signatures in constant time and reject timestamps outside a tolerance.
package idemoutbox
