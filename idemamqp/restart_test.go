package idemamqp_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemamqp"
	"github.com/idemkit/idem/idemconsume"
	"github.com/idemkit/idem/internal/child"
)

// rabbitServerBin is the installed RabbitMQ start script, which a test
// that kills the broker runs as a throwaway node of its own.
func rabbitServerBin(t *testing.T) string {
	for _, p := range []string{os.Getenv("IDEM_RABBITMQ_SERVER"), "/usr/lib/rabbitmq/bin/rabbitmq-server"} {
		if p == "" {
			continue
		}
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	t.Skip("no rabbitmq-server installed")
	return ""
}

func freePort(t *testing.T) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// throwawayRabbit is a RabbitMQ node of the test's own: its own name,
// ports, database directory and no plugins, never the shared server.
type throwawayRabbit struct {
	t          *testing.T
	bin, dir   string
	name       string
	port, dist int
	cmd        *exec.Cmd
}

func startThrowawayRabbit(t *testing.T) *throwawayRabbit {
	r := &throwawayRabbit{
		t: t, bin: rabbitServerBin(t), dir: t.TempDir(),
		name: fmt.Sprintf("idemtest%d-%d@localhost", os.Getpid(), time.Now().UnixNano()%1e6),
		port: freePort(t), dist: freePort(t),
	}
	r.start()
	t.Cleanup(r.kill)
	return r
}

func (r *throwawayRabbit) url() string {
	return "amqp://guest:guest@127.0.0.1:" + strconv.Itoa(r.port) + "/"
}

func (r *throwawayRabbit) start() {
	r.t.Helper()
	r.cmd = exec.Command(r.bin)
	r.cmd.Dir = r.dir
	r.cmd.Env = append(os.Environ(),
		"RABBITMQ_NODENAME="+r.name, "RABBITMQ_NODE_IP_ADDRESS=127.0.0.1",
		"RABBITMQ_NODE_PORT="+strconv.Itoa(r.port), "RABBITMQ_DIST_PORT="+strconv.Itoa(r.dist),
		"RABBITMQ_MNESIA_BASE="+filepath.Join(r.dir, "mnesia"), "RABBITMQ_LOG_BASE="+filepath.Join(r.dir, "log"),
		"RABBITMQ_ENABLED_PLUGINS_FILE="+filepath.Join(r.dir, "plugins"), "RABBITMQ_CONFIG_FILE="+filepath.Join(r.dir, "rabbitmq"),
		"RABBITMQ_PID_FILE="+filepath.Join(r.dir, "pid"),
		// The script then replaces itself with the Erlang VM, which the
		// test kills and which dies with the test.
		"RUNNING_UNDER_SYSTEMD=1",
	)
	dieWithParent(r.cmd)
	if err := child.Start(r.cmd); err != nil {
		r.t.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		conn, err := amqp.Dial(r.url())
		if err == nil {
			conn.Close()
			return
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("the throwaway RabbitMQ did not start: %v (logs in %s)", err, r.dir)
		}
		time.Sleep(200 * time.Millisecond) // a poll under a deadline
	}
}

// kill kills the node with SIGKILL, as a crash does.
func (r *throwawayRabbit) kill() {
	if r.cmd != nil && r.cmd.Process != nil {
		r.cmd.Process.Kill()
		r.cmd.Wait()
		r.cmd = nil
	}
}

// RabbitMQ itself is killed with SIGKILL and started again, twice, while
// a subscriber consumes a durable queue of persistent messages: every
// command is applied once; the acks the crashes lost come back as
// redeliveries, acknowledged as duplicates.
func TestBrokerKilledAndRestarted(t *testing.T) {
	const n, restarts = 400, 2
	rmq := startThrowawayRabbit(t)
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
	declare := func() error {
		conn, err := amqp.Dial(rmq.url())
		if err != nil {
			return err
		}
		defer conn.Close()
		ch, err := conn.Channel()
		if err != nil {
			return err
		}
		_, err = ch.QueueDeclare("cmds", true, false, false, false, nil)
		return err
	}
	if err := declare(); err != nil {
		t.Fatal(err)
	}
	sub, err := idemamqp.NewSubscriber(c, idemamqp.DialURL(rmq.url()), &idemamqp.SubscriberConfig{
		Queue: "cmds", Prefetch: 8, ReconnectWait: 100 * time.Millisecond, Logger: quiet,
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
	)
	publish := func(i int) {
		for {
			if pubCh == nil || pubCh.IsClosed() {
				if pubConn != nil {
					pubConn.Close()
				}
				pubConn, pubCh = nil, nil
				conn, err := amqp.Dial(rmq.url())
				if err == nil {
					ch, err := conn.Channel()
					if err == nil && ch.Confirm(false) == nil {
						pubConn, pubCh = conn, ch
					} else {
						conn.Close()
					}
				}
			}
			if pubCh != nil {
				pctx, pcancel := context.WithTimeout(ctx, 5*time.Second)
				dc, err := pubCh.PublishWithDeferredConfirmWithContext(pctx, "", "cmds", false, false, amqp.Publishing{
					MessageId: fmt.Sprintf("cmd-%d", i), ContentType: "application/json", DeliveryMode: amqp.Persistent,
					Body: fmt.Appendf(nil, `{"n":%d}`, i),
				})
				if err == nil {
					ok, err := dc.WaitContext(pctx)
					if err == nil && ok {
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
			rmq.kill()
			rmq.start()
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
