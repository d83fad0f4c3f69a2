package chaos

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The JetStream broker: a throwaway nats-server with JetStream on a file
// store, supervised like the instances, whose stream every paymentsd
// instance consumes with -transfers-from, through one durable consumer.
const (
	queueStream  = "CHAOS_TRANSFERS"
	queueSubject = "chaos.transfers"
	queueDurable = "paymentsd"
	// queueDupWindow is the stream's duplicate window: a copy published
	// within it is dropped by JetStream, a copy published after it
	// reaches the consumers, as a publisher's re-send after a lost answer
	// does.
	queueDupWindow = 500 * time.Millisecond
)

// natsBroker is the run's nats-server and the harness's connection to it.
type natsBroker struct {
	proc *process
	url  string // nats://127.0.0.1:port
	nc   *nats.Conn
	js   jetstream.JetStream
}

var _ broker = (*natsBroker)(nil)

func startNATS(ctx context.Context, dir string, client *http.Client) (*natsBroker, error) {
	bin, err := exec.LookPath("nats-server")
	if err != nil {
		for _, p := range []string{"/usr/sbin/nats-server", "/usr/local/bin/nats-server"} {
			if _, statErr := exec.LookPath(p); statErr == nil {
				bin, err = p, nil
				break
			}
		}
	}
	if err != nil {
		return nil, errors.New("chaos: the JetStream queue needs nats-server on the PATH")
	}
	addrs, err := freeAddrs(2)
	if err != nil {
		return nil, err
	}
	_, port, _ := cutPort(addrs[0])
	_, monitor, _ := cutPort(addrs[1])
	b := &natsBroker{url: "nats://" + addrs[0]}
	b.proc = &process{
		name: "nats-server", path: bin, addr: addrs[1],
		args:    []string{"-js", "-sd", filepath.Join(dir, "nats"), "-a", "127.0.0.1", "-p", port, "-m", monitor},
		logPath: filepath.Join(dir, "nats-server.log"),
	}
	b.proc.supervise()
	rctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	if err := b.proc.waitReady(rctx, client); err != nil {
		return b, fmt.Errorf("chaos: %w", err)
	}
	if b.nc, err = nats.Connect(b.url, nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond)); err != nil {
		return b, fmt.Errorf("chaos: connect to nats-server: %w", err)
	}
	if b.js, err = jetstream.New(b.nc); err != nil {
		return b, err
	}
	if _, err := b.js.CreateStream(ctx, jetstream.StreamConfig{
		Name: queueStream, Subjects: []string{queueSubject}, Storage: jetstream.FileStorage, Duplicates: queueDupWindow,
	}); err != nil {
		return b, fmt.Errorf("chaos: create the stream: %w", err)
	}
	return b, nil
}

func (b *natsBroker) name() string { return "JetStream" }

func (b *natsBroker) transfersFrom() string {
	return fmt.Sprintf("%s/%s?stream=%s&durable=%s", b.url, queueSubject, queueStream, queueDurable)
}

// copyDelay is past the stream's duplicate window, so that the copy
// reaches the consumers as a publisher's re-send does.
func (b *natsBroker) copyDelay() time.Duration { return queueDupWindow }

func (b *natsBroker) publish(ctx context.Context, key, token string, body []byte) error {
	h := nats.Header{}
	h.Set(jetstream.MsgIDHeader, key)
	h.Set("Authorization", "Bearer "+token)
	h.Set("Content-Type", "application/json")
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_, err := b.js.PublishMsg(ctx, &nats.Msg{Subject: queueSubject, Data: body, Header: h})
	return err
}

// backlog reads the durable consumer's state over a connection of its own,
// so that a publishing connection still reconnecting after the broker's
// last kill does not hold the harness up.
func (b *natsBroker) backlog(ctx context.Context) (int, string, error) {
	nc, err := nats.Connect(b.url, nats.Timeout(2*time.Second))
	if err != nil {
		return 0, "", err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return 0, "", err
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	c, err := js.Consumer(ctx, queueStream, queueDurable)
	if err != nil {
		return 0, "", err
	}
	info, err := c.Info(ctx)
	if err != nil {
		return 0, "", err
	}
	return int(info.NumPending) + info.NumAckPending,
		fmt.Sprintf("%d pending, %d awaiting their ack, %d redelivered", info.NumPending, info.NumAckPending, info.NumRedelivered), nil
}

// kill kills nats-server with SIGKILL; its supervisor starts it again on
// its file store.
func (b *natsBroker) kill() bool { return b.proc.kill() }

func (b *natsBroker) stop() {
	if b.nc != nil {
		b.nc.Close()
	}
	b.proc.stop()
}
