// Package idemwebhook receives webhooks without double effects: net/http
// middleware that verifies each delivery, then runs the handler behind the
// idem middleware with the provider's event id as the idempotency key.
//
// Every provider delivers at least once, retries for hours or days, and
// delivers out of order. The receiver turns that into one effect per
// event:
//
//	verifier, err := idemwebhook.NewStripe([]string{os.Getenv("STRIPE_WEBHOOK_SECRET")}, nil)
//	...
//	rc, err := idemwebhook.New(store, &idemwebhook.Config{Endpoint: "stripe", Verifier: verifier})
//	...
//	mux.Handle("POST /webhooks/stripe", rc.Wrap(handleStripeEvent))
//
// The provider is chosen per route, by the [Verifier]: [StandardWebhooks]
// (webhook-id, webhook-timestamp, webhook-signature, as idemoutbox sends
// them) or [Stripe] (Stripe-Signature). Each takes several secrets, for a
// rotation, and checks the signed timestamp against a tolerance of 5
// minutes either way ([ToleranceDefault]), comparing signatures in
// constant time.
//
// # Answers
//
// A delivery is answered as follows. A provider retries every answer that
// is not 2xx, later, with the same event id.
//
//   - Not POST, too large, a header missing or malformed, no signature
//     matching, a timestamp outside the tolerance, a body that is not the
//     provider's event: 4xx, an RFC 9457 problem whose detail says why
//     (codes in [Problems]; 413 for a body over idem.Config.MaxBodyBytes),
//     logged at Warn. Nothing is claimed or run; never 5xx.
//   - A new event: the handler runs, in idem.ModeAtomic inside the
//     transaction in which the event id is claimed; its writes, the record
//     of the processed event and its answer commit together. Its answer is
//     the delivery's.
//   - An event already processed: the handler's first answer, replayed
//     (with Idempotent-Replayed: true), without running the handler.
//   - An event whose first delivery is still being handled, here or in
//     another instance on the same store: 409 with Retry-After, the
//     middleware's idempotency-key-in-flight, without running the handler.
//     It is not 2xx, so the provider delivers it again; if the first
//     delivery then failed, the event runs. It is 409 and not 503 because
//     it is the middleware's one answer to a request in flight, and says
//     what happened: nothing is wrong with the receiver, and a monitor of
//     5xx answers does not see duplicates.
//   - A handler that answers 5xx (or panics): the transaction rolls back and
//     the event id is released, so the provider's retry runs the handler
//     again; its 5xx is the answer.
//   - The same event id with a different payload (a provider's bug, or an
//     attack with a leaked secret): 422 idempotency-key-reused, which names
//     the differing top-level fields, logged at Warn with them; the handler
//     does not run. For Stripe, pending_webhooks, a count that may change
//     between deliveries of one event, is left out of the comparison.
//   - The store failing: 503 with Retry-After, saying whether the event was
//     processed, as the middleware answers any request.
//
// "Without running the handler" means without any of its effects: in
// idem.ModeAtomic on idempg, whose claim is deferred to the handler's first
// statement, the code of a handler before that statement may start for a
// delivery that is then answered from the event's key, and its answer is
// discarded. Do nothing outside the transaction before the first
// statement; [Newest] is a good one.
//
// The handler reads the delivery's [Event] (id, type, time, object) with
// [EventFromContext].
//
// # Out of order
//
// A provider does not deliver the events of one object in the order they
// happened: a payment.updated of 10:00:05 may come after the one of
// 10:00:07, or be retried after it. [Newest] keeps a watermark per endpoint
// and object in the handler's transaction, through the store
// ([Watermarks]): the handler asks it whether the event is newer than
// every event of the object applied so far, applies it when it is, and
// answers 2xx without applying it when it is not. The watermark commits
// with the handler's writes, so an event whose handler failed leaves no
// trace, and the final state is that of the newest event of each object,
// whatever the order of arrival. A Stripe event's time is its created, in
// whole seconds: events of one object within the same second are ordered
// by their ids, which is not the order in which they happened; a handler
// that needs more fetches the object, or passes a version of its own to
// [Watermarks.AdvanceWatermark].
//
// # Stores
//
// The event ids are idempotency keys under the client id "webhook:" and the
// endpoint, in the store's key table, and are purged with the other keys
// after idem.Config.Retention (24 h by default). Choose a retention longer
// than the provider retries: Stripe retries for up to 3 days, so a Stripe
// endpoint needs a retention of at least 3 days (72 h), or a redelivery
// after the purge runs the handler again (where the handler asks [Newest],
// the watermark still skips the event: it was applied). Watermarks are kept in the store's idem_webhook_watermarks
// table, one row per endpoint and object, and are not purged.
package idemwebhook
