package chaos

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/idemkit/idem/internal/rabbittest/rabbitnode"
)

// The RabbitMQ broker: a throwaway node of the run's own (its name, ports,
// database directory and Erlang cookie; never the shared server), with one
// durable queue that every paymentsd instance consumes with
// -transfers-from.
const (
	rabbitQueue = "chaos.transfers"
	// rabbitCopyDelay bounds the delay of a copy: RabbitMQ deduplicates
	// nothing, so a copy published at once reaches the consumers too, often
	// while the first is still being handled elsewhere.
	rabbitCopyDelay = 200 * time.Millisecond
	// rabbitConfirmTimeout bounds the wait for a publisher confirm; a
	// publish not confirmed by then is sent again (the consumers see both).
	rabbitConfirmTimeout = 5 * time.Second
)

// rabbitBroker is the run's RabbitMQ node and the harness's publishing
// connection to it: one channel in confirm mode, shared by every
// publisher, dialled again when it breaks.
type rabbitBroker struct {
	node *rabbitnode.Node

	mu   sync.Mutex
	conn *amqp.Connection
	ch   *amqp.Channel
}

var _ broker = (*rabbitBroker)(nil)

func startRabbit(dir string) (*rabbitBroker, error) {
	nodeDir := filepath.Join(dir, "rabbitmq")
	if err := os.MkdirAll(nodeDir, 0o755); err != nil {
		return nil, fmt.Errorf("chaos: %w", err)
	}
	node, err := rabbitnode.Start(nodeDir, nil)
	if err != nil {
		return nil, fmt.Errorf("chaos: the RabbitMQ queue: %w", err)
	}
	b := &rabbitBroker{node: node}
	ch, err := b.channel()
	if err != nil {
		return b, err
	}
	// Declared before any command is published, durable, as paymentsd
	// would declare it: a persistent command survives a restart.
	if _, err := ch.QueueDeclare(rabbitQueue, true, false, false, false, nil); err != nil {
		return b, fmt.Errorf("chaos: declare the queue: %w", err)
	}
	return b, nil
}

func (b *rabbitBroker) name() string { return "RabbitMQ" }

func (b *rabbitBroker) transfersFrom() string { return b.node.URL() + "?queue=" + rabbitQueue }

func (b *rabbitBroker) copyDelay() time.Duration { return rabbitCopyDelay }

// channel returns the publishing channel, dialling it when there is none
// or it closed.
func (b *rabbitBroker) channel() (*amqp.Channel, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ch != nil && !b.ch.IsClosed() {
		return b.ch, nil
	}
	if b.conn != nil {
		b.conn.Close()
	}
	b.conn, b.ch = nil, nil
	conn, err := amqp.DialConfig(b.node.URL(), amqp.Config{Dial: amqp.DefaultDial(2 * time.Second)})
	if err != nil {
		return nil, fmt.Errorf("chaos: connect to RabbitMQ: %w", err)
	}
	ch, err := conn.Channel()
	if err == nil {
		err = ch.Confirm(false)
	}
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("chaos: open a confirm channel on RabbitMQ: %w", err)
	}
	b.conn, b.ch = conn, ch
	return ch, nil
}

// publish publishes a persistent command and waits for the broker's
// confirm: an ack means the node stored it.
func (b *rabbitBroker) publish(ctx context.Context, key, token string, body []byte) error {
	ch, err := b.channel()
	if err != nil {
		return err
	}
	dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", rabbitQueue, false, false, amqp.Publishing{
		MessageId: key, ContentType: "application/json", DeliveryMode: amqp.Persistent,
		Headers: amqp.Table{"Authorization": "Bearer " + token}, Body: body,
	})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, rabbitConfirmTimeout)
	defer cancel()
	ok, err := dc.WaitContext(ctx)
	switch {
	case err != nil:
		return err
	case !ok:
		return errors.New("chaos: RabbitMQ nacked a publish")
	}
	return nil
}

// backlog is the queue's ready messages. AMQP does not tell the deliveries
// held unacknowledged by consumers; the harness finds those by the keys
// still not completed.
func (b *rabbitBroker) backlog(ctx context.Context) (int, string, error) {
	conn, err := amqp.DialConfig(b.node.URL(), amqp.Config{Dial: amqp.DefaultDial(2 * time.Second)})
	if err != nil {
		return 0, "", err
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return 0, "", err
	}
	q, err := ch.QueueDeclarePassive(rabbitQueue, true, false, false, false, nil)
	if err != nil {
		return 0, "", err
	}
	return q.Messages, fmt.Sprintf("%d ready, %d consumers", q.Messages, q.Consumers), nil
}

// kill does not kill the node: a RabbitMQ restart takes tens of seconds on
// a loaded machine, longer than the instances' readiness allows
// (idemamqp's TestBrokerKilledAndRestarted kills and restarts one). The
// broker links' faults cut the consumers' connections instead.
func (b *rabbitBroker) kill() bool { return false }

func (b *rabbitBroker) stop() {
	b.mu.Lock()
	if b.conn != nil {
		b.conn.Close()
	}
	b.mu.Unlock()
	b.node.Kill()
}
