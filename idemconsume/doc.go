// Package idemconsume processes messages from a broker exactly once in
// effect: the broker delivers at least once, and the key decides.
//
// A [Consumer] runs a [Handler] for each message it is given, on the same
// stores and rules as the HTTP middleware of package idem, which it is
// built on: the message becomes an in-process POST whose idempotency key is
// the message's id, whose scope's client is the consumer's name (or
// [Message.Client]), and whose body is the payload. So the claim, the
// handler's writes, the record of the message and any events it enqueues
// commit in one transaction in the atomic mode, or the handler runs a
// phased operation ([RunPhases]) with derived keys in the two-phase mode;
// and a payload that differs from the first one under the same id is
// reported with the fields that differ, as a 422 is over HTTP.
//
// [Consumer.Handle] returns what the adapter does with the message:
//
//   - Ack after the commit (executed), or for a completed duplicate,
//     without running the handler;
//   - Nak, to be delivered again after a delay, when the handler failed
//     (its writes rolled back and the key was released, so the redelivery
//     runs it again), when another delivery of the id holds the key (the
//     delay is what is left of its lease), or when the store failed or the
//     outcome of the commit is unknown;
//   - DeadLetter, with the reason, for a changed payload under one id, a
//     malformed id or payload, and a message its handler rejected
//     ([Reject]).
//
// The adapters are modules of their own, so that their clients stay out of
// this one: idemnats (NATS JetStream) and idemamqp (RabbitMQ), each with a
// publisher for the outbox relay of idemoutbox. See docs/consumers.md.
package idemconsume
