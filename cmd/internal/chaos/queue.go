package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The broker of the QueuedTransfer workload: a throwaway nats-server with
// JetStream on a file store, supervised like the instances, whose stream
// every paymentsd instance consumes with -transfers-from, through one
// durable consumer.
const (
	queueStream  = "CHAOS_TRANSFERS"
	queueSubject = "chaos.transfers"
	queueDurable = "paymentsd"
	// queueDupWindow is the stream's duplicate window: a copy published
	// within it is dropped by JetStream, a copy published after it
	// reaches the consumers, as a publisher's re-send after a lost answer
	// does.
	queueDupWindow = 500 * time.Millisecond
	// queueDrainTimeout bounds the wait, after the faults, for the durable
	// consumer to have no message left to deliver or to be acked: a
	// message held by a killed or paused instance is delivered again after
	// paymentsd's AckWait (30 s).
	queueDrainTimeout = 3 * time.Minute
)

// QueuedTransfer moves money as Transfer does, but sends the command to
// the broker, which paymentsd consumes, with the key as Nats-Msg-Id and
// the tenant's token in Authorization: once, or again after the
// broker's duplicate window, or also over HTTP with the same key (one
// transfer either way). The broker is killed with SIGKILL and restarted
// during the traffic, as the instances are.
type QueuedTransfer struct{}

func (QueuedTransfer) Name() string { return "queued-transfer" }

func (QueuedTransfer) Run(ctx context.Context, w *Worker) {
	b := w.h.bank
	accts := b.accounts[w.Tenant.name]
	from := w.Rand.IntN(len(accts))
	to := (from + 1 + w.Rand.IntN(len(accts)-1)) % len(accts)
	amount := 1 + w.Rand.Int64N(transferMax)
	body := transferBody(accts[from], accts[to], amount)
	op := w.h.history.add(&Op{
		Workload: "queued-transfer", Client: w.Tenant.name, Key: w.newKey(), Kind: kindTransfer,
		From: accts[from], To: accts[to], Amount: amount, token: w.Tenant.token, Queued: true,
	}, body)
	q := w.h.queue
	if !q.publish(ctx, op.Key, w.Tenant.token, body) {
		return
	}
	switch w.Rand.IntN(4) {
	case 0: // a re-send after the duplicate window: the consumers see it twice
		sleepCtx(ctx, queueDupWindow+time.Duration(w.Rand.Int64N(int64(queueDupWindow))))
		if q.publish(ctx, op.Key, w.Tenant.token, body) {
			q.resent.Add(1)
		}
	case 1: // the same transfer over HTTP, with the same key
		w.h.drive(ctx, op, "traffic", rand.New(rand.NewPCG(w.Rand.Uint64(), 3)))
	}
}

// usesQueue reports whether the traffic mix sends commands to a broker.
func usesQueue(ws []Weighted) bool {
	for _, w := range ws {
		if _, ok := w.Workload.(QueuedTransfer); ok && w.Weight > 0 {
			return true
		}
	}
	return false
}

// queue is the deployed broker and the harness's connection to it.
type queue struct {
	proc      *process
	url       string // nats://127.0.0.1:port
	nc        *nats.Conn
	js        jetstream.JetStream
	published atomic.Int64 // commands published, copies included
	resent    atomic.Int64 // copies published after the duplicate window
	kills     atomic.Int64
	lost      int // queued commands not applied once the queue drained
}

// startQueue starts the broker, creates the stream, and returns the
// -transfers-from of the instances.
func (h *harness) startQueue(ctx context.Context) (string, error) {
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
		return "", errors.New("chaos: the queued-transfer workload needs nats-server on the PATH")
	}
	if h.cfg.Store != StorePostgres {
		return "", errors.New("chaos: the queued-transfer workload runs on PostgreSQL only")
	}
	addrs, err := freeAddrs(2)
	if err != nil {
		return "", err
	}
	_, port, _ := cutPort(addrs[0])
	_, monitor, _ := cutPort(addrs[1])
	q := &queue{url: "nats://" + addrs[0]}
	q.proc = &process{
		name: "nats-server", path: bin, addr: addrs[1],
		args:    []string{"-js", "-sd", filepath.Join(h.dir, "nats"), "-a", "127.0.0.1", "-p", port, "-m", monitor},
		logPath: filepath.Join(h.dir, "nats-server.log"),
	}
	q.proc.supervise()
	h.queue = q
	rctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	if err := q.proc.waitReady(rctx, h.client); err != nil {
		return "", fmt.Errorf("chaos: %w", err)
	}
	if q.nc, err = nats.Connect(q.url, nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond)); err != nil {
		return "", fmt.Errorf("chaos: connect to nats-server: %w", err)
	}
	if q.js, err = jetstream.New(q.nc); err != nil {
		return "", err
	}
	if _, err := q.js.CreateStream(ctx, jetstream.StreamConfig{
		Name: queueStream, Subjects: []string{queueSubject}, Storage: jetstream.FileStorage, Duplicates: queueDupWindow,
	}); err != nil {
		return "", fmt.Errorf("chaos: create the stream: %w", err)
	}
	return fmt.Sprintf("%s/%s?stream=%s&durable=%s", q.url, queueSubject, queueStream, queueDurable), nil
}

