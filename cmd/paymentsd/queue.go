package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/idemkit/idem/cmd/internal/payments"
	"github.com/idemkit/idem/idemamqp"
	"github.com/idemkit/idem/idemconsume"
	"github.com/idemkit/idem/idemnats"
	"github.com/idemkit/idem/idemoutbox"
	"github.com/idemkit/idem/internal/bearer"
	"github.com/idemkit/idem/internal/cmdrun"
)

// Defaults of the queue URLs' parameters.
const (
	transfersStreamDefault  = "PAYMENTSD_TRANSFERS"
	transfersDurableDefault = "paymentsd"
	eventsStreamDefault     = "PAYMENTSD_EVENTS"
)

func queueFlags(fs *flag.FlagSet, env *cmdrun.Env, o *options) {
	o.transfersFrom = env.String("PAYMENTSD_TRANSFERS_FROM", "")
	fs.Var((*cmdrun.Redacted)(&o.transfersFrom), "transfers-from", "`URL` of a queue of transfer commands, applied as POST /v1/transfers is: nats://host:port/SUBJECT[?stream=S&durable=D] (JetStream; the stream, default "+transfersStreamDefault+", and the durable consumer, default "+transfersDurableDefault+", are created when missing) or amqp://user:password@host:port/vhost?queue=NAME (RabbitMQ; the queue is declared durable when missing). A command's body is the JSON of POST /v1/transfers, its Nats-Msg-Id or message-id the idempotency key, its Authorization header the client (env PAYMENTSD_TRANSFERS_FROM)")
	o.eventsTo = env.String("PAYMENTSD_EVENTS_TO", "")
	fs.Var((*cmdrun.Redacted)(&o.eventsTo), "events-to", "`URL` that receives every event instead of a webhook: nats://host:port/SUBJECT[?stream=S] (JetStream, Nats-Msg-Id = the event's id; the stream, default "+eventsStreamDefault+", is created when missing) or amqp://user:password@host:port/vhost?exchange=X&routing_key=K (publisher confirms, message-id = the event's id) (env PAYMENTSD_EVENTS_TO)")
}

// queueURL is a parsed -transfers-from or -events-to.
type queueURL struct {
	nats  bool
	dial  string // the server's URL, without path and query (NATS), or without query (AMQP)
	path  string // the NATS subject
	query url.Values
	shown string // scheme://host, for the log: the rest may carry a credential
}

func parseQueueURL(flagName, s string) (*queueURL, error) {
	u, err := url.Parse(s)
	if err != nil || u.Host == "" {
		return nil, fmt.Errorf("-%s: want nats://host:port/SUBJECT or amqp://user:password@host:port/vhost?queue=NAME", flagName)
	}
	q := &queueURL{query: u.Query(), shown: u.Scheme + "://" + u.Host}
	switch u.Scheme {
	case "nats":
		q.nats = true
		q.path = strings.TrimPrefix(u.Path, "/")
		if q.path == "" {
			return nil, fmt.Errorf("-%s: name the subject as the URL's path: nats://host:port/SUBJECT", flagName)
		}
		q.dial = (&url.URL{Scheme: u.Scheme, Host: u.Host, User: u.User}).String()
	case "amqp", "amqps":
		d := *u
		d.RawQuery = ""
		q.dial = d.String()
	default:
		return nil, fmt.Errorf("-%s: scheme %q: want nats or amqp", flagName, u.Scheme)
	}
	return q, nil
}

func (q *queueURL) param(name, def string) string {
	if v := q.query.Get(name); v != "" {
		return v
	}
	return def
}

// clientOfHeader returns the client that the Authorization field of a
// message's headers names, or "".
func clientOfHeader(tokens *bearer.Tokens, h http.Header) string {
	token, err := bearer.FromHeader(h)
	if err != nil {
		return ""
	}
	client, _ := tokens.Client(token)
	return client
}

