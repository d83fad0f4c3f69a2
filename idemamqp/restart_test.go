package idemamqp_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemamqp"
	"github.com/idemkit/idem/idemconsume"
	"github.com/idemkit/idem/internal/rabbittest"
)

// RabbitMQ itself is killed with SIGKILL and started again, twice, while
// a subscriber consumes a durable queue of persistent messages: every
// command is applied once; the acks the crashes lost come back as
// redeliveries, acknowledged as duplicates.
func TestBrokerKilledAndRestarted(t *testing.T) {
	const n, restarts = 400, 2
	rmq := rabbittest.Start(t)
	env := pgEnv(t)
	ctx := context.Background()
	var (
		mu      sync.Mutex
		results = map[idemconsume.Outcome]int{}
	)
	c, err := idemconsume.New(env.Store, func(ctx context.Context, m *idemconsume.Message) error {
		return env.Apply(ctx, m.ID)
	}, &idemconsume.Config{Name: "ledger", Idem: &idem.Config{Logger: quiet}, Metrics: metricsFunc(func(r idemconsume.Result) {
		mu.Lock()
		results[r.Outcome]++
		mu.Unlock()
	})})
	if err != nil {
		t.Fatal(err)
	}
	// The queue is declared on every connection, by the subscriber and
	// by the publisher: a node killed soon after a declaration can come
	// back without the queue (its metadata is written to disk lazily).
	declare := func(ch *amqp.Channel) error {
		_, err := ch.QueueDeclare("cmds", true, false, false, false, nil)
		return err
	}
	// The queue is on disk once it has survived a crash: declare it, kill
	// and restart the node, and declare it again until it was there.
	for attempt := 1; ; attempt++ {
		conn, err := amqp.Dial(rmq.URL())
		if err != nil {
			t.Fatal(err)
		}
		ch, err := conn.Channel()
		if err != nil {
			t.Fatal(err)
		}
		_, err = ch.QueueDeclarePassive("cmds", true, false, false, false, nil)
		if err == nil && attempt > 1 {
			conn.Close()
			break
		}
		if attempt > 5 {
			t.Fatalf("the queue did not survive a restart in 5 attempts: %v", err)
		}
		if err != nil {
			if ch, err = conn.Channel(); err != nil { // a failed passive declare closes the channel
				t.Fatal(err)
			}
			if err := declare(ch); err != nil {
				t.Fatal(err)
			}
		}
		conn.Close()
		rmq.Kill()
		rmq.Restart()
	}
	sub, err := idemamqp.NewSubscriber(c, idemamqp.DialURL(rmq.URL()), &idemamqp.SubscriberConfig{
		Queue: "cmds", Setup: func(conn *amqp.Connection) error {
			ch, err := conn.Channel()
			if err != nil {
				return err
			}
			defer ch.Close()
			return declare(ch)
		}, Prefetch: 8, ReconnectWait: 100 * time.Millisecond, Logger: quiet,
	})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { sub.Run(runCtx) })
	defer func() { cancel(); wg.Wait() }()

	// A publisher with confirms that retries, over a new connection,
	// until the broker confirmed the command.
	var (
		pubConn *amqp.Connection
		pubCh   *amqp.Channel
		returns chan amqp.Return
	)
	publish := func(i int) {
		for {
			if pubCh == nil || pubCh.IsClosed() {
				if pubConn != nil {
					pubConn.Close()
				}
				pubConn, pubCh = nil, nil
				conn, err := amqp.Dial(rmq.URL())
				if err == nil {
					ch, err := conn.Channel()
					if err == nil && ch.Confirm(false) == nil && declare(ch) == nil {
						pubConn, pubCh = conn, ch
						returns = ch.NotifyReturn(make(chan amqp.Return, 1))
					} else {
						conn.Close()
					}
				}
			}
			if pubCh != nil {
				pctx, pcancel := context.WithTimeout(ctx, 5*time.Second)
				// Mandatory: a message the broker cannot route is returned
				// (before its confirm) rather than dropped.
				dc, err := pubCh.PublishWithDeferredConfirmWithContext(pctx, "", "cmds", true, false, amqp.Publishing{
					MessageId: fmt.Sprintf("cmd-%d", i), ContentType: "application/json", DeliveryMode: amqp.Persistent,
					Body: fmt.Appendf(nil, `{"n":%d}`, i),
				})
				if err == nil {
					ok, err := dc.WaitContext(pctx)
					returned := false
					select {
					case <-returns:
						returned = true
					default:
					}
					if err == nil && ok && !returned {
						pcancel()
						return
					}
				}
				pcancel()
				pubCh.Close()
			}
			time.Sleep(100 * time.Millisecond) // the publisher's retry
		}
	}
	defer func() {
		if pubConn != nil {
			pubConn.Close()
		}
	}()
	for i := range n {
		publish(i)
		if i > 0 && i%(n/(restarts+1)) == 0 {
			rmq.Kill()
			rmq.Restart()
		}
	}
	deadline := time.Now().Add(3 * time.Minute)
	for {
		mu.Lock()
		done := results[idemconsume.OutcomeExecuted] >= n
		mu.Unlock()
		if done {
			break
		}
		if time.Now().After(deadline) {
			mu.Lock()
			defer mu.Unlock()
			t.Fatalf("after 3 minutes: %v", results)
		}
		time.Sleep(20 * time.Millisecond) // a poll under a deadline
	}
	twice, missing := 0, 0
	for i := range n {
		got, err := env.Applied(ctx, fmt.Sprintf("cmd-%d", i))
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case got == 0:
			missing++
		case got > 1:
			twice++
		}
	}
	mu.Lock()
	defer mu.Unlock()
	t.Logf("%d commands, RabbitMQ killed with SIGKILL and restarted %d times: %d missing, %d applied twice; results %v", n, restarts, missing, twice, results)
	if missing != 0 || twice != 0 {
		t.Fatal("want every command applied once")
	}
}

// metricsFunc is an idemconsume.Metrics of one function.
type metricsFunc func(idemconsume.Result)

func (f metricsFunc) Message(_ context.Context, _ string, r idemconsume.Result, _ bool) { f(r) }
