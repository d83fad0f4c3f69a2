package idemamqp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/idemkit/idem/idemconsume"
)

// Defaults of [SubscriberConfig].
const (
	PrefetchDefault       = 32
	ReconnectWaitDefault  = time.Second
	ConfirmTimeoutDefault = 10 * time.Second
)

// Headers of a dead letter that the subscriber publishes.
const (
	// HeaderDeadLetterReason says why the message was dead-lettered.
	HeaderDeadLetterReason = "idem-dead-letter-reason"
	// HeaderDeadLetterFields lists, for a changed payload, the fields that
	// differ, comma-separated JSON pointers.
	HeaderDeadLetterFields = "idem-dead-letter-fields"
	// HeaderDeadLetterOutcome is the [idemconsume.Outcome].
	HeaderDeadLetterOutcome = "idem-dead-letter-outcome"
	// HeaderConsumer names the consumer that dead-lettered the message.
	HeaderConsumer = "idem-consumer"
)

// Dialer opens a connection to the broker.
type Dialer func() (*amqp.Connection, error)

// DialURL returns a Dialer of url, such as
// "amqp://guest:guest@127.0.0.1:5672/".
func DialURL(url string) Dialer {
	return func() (*amqp.Connection, error) { return amqp.Dial(url) }
}

// SubscriberConfig configures a [Subscriber].
type SubscriberConfig struct {
	// Queue is the queue consumed. Required.
	Queue string
	// Prefetch is the most unacknowledged messages the broker hands the
	// subscriber (basic.qos); they are handled at once. Defaults to
	// PrefetchDefault (32).
	Prefetch int
	// Client returns the scope's client of a delivery; "" means the
	// consumer's name. Defaults to none.
	Client func(d *amqp.Delivery) string
	// DeadLetterExchange, when set, receives a copy of each dead-lettered
	// message, with the Idem-Dead-Letter-* headers, published with a
	// confirm before the message is acked; routed by the message's own
	// routing key. Defaults to "": the message is rejected without
	// requeue, which sends it to the queue's x-dead-letter-exchange if it
	// has one (RabbitMQ adds its x-death header; the reason is in the
	// subscriber's log only).
	DeadLetterExchange string
	// Setup, when set, runs on each new connection before the subscriber
	// consumes: declare the queue and its bindings there, on channels of
	// its own (a failed declaration closes its channel). Declaring is
	// idempotent, and a broker that crashed can come back without a
	// durable queue declared shortly before the crash (RabbitMQ writes
	// its metadata to disk lazily), so topology declared once at start
	// is not enough. Defaults to none.
	Setup func(conn *amqp.Connection) error
	// ReconnectWait is the pause before dialling again after the
	// connection was lost. Defaults to ReconnectWaitDefault (1 s).
	ReconnectWait time.Duration
	// Results, when set, receives what became of each delivery.
	// Defaults to none.
	Results func(Delivery)
	// Logger receives lost connections and dead letters. Defaults to
	// slog.Default().
	Logger *slog.Logger
}

// Subscriber runs an [idemconsume.Consumer] on a queue with manual acks:
// each delivery is acked only after the consumer committed it (or found it
// completed), requeued after the consumer's delay (held unacknowledged
// meanwhile, since AMQP has no delayed requeue) or dead-lettered.
type Subscriber struct {
	consumer *idemconsume.Consumer
	dial     Dialer
	cfg      SubscriberConfig
}