func cutPort(addr string) (string, string, bool) {
	for i := len(addr) - 1; i >= 0; i-- {
		if addr[i] == ':' {
			return addr[:i], addr[i+1:], true
		}
	}
	return addr, "", false
}

// publish publishes a command until JetStream stored it, or ctx ends.
func (q *queue) publish(ctx context.Context, key, token string, body []byte) bool {
	h := nats.Header{}
	h.Set(jetstream.MsgIDHeader, key)
	h.Set("Authorization", "Bearer "+token)
	h.Set("Content-Type", "application/json")
	for n := 0; ctx.Err() == nil; n++ {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := q.js.PublishMsg(pctx, &nats.Msg{Subject: queueSubject, Data: body, Header: h})
		cancel()
		if err == nil {
			q.published.Add(1)
			return true
		}
		sleepCtx(ctx, idemclientBackoff(n))
	}
	return false
}

// killBroker kills the broker with SIGKILL every interval until ctx ends;
// its supervisor starts it again on its file store.
func (h *harness) killBroker(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if h.queue.proc.kill() {
			h.queue.kills.Add(1)
		}
	}
}

// drainQueue waits until the durable consumer has no message left to
// deliver or to be acked, then counts the queued commands whose key is not
// completed in the database: each is a message lost. It runs before the
// settling, which would send them over HTTP.
func (h *harness) drainQueue(ctx context.Context) error {
	q := h.queue
	ctx, cancel := context.WithTimeout(ctx, queueDrainTimeout)
	defer cancel()
	last := "no answer"
	for {
		info, err := q.consumerInfo(ctx)
		switch {
		case err != nil:
			last = err.Error()
		case info.NumPending == 0 && info.NumAckPending == 0:
		default:
			last = fmt.Sprintf("%d pending, %d awaiting their ack, %d redelivered", info.NumPending, info.NumAckPending, info.NumRedelivered)
		}
		if err == nil && info.NumPending == 0 && info.NumAckPending == 0 {
			break
		}
		if ctx.Err() != nil {
			return fmt.Errorf("chaos: the queue did not drain in %s: %s", queueDrainTimeout, last)
		}
		sleepCtx(ctx, 200*time.Millisecond)
	}
	pool, err := h.openDB(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	for _, op := range h.history.Ops() {
		if !op.Queued {
			continue
		}
		// Processed: its key completed, with the transfer's 201 or the
		// 402 of insufficient funds (which moves nothing); the checker
		// then audits the answer and the money.
		var n int
		if err := pool.QueryRowContext(ctx, `SELECT count(*) FROM idempotency_keys WHERE client_id = $1 AND idempotency_key = $2 AND status = 'completed'`, op.Client, op.Key).Scan(&n); err != nil {
			return fmt.Errorf("chaos: look up the queued commands: %w", err)
		}
		if n == 0 {
			q.lost++
		}
	}
	return nil
}

// consumerInfo reads the durable consumer's state over a connection of its
// own, so that a publishing connection still reconnecting after the
// broker's last kill does not hold the harness up.
func (q *queue) consumerInfo(ctx context.Context) (*jetstream.ConsumerInfo, error) {
	nc, err := nats.Connect(q.url, nats.Timeout(2*time.Second))
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	c, err := js.Consumer(ctx, queueStream, queueDurable)
	if err != nil {
		return nil, err
	}
	return c.Info(ctx)
}

// stop stops the broker and closes the connection.
func (q *queue) stop() {
	if q.nc != nil {
		q.nc.Close()
	}
	q.proc.stop()
}