// startTransfers starts the consumer of -transfers-from, and returns the
// function that stops it and waits for the messages under way.
func startTransfers(ctx context.Context, o *options, svc *payments.Service, tokens *bearer.Tokens, metrics idemconsume.Metrics, logger *slog.Logger, stdout io.Writer) (stop func(), err error) {
	if o.transfersFrom == "" {
		return func() {}, nil
	}
	q, err := parseQueueURL("transfers-from", o.transfersFrom)
	if err != nil {
		return nil, err
	}
	var (
		run     func(context.Context) error
		cleanup = func() {}
	)
	if q.nats {
		nc, err := nats.Connect(q.dial, nats.MaxReconnects(-1), nats.Name("paymentsd"))
		if err != nil {
			return nil, fmt.Errorf("-transfers-from: %w", err)
		}
		cleanup = nc.Close
		js, err := jetstream.New(nc)
		if err != nil {
			nc.Close()
			return nil, err
		}
		stream, durable := q.param("stream", transfersStreamDefault), q.param("durable", transfersDurableDefault)
		if err := ensureStream(ctx, js, stream, q.path); err != nil {
			nc.Close()
			return nil, fmt.Errorf("-transfers-from: %w", err)
		}
		pull, err := js.CreateOrUpdateConsumer(ctx, stream, jetstream.ConsumerConfig{
			Durable: durable, AckPolicy: jetstream.AckExplicitPolicy, AckWait: 30 * time.Second,
			FilterSubject: q.path, MaxDeliver: -1,
		})
		if err != nil {
			nc.Close()
			return nil, fmt.Errorf("-transfers-from: durable consumer %s: %w", durable, err)
		}
		c, err := svc.TransferConsumer(durable, metrics)
		if err != nil {
			nc.Close()
			return nil, err
		}
		sub, err := idemnats.NewSubscriber(c, js, pull, &idemnats.SubscriberConfig{
			Parallelism: 4, DeadLetterSubject: q.query.Get("dead_letter_subject"), Logger: logger,
			Client: func(m jetstream.Msg) string { return clientOfHeader(tokens, http.Header(m.Headers())) },
		})
		if err != nil {
			nc.Close()
			return nil, err
		}
		run = sub.Run
		fmt.Fprintf(stdout, "paymentsd: applying transfers from %s (JetStream stream %s, subject %s, durable %s)\n", q.shown, stream, q.path, durable)
	} else {
		queue := q.query.Get("queue")
		if queue == "" {
			return nil, errors.New("-transfers-from: name the queue: amqp://user:password@host:port/vhost?queue=NAME")
		}
		if err := ensureQueue(q.dial, queue); err != nil {
			return nil, fmt.Errorf("-transfers-from: %w", err)
		}
		c, err := svc.TransferConsumer(queue, metrics)
		if err != nil {
			return nil, err
		}
		sub, err := idemamqp.NewSubscriber(c, idemamqp.DialURL(q.dial), &idemamqp.SubscriberConfig{
			Queue: queue, Prefetch: 8, Logger: logger,
			// Again on every connection: a broker that crashed can come
			// back without a queue declared shortly before.
			Setup: func(conn *amqp.Connection) error { return declareQueue(conn, queue) },
			Client: func(d *amqp.Delivery) string {
				v, _ := d.Headers["Authorization"].(string)
				return clientOfHeader(tokens, http.Header{"Authorization": {v}})
			},
		})
		if err != nil {
			return nil, err
		}
		run = sub.Run
		fmt.Fprintf(stdout, "paymentsd: applying transfers from %s (queue %s)\n", q.shown, queue)
	}
	runCtx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { run(runCtx) })
	return func() { cancel(); wg.Wait(); cleanup() }, nil
}

// ensureStream creates the stream with the subject when it is missing.
func ensureStream(ctx context.Context, js jetstream.JetStream, name, subject string) error {
	_, err := js.Stream(ctx, name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{subject}, Storage: jetstream.FileStorage})
	}
	if err != nil {
		return fmt.Errorf("stream %s: %w", name, err)
	}
	return nil
}

// ensureQueue declares the queue, durable, when it is missing.
func ensureQueue(dial, queue string) error {
	conn, err := amqp.Dial(dial)
	if err != nil {
		return err
	}
	defer conn.Close()
	return declareQueue(conn, queue)
}

// declareQueue declares the queue, durable, when it is missing; a queue
// that exists, with whatever arguments, is left as it is.
func declareQueue(conn *amqp.Connection, queue string) error {
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	defer ch.Close()
	if _, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil); err == nil {
		return nil
	}
	// A failed passive declare closes the channel.
	if ch, err = conn.Channel(); err != nil {
		return err
	}
	defer ch.Close()
	_, err = ch.QueueDeclare(queue, true, false, false, false, nil)
	return err
}

// newEventsPublisher returns the deliverer of -events-to and the function
// that closes it.
func newEventsPublisher(ctx context.Context, s string) (idemoutbox.Deliverer, string, func(), error) {
	q, err := parseQueueURL("events-to", s)
	if err != nil {
		return nil, "", nil, err
	}
	if q.nats {
		nc, err := nats.Connect(q.dial, nats.MaxReconnects(-1), nats.Name("paymentsd-events"))
		if err != nil {
			return nil, "", nil, fmt.Errorf("-events-to: %w", err)
		}
		js, err := jetstream.New(nc)
		if err == nil {
			err = ensureStream(ctx, js, q.param("stream", eventsStreamDefault), q.path)
		}
		if err != nil {
			nc.Close()
			return nil, "", nil, fmt.Errorf("-events-to: %w", err)
		}
		pub, err := idemnats.NewPublisher(js, &idemnats.PublisherConfig{Subject: q.path})
		if err != nil {
			nc.Close()
			return nil, "", nil, err
		}
		return pub, q.shown + " (subject " + q.path + ")", nc.Close, nil
	}
	pub, err := idemamqp.NewPublisher(idemamqp.DialURL(q.dial), &idemamqp.PublisherConfig{
		Exchange: q.query.Get("exchange"), RoutingKey: q.query.Get("routing_key"),
	})
	if err != nil {
		return nil, "", nil, err
	}
	return pub, q.shown, func() { pub.Close() }, nil
}
