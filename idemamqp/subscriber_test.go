package idemamqp_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemamqp"
	"github.com/idemkit/idem/idemconsume"
	"github.com/idemkit/idem/idemconsume/idemconsumetest"
)

// amqpURL is the shared RabbitMQ of the project's machines.
func amqpURL() string {
	if u := os.Getenv("IDEM_AMQP_URL"); u != "" {
		return u
	}
	return "amqp://guest:guest@127.0.0.1:5672/"
}

func uniqueName(prefix string) string {
	b := make([]byte, 6)
	rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

func dial(t testing.TB) (*amqp.Connection, *amqp.Channel) {
	t.Helper()
	conn, err := amqp.Dial(amqpURL())
	if err != nil {
		t.Fatalf("connect to RabbitMQ: %v", err)
	}
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	return conn, ch
}

// broker is a fanout exchange of the test's own, a queue per consumer
// group bound to it, and a dead-letter exchange with one queue.
type broker struct {
	t      *testing.T
	ch     *amqp.Channel
	prefix string
	mu     sync.Mutex
	groups map[string]bool
	dead   []idemconsumetest.DeadLetter
}

func newBroker(t *testing.T) *broker {
	t.Helper()
	conn, ch := dial(t)
	b := &broker{t: t, ch: ch, prefix: uniqueName("idemtest."), groups: map[string]bool{}}
	must(t, ch.ExchangeDeclare(b.prefix, "fanout", false, false, false, false, nil))
	must(t, ch.ExchangeDeclare(b.prefix+".dlx", "fanout", false, false, false, false, nil))
	_, err := ch.QueueDeclare(b.prefix+".dead", false, false, false, false, nil)
	must(t, err)
	must(t, ch.QueueBind(b.prefix+".dead", "", b.prefix+".dlx", false, nil))
	t.Cleanup(func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		for g := range b.groups {
			ch.QueueDelete(b.prefix+"."+g, false, false, false)
		}
		ch.QueueDelete(b.prefix+".dead", false, false, false)
		ch.ExchangeDelete(b.prefix+".dlx", false, false)
		ch.ExchangeDelete(b.prefix, false, false)
		conn.Close()
	})
	return b
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func (b *broker) Publish(ctx context.Context, id string, body []byte) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.ch.PublishWithContext(ctx, b.prefix, "", false, false, amqp.Publishing{
		MessageId: id, ContentType: "application/json", Body: body, DeliveryMode: amqp.Persistent,
	})
}

type instance struct{ cancel context.CancelFunc }

func (i *instance) Kill() { i.cancel() }

func (b *broker) Start(t *testing.T, group string, c *idemconsume.Consumer) idemconsumetest.Instance {
	queue := b.prefix + "." + group
	b.mu.Lock()
	if !b.groups[group] {
		if _, err := b.ch.QueueDeclare(queue, false, false, false, false, nil); err != nil {
			b.mu.Unlock()
			t.Error(err)
			return &instance{cancel: func() {}}
		}
		if err := b.ch.QueueBind(queue, "", b.prefix, false, nil); err != nil {
			b.mu.Unlock()
			t.Error(err)
			return &instance{cancel: func() {}}
		}
		b.groups[group] = true
	}
	b.mu.Unlock()
	var (
		connMu sync.Mutex
		conn   *amqp.Connection
	)
	dialer := func() (*amqp.Connection, error) {
		c, err := amqp.Dial(amqpURL())
		connMu.Lock()
		conn = c
		connMu.Unlock()
		return c, err
	}
	sub, err := idemamqp.NewSubscriber(c, dialer, &idemamqp.SubscriberConfig{
		Queue: queue, Prefetch: 1, DeadLetterExchange: b.prefix + ".dlx", Logger: quiet,
	})
	if err != nil {
		t.Error(err)
		return &instance{cancel: func() {}}
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { sub.Run(ctx) })
	t.Cleanup(func() { cancel(); wg.Wait() })
	kill := func() {
		cancel()
		connMu.Lock()
		defer connMu.Unlock()
		if conn != nil {
			conn.Close() // what it holds goes back to the queue
		}
	}
	return &instance{cancel: kill}
}