// NewSubscriber returns a subscriber that runs consumer on the queue, over
// connections that dial opens.
func NewSubscriber(consumer *idemconsume.Consumer, dial Dialer, cfg *SubscriberConfig) (*Subscriber, error) {
	if consumer == nil || dial == nil {
		return nil, errors.New("idemamqp: a consumer and a dialer are required")
	}
	if cfg == nil || cfg.Queue == "" {
		return nil, errors.New("idemamqp: SubscriberConfig.Queue is required")
	}
	c := *cfg
	if c.Prefetch < 0 || c.ReconnectWait < 0 {
		return nil, errors.New("idemamqp: SubscriberConfig fields must not be negative")
	}
	if c.Prefetch == 0 {
		c.Prefetch = PrefetchDefault
	}
	if c.ReconnectWait == 0 {
		c.ReconnectWait = ReconnectWaitDefault
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return &Subscriber{consumer: consumer, dial: dial, cfg: c}, nil
}

// Delivery is what became of one delivery.
type Delivery struct {
	// ID is the message-id property.
	ID string
	// Redelivered is the broker's redelivered flag.
	Redelivered bool
	// Result is what the consumer did with it.
	Result idemconsume.Result
	// AckErr is the error of the ack, requeue or dead-lettering.
	AckErr error
}

// Run consumes the queue until ctx ends, then returns nil, dialling again
// after a lost connection.
func (s *Subscriber) Run(ctx context.Context) error {
	for ctx.Err() == nil {
		err := s.session(ctx)
		if ctx.Err() != nil {
			break
		}
		s.cfg.Logger.WarnContext(ctx, "idemamqp: connection lost; dialling again", "err", err, "consumer", s.consumer.Name())
		t := time.NewTimer(s.cfg.ReconnectWait)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
	}
	return nil
}

// session consumes over one connection until it closes or ctx ends.
func (s *Subscriber) session(ctx context.Context) error {
	conn, err := s.dial()
	if err != nil {
		return err
	}
	defer conn.Close()
	if s.cfg.Setup != nil {
		if err := s.cfg.Setup(conn); err != nil {
			return fmt.Errorf("idemamqp: setup: %w", err)
		}
	}
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	if err := ch.Qos(s.cfg.Prefetch, 0, false); err != nil {
		return err
	}
	var pub *amqp.Channel
	if s.cfg.DeadLetterExchange != "" {
		if pub, err = conn.Channel(); err != nil {
			return err
		}
		if err := pub.Confirm(false); err != nil {
			return err
		}
	}
	deliveries, err := ch.Consume(s.cfg.Queue, "", false, false, false, false, nil)
	if err != nil {
		return err
	}
	var (
		wg     sync.WaitGroup
		pubMu  sync.Mutex
		closed = conn.NotifyClose(make(chan *amqp.Error, 1))
	)
	defer wg.Wait()
	for {
		select {
		case <-ctx.Done():
			conn.Close() // unacked deliveries go back to the queue
			return ctx.Err()
		case e := <-closed:
			if e == nil {
				return errors.New("idemamqp: connection closed")
			}
			return e
		case d, ok := <-deliveries:
			if !ok {
				return errors.New("idemamqp: the consumer was cancelled")
			}
			wg.Go(func() {
				res := s.handle(ctx, &d, func(r idemconsume.Result) error {
					pubMu.Lock()
					defer pubMu.Unlock()
					return s.publishDeadLetter(ctx, pub, &d, r)
				})
				if s.cfg.Results != nil {
					s.cfg.Results(res)
				}
			})
		}
	}
}

// Handle hands one delivery to the consumer and acks, requeues or
// dead-letters it. Run calls it for each delivery; call it for deliveries
// of a channel of one's own (manual acks, DeadLetterExchange unset).
func (s *Subscriber) Handle(ctx context.Context, d *amqp.Delivery) Delivery {
	return s.handle(ctx, d, nil)
}

func (s *Subscriber) handle(ctx context.Context, d *amqp.Delivery, publishDL func(idemconsume.Result) error) Delivery {
	m := &idemconsume.Message{
		ID: d.MessageId, Body: d.Body, ContentType: d.ContentType,
		Header: headerOf(d.Headers), Redelivered: d.Redelivered,
	}
	if s.cfg.Client != nil {
		m.Client = s.cfg.Client(d)
	}
	out := Delivery{ID: d.MessageId, Redelivered: d.Redelivered}
	out.Result = s.consumer.Handle(ctx, m)
	switch out.Result.Action {
	case idemconsume.Ack:
		out.AckErr = d.Ack(false)
	case idemconsume.DeadLetter:
		s.cfg.Logger.WarnContext(ctx, "idemamqp: message dead-lettered", "consumer", s.consumer.Name(), "outcome", string(out.Result.Outcome), "reason", out.Result.Reason)
		if publishDL == nil || s.cfg.DeadLetterExchange == "" {
			out.AckErr = d.Reject(false)
			break
		}
		if err := publishDL(out.Result); err != nil {
			out.AckErr = errors.Join(err, requeueAfter(d, time.Second))
			break
		}
		out.AckErr = d.Ack(false)
	default:
		// AMQP has no delayed requeue: the delivery is held, unacked,
		// for the delay.
		out.AckErr = requeueAfter(d, out.Result.Delay)
	}
	if out.AckErr != nil {
		s.cfg.Logger.WarnContext(ctx, "idemamqp: answering a delivery failed; the broker delivers it again when the connection closes", "err", out.AckErr, "consumer", s.consumer.Name())
	}
	return out
}

func requeueAfter(d *amqp.Delivery, delay time.Duration) error {
	if delay > 0 {
		time.Sleep(delay)
	}
	return d.Nack(false, true)
}

// publishDeadLetter publishes a copy of d with the reason to the
// dead-letter exchange and waits for the broker's confirm.
func (s *Subscriber) publishDeadLetter(ctx context.Context, pub *amqp.Channel, d *amqp.Delivery, r idemconsume.Result) error {
	h := amqp.Table{}
	for k, v := range d.Headers {
		h[k] = v
	}
	h[HeaderDeadLetterReason] = r.Reason
	h[HeaderDeadLetterOutcome] = string(r.Outcome)
	h[HeaderConsumer] = s.consumer.Name()
	if len(r.Fields) > 0 {
		h[HeaderDeadLetterFields] = strings.Join(r.Fields, ",")
	}
	ctx, cancel := context.WithTimeout(ctx, ConfirmTimeoutDefault)
	defer cancel()
	dc, err := pub.PublishWithDeferredConfirmWithContext(ctx, s.cfg.DeadLetterExchange, d.RoutingKey, false, false, amqp.Publishing{
		Headers: h, ContentType: d.ContentType, MessageId: d.MessageId, Body: d.Body,
		DeliveryMode: amqp.Persistent, Timestamp: d.Timestamp, Type: d.Type,
	})
	if err != nil {
		return fmt.Errorf("idemamqp: publish the dead letter: %w", err)
	}
	ok, err := dc.WaitContext(ctx)
	if err != nil {
		return fmt.Errorf("idemamqp: confirm of the dead letter: %w", err)
	}
	if !ok {
		return errors.New("idemamqp: the broker refused the dead letter")
	}
	return nil
}

// headerOf copies the string headers of a message for the handler.
func headerOf(t amqp.Table) http.Header {
	if len(t) == 0 {
		return nil
	}
	h := make(http.Header, len(t))
	for k, v := range t {
		if s, ok := v.(string); ok {
			h[http.CanonicalHeaderKey(k)] = []string{s}
		}
	}
	return h
}
