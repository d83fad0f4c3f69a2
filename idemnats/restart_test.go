package idemnats_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemconsume"
	"github.com/idemkit/idem/idemnats"
	"github.com/idemkit/idem/internal/child"
)

// natsServerBin is the installed nats-server, which a test that kills the
// broker starts as a throwaway server of its own.
func natsServerBin(t *testing.T) string {
	for _, p := range []string{os.Getenv("IDEM_NATS_SERVER"), "/usr/sbin/nats-server", "/usr/local/bin/nats-server"} {
		if p == "" {
			continue
		}
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	if p, err := exec.LookPath("nats-server"); err == nil {
		return p
	}
	t.Skip("no nats-server installed")
	return ""
}

// throwawayServer is a nats-server with JetStream and a file store in a
// directory of the test's own, on a free loopback port.
type throwawayServer struct {
	t    *testing.T
	bin  string
	dir  string
	port int
	cmd  *exec.Cmd
}

func startThrowawayServer(t *testing.T) *throwawayServer {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	s := &throwawayServer{t: t, bin: natsServerBin(t), dir: t.TempDir(), port: port}
	s.start()
	t.Cleanup(s.kill)
	return s
}

func (s *throwawayServer) url() string { return "nats://127.0.0.1:" + strconv.Itoa(s.port) }

func (s *throwawayServer) start() {
	s.t.Helper()
	s.cmd = exec.Command(s.bin, "-js", "-sd", s.dir, "-a", "127.0.0.1", "-p", strconv.Itoa(s.port))
	dieWithParent(s.cmd)
	if err := child.Start(s.cmd); err != nil {
		s.t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		nc, err := nats.Connect(s.url())
		if err == nil {
			js, _ := jetstream.New(nc)
			_, err = js.AccountInfo(context.Background())
			nc.Close()
			if err == nil {
				return
			}
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("nats-server on %d did not start: %v", s.port, err)
		}
		time.Sleep(50 * time.Millisecond) // a poll under a deadline
	}
}

// kill kills the server with SIGKILL, as a crash does.
func (s *throwawayServer) kill() {
	if s.cmd != nil && s.cmd.Process != nil {
		s.cmd.Process.Kill()
		s.cmd.Wait()
		s.cmd = nil
	}
}

// The broker itself is killed with SIGKILL and started again, three times,
// while a subscriber consumes: every command is applied once; the acks
// that the crashes lost come back as redeliveries, acknowledged as
// duplicates.
func TestBrokerKilledAndRestarted(t *testing.T) {
	const n, restarts = 600, 3
	srv := startThrowawayServer(t)
	env := pgEnv(t)
	ctx := context.Background()
	nc, err := nats.Connect(srv.url(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, _ := jetstream.New(nc)
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "CMDS", Subjects: []string{"cmds"}, Storage: jetstream.FileStorage}); err != nil {
		t.Fatal(err)
	}
	pull, err := js.CreateOrUpdateConsumer(ctx, "CMDS", jetstream.ConsumerConfig{Durable: "ledger", AckPolicy: jetstream.AckExplicitPolicy, AckWait: 2 * time.Second, MaxDeliver: -1})
	if err != nil {
		t.Fatal(err)
	}
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
	sub, err := idemnats.NewSubscriber(c, js, pull, &idemnats.SubscriberConfig{Batch: 16, FetchWait: 200 * time.Millisecond, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { sub.Run(runCtx) })
	defer func() { cancel(); wg.Wait() }()

	publish := func(i int) {
		h := nats.Header{}
		h.Set(idemnats.HeaderMsgID, fmt.Sprintf("cmd-%d", i))
		for {
			// A publisher retries until JetStream stored the command;
			// Nats-Msg-Id makes a retry of a stored one a duplicate.
			pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
			_, err := js.PublishMsg(pctx, &nats.Msg{Subject: "cmds", Data: fmt.Appendf(nil, `{"n":%d}`, i), Header: h})
			pcancel()
			if err == nil {
				return
			}
			time.Sleep(50 * time.Millisecond) // the publisher's retry
		}
	}
	for i := range n {
		publish(i)
		if i > 0 && i%(n/(restarts+1)) == 0 {
			srv.kill()
			srv.start()
		}
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		mu.Lock()
		done := results[idemconsume.OutcomeExecuted] >= n
		mu.Unlock()
		if done {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 2 minutes: %v", results)
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
	t.Logf("%d commands, the broker killed with SIGKILL and restarted %d times: %d missing, %d applied twice; results %v", n, restarts, missing, twice, results)
	if missing != 0 || twice != 0 {
		t.Fatal("want every command applied once")
	}
}

// metricsFunc is an idemconsume.Metrics of one function.
type metricsFunc func(idemconsume.Result)

func (f metricsFunc) Message(_ context.Context, _ string, r idemconsume.Result, _ bool) { f(r) }