func (b *broker) DeadLetters(ctx context.Context) ([]idemconsumetest.DeadLetter, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for {
		d, ok, err := b.ch.Get(b.prefix+".dead", true)
		if err != nil {
			return nil, err
		}
		if !ok {
			break
		}
		dl := idemconsumetest.DeadLetter{ID: d.MessageId}
		dl.Reason, _ = d.Headers[idemamqp.HeaderDeadLetterReason].(string)
		if f, _ := d.Headers[idemamqp.HeaderDeadLetterFields].(string); f != "" {
			dl.Fields = strings.Split(f, ",")
		}
		b.dead = append(b.dead, dl)
	}
	return append([]idemconsumetest.DeadLetter(nil), b.dead...), nil
}

// Settled reports whether the group's queue has no message ready. AMQP
// does not say how many are unacknowledged; a message requeued after a
// nack or a closed channel is ready again, and counted.
func (b *broker) Settled(ctx context.Context, group string) (bool, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	q, err := b.ch.QueueDeclarePassive(b.prefix+"."+group, false, false, false, false, nil)
	if err != nil {
		return false, err
	}
	return q.Messages == 0, nil
}

func TestConformance(t *testing.T) {
	for name, env := range map[string]func(*testing.T) idemconsumetest.Env{"PostgreSQL": pgEnv, "SQLite": sqliteEnv} {
		t.Run(name, func(t *testing.T) {
			idemconsumetest.Run(t, idemconsumetest.Harness{
				NewEnv:    env,
				NewBroker: func(t *testing.T) idemconsumetest.Broker { return newBroker(t) },
				Timeout:   time.Minute,
			})
		})
	}
}

// Setup runs on every connection before the subscriber consumes: here it
// declares a queue that did not exist, again after the connection was
// lost, and a message published to it is handled.
func TestSubscriberSetupRunsOnEveryConnection(t *testing.T) {
	queue := uniqueName("idemtest.setup.")
	env := sqliteEnv(t)
	handled := make(chan string, 1)
	c, err := idemconsume.New(env.Store, func(ctx context.Context, m *idemconsume.Message) error {
		handled <- m.ID
		return nil
	}, &idemconsume.Config{Name: "setup", Idem: &idem.Config{Logger: quiet}})
	must(t, err)
	var (
		mu     sync.Mutex
		setups int
		conn   *amqp.Connection
	)
	dialer := func() (*amqp.Connection, error) {
		c, err := amqp.Dial(amqpURL())
		mu.Lock()
		conn = c
		mu.Unlock()
		return c, err
	}
	sub, err := idemamqp.NewSubscriber(c, dialer, &idemamqp.SubscriberConfig{
		Queue: queue, ReconnectWait: 50 * time.Millisecond, Logger: quiet,
		Setup: func(conn *amqp.Connection) error {
			mu.Lock()
			setups++
			mu.Unlock()
			ch, err := conn.Channel()
			if err != nil {
				return err
			}
			defer ch.Close()
			_, err = ch.QueueDeclare(queue, false, false, false, false, nil)
			return err
		},
	})
	must(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { sub.Run(ctx) })
	_, ch := dial(t)
	t.Cleanup(func() { cancel(); wg.Wait(); ch.QueueDelete(queue, false, false, false) })
	nSetups := func() int { mu.Lock(); defer mu.Unlock(); return setups }
	waitUntil(t, "the subscriber's first setup", func() bool { return nSetups() == 1 })

	// The connection lost: Setup runs again on the next one.
	mu.Lock()
	conn.Close()
	mu.Unlock()
	waitUntil(t, "the setup of the next connection", func() bool { return nSetups() == 2 })
	must(t, ch.PublishWithContext(ctx, "", queue, true, false, amqp.Publishing{MessageId: "m-1", Body: []byte(`{}`)}))
	select {
	case id := <-handled:
		if id != "m-1" {
			t.Fatalf("handled %q, want m-1", id)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the message published to the declared queue was not handled within 30 s")
	}
}

// waitUntil polls cond for up to 30 s.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(30 * time.Second); !cond(); {
		if time.Now().After(end) {
			t.Fatalf("%s: not within 30 s", what)
		}
		time.Sleep(10 * time.Millisecond) // a poll under a deadline
	}
}
