package idemamqp

import (
	"context"
	"errors"
	"fmt"
	"sync"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/idemkit/idem/idemoutbox"
)

// HeaderEventClient is the header of the events a [Publisher] publishes
// that carries the client whose request enqueued the event.
const HeaderEventClient = "idem-event-client"

// PublisherConfig configures a [Publisher].
type PublisherConfig struct {
	// Exchange receives the events; "" is the default exchange, which
	// routes by queue name. Defaults to "".
	Exchange string
	// RoutingKey routes events whose Destination is ""; an event's
	// Destination, when set, is its routing key. Defaults to "".
	RoutingKey string
}

// Publisher is an [idemoutbox.Deliverer] that publishes events with
// publisher confirms: each persistent and mandatory, with message-id set to
// the event's id and type to its type. Deliver returns nil only when the
// broker confirmed the message and did not return it as unroutable: the
// relay marks the event delivered after that. A relay that crashed between
// the confirm and marking the event publishes it again, with the same
// message-id, which an idempotent consumer acknowledges as a duplicate.
type Publisher struct {
	dial Dialer
	cfg  PublisherConfig

	mu      sync.Mutex // one publish at a time: a return precedes its confirm
	conn    *amqp.Connection
	ch      *amqp.Channel
	returns chan amqp.Return
}

var _ idemoutbox.Deliverer = (*Publisher)(nil)

// NewPublisher returns a publisher over connections that dial opens.
func NewPublisher(dial Dialer, cfg *PublisherConfig) (*Publisher, error) {
	if dial == nil {
		return nil, errors.New("idemamqp: a dialer is required")
	}
	p := &Publisher{dial: dial}
	if cfg != nil {
		p.cfg = *cfg
	}
	return p, nil
}

// Close closes the publisher's connection.
func (p *Publisher) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.reset()
}

func (p *Publisher) reset() error {
	var err error
	if p.conn != nil {
		err = p.conn.Close()
	}
	p.conn, p.ch, p.returns = nil, nil, nil
	return err
}

func (p *Publisher) channel() (*amqp.Channel, error) {
	if p.ch != nil && !p.ch.IsClosed() {
		return p.ch, nil
	}
	p.reset()
	conn, err := p.dial()
	if err != nil {
		return nil, err
	}
	ch, err := conn.Channel()
	if err == nil {
		err = ch.Confirm(false)
	}
	if err != nil {
		conn.Close()
		return nil, err
	}
	p.conn, p.ch = conn, ch
	p.returns = ch.NotifyReturn(make(chan amqp.Return, 1))
	return ch, nil
}

// ReturnedError is the error of an event the broker could not route.
type ReturnedError struct {
	ReplyCode int
	ReplyText string
}

// Error gives the broker's reply code and text.
func (e *ReturnedError) Error() string {
	return fmt.Sprintf("idemamqp: the broker returned the event: %d %s", e.ReplyCode, e.ReplyText)
}

// Deliver publishes e and waits for the broker's confirm.
func (p *Publisher) Deliver(ctx context.Context, e idemoutbox.Event) error {
	key := e.Destination
	if key == "" {
		key = p.cfg.RoutingKey
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	ch, err := p.channel()
	if err != nil {
		return fmt.Errorf("idemamqp: open a channel: %w", err)
	}
	dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, p.cfg.Exchange, key, true, false, amqp.Publishing{
		Headers:     amqp.Table{HeaderEventClient: e.ClientID},
		ContentType: "application/json", DeliveryMode: amqp.Persistent,
		MessageId: e.ID, Type: e.Type, Timestamp: e.CreatedAt, Body: e.Payload,
	})
	if err != nil {
		p.reset()
		return fmt.Errorf("idemamqp: publish event: %w", err)
	}
	ok, err := dc.WaitContext(ctx)
	if err != nil {
		p.reset() // a later confirm would be taken for another event's
		return fmt.Errorf("idemamqp: confirm of event: %w", err)
	}
	if !ok {
		return errors.New("idemamqp: the broker refused the event (nack)")
	}
	select {
	case r := <-p.returns:
		return &ReturnedError{ReplyCode: int(r.ReplyCode), ReplyText: r.ReplyText}
	default:
	}
	return nil
}
