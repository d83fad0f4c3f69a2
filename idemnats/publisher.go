package idemnats

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemkit/idem/idemoutbox"
)

// Headers of the events a [Publisher] publishes.
const (
	// HeaderEventType carries the event's type, such as
	// "payment.succeeded".
	HeaderEventType = "Idem-Event-Type"
	// HeaderEventClient carries the client whose request enqueued the
	// event.
	HeaderEventClient = "Idem-Event-Client"
)

// PublisherConfig configures a [Publisher].
type PublisherConfig struct {
	// Subject receives events whose Destination is "". An event's
	// Destination, when set, is its subject. Defaults to "": such events
	// then fail and are retried until they are dead.
	Subject string
	// OnDuplicate is called when JetStream reports that it already had
	// the event: a re-publish after a relay crashed between the publish
	// and marking the event delivered, removed by the stream's
	// duplicate window. Defaults to none.
	OnDuplicate func(e idemoutbox.Event)
}

// Publisher is an [idemoutbox.Deliverer] that publishes events to
// JetStream with Nats-Msg-Id set to the event's id, so that the stream's
// duplicate window (StreamConfig.Duplicates, 2 minutes by default) drops a
// re-publish. Deliver returns nil only when JetStream acknowledged the
// message as stored: the relay marks the event delivered after that.
type Publisher struct {
	js  jetstream.JetStream
	cfg PublisherConfig
}

var _ idemoutbox.Deliverer = (*Publisher)(nil)

// NewPublisher returns a publisher on js.
func NewPublisher(js jetstream.JetStream, cfg *PublisherConfig) (*Publisher, error) {
	if js == nil {
		return nil, errors.New("idemnats: a JetStream is required")
	}
	p := &Publisher{js: js}
	if cfg != nil {
		p.cfg = *cfg
	}
	return p, nil
}

// Deliver publishes e, its payload as the body, and waits for JetStream's
// acknowledgement.
func (p *Publisher) Deliver(ctx context.Context, e idemoutbox.Event) error {
	subject := e.Destination
	if subject == "" {
		subject = p.cfg.Subject
	}
	if subject == "" {
		return errors.New("idemnats: the event has no destination and the publisher no subject")
	}
	h := nats.Header{}
	h.Set("Content-Type", "application/json")
	h.Set(HeaderEventType, e.Type)
	h.Set(HeaderEventClient, e.ClientID)
	ack, err := p.js.PublishMsg(ctx, &nats.Msg{Subject: subject, Data: e.Payload, Header: h}, jetstream.WithMsgID(e.ID))
	if err != nil {
		return fmt.Errorf("idemnats: publish event: %w", err)
	}
	if ack.Duplicate && p.cfg.OnDuplicate != nil {
		p.cfg.OnDuplicate(e)
	}
	return nil
}
