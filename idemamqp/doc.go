// Package idemamqp runs idempotent message consumers on RabbitMQ (AMQP
// 0-9-1) and publishes an outbox's events to it with publisher confirms.
//
// RabbitMQ delivers a message at least once to a consumer with manual
// acknowledgements: when a consumer's connection closes before it acked, the
// broker requeues the message and delivers it again with the redelivered
// flag, whether or not the consumer's work had committed. A [Subscriber]
// hands each delivery of a queue to an [idemconsume.Consumer], whose key (the
// consumer's name and the message-id property) makes that redelivery an
// acknowledged duplicate.
//
// A [Publisher] is the outbox relay's deliverer for RabbitMQ: it publishes
// each event, mandatory and persistent, with message-id set to the event's
// id, and reports it delivered only when the broker confirmed it.
//
// See docs/consumers.md.
package idemamqp
