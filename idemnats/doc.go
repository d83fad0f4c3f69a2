// Package idemnats runs idempotent message consumers on NATS JetStream and
// publishes an outbox's events to it.
//
// JetStream delivers a message at least once to a consumer: a subscriber
// that dies after its commit and before its ack gets the message again
// after AckWait, and JetStream's own deduplication (Nats-Msg-Id within the
// stream's duplicate window, 2 minutes by default) applies to publishing
// only. A [Subscriber] hands each message of a pull consumer to an
// [idemconsume.Consumer], whose key (the consumer's name and the message's
// Nats-Msg-Id) makes the redelivery an acknowledged duplicate: the handler's
// work, committed with the key, is done once.
//
// A [Publisher] is the outbox relay's deliverer for JetStream: it publishes
// each event with Nats-Msg-Id set to the event's id and reports it
// delivered only when JetStream stored it.
//
// See docs/consumers.md.
package idemnats
