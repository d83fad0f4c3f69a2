package chaos

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
)

// The brokers a run can send commands to (Config.Queue).
const (
	QueueNATS     = "nats"
	QueueRabbitMQ = "rabbitmq"
)

const (
	// queueDrainTimeout bounds the wait, after the faults, for the
	// consumers to make progress: the broker's backlog or the commands not
	// yet applied must shrink at least this often. A message held by a
	// killed or paused instance is delivered again after paymentsd's
	// AckWait (30 s) on JetStream, when its connection is found dead on
	// RabbitMQ.
	queueDrainTimeout = 3 * time.Minute
	// queueDrainPoll is how often the drain looks at the broker and the
	// keys.
	queueDrainPoll = 500 * time.Millisecond
	// queuePublishers publish Config.QueueCommands, each one command at a
	// time, waiting for the broker's confirm.
	queuePublishers = 8
	// queueCommandMax bounds a commanded transfer's amount: small next to
	// the accounts' balances, so that nearly every command is applied
	// rather than refused for insufficient funds.
	queueCommandMax = 1_000
	// queueLinkFaultEvery is the mean gap between two faults on the
	// instances' links to the broker.
	queueLinkFaultEvery = 3 * time.Second
)

// broker is a throwaway message broker of a run: one file per kind.
type broker interface {
	// name names the broker for people.
	name() string
	// transfersFrom is paymentsd's -transfers-from for it, before it is
	// routed through an instance's link.
	transfersFrom() string
	// copyDelay is the least delay of a re-sent copy that reaches the
	// consumers.
	copyDelay() time.Duration
	// publish publishes a command once and returns when the broker has
	// stored it, or the error.
	publish(ctx context.Context, key, token string, body []byte) error
	// backlog is the number of messages the broker still holds for the
	// consumers, as far as it tells, and a description for a timeout.
	backlog(ctx context.Context) (int, string, error)
	// kill kills the broker with SIGKILL, to be started again; false when
	// it did not.
	kill() bool
	stop()
}

// QueuedTransfer moves money as Transfer does, but sends the command to
// the broker, which paymentsd consumes, with the key as the message's id
// (Nats-Msg-Id, AMQP message-id) and the tenant's token in Authorization:
// once, or again (after JetStream's duplicate window), or also over HTTP
// with the same key (one transfer either way). The broker is killed with
// SIGKILL and restarted during the traffic, as the instances are, when it
// can be.
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
	case 0: // a re-send: the consumers see it twice
		d := q.b.copyDelay()
		sleepCtx(ctx, d+time.Duration(w.Rand.Int64N(int64(d))))
		if q.publish(ctx, op.Key, w.Tenant.token, body) {
			q.resent.Add(1)
		}
	case 1: // the same transfer over HTTP, with the same key
		w.h.drive(ctx, op, "traffic", rand.New(rand.NewPCG(w.Rand.Uint64(), 3)))
	}
}

// usesQueue reports whether the run sends commands to a broker.
func (c Config) usesQueue() bool {
	if c.QueueCommands > 0 {
		return true
	}
	for _, w := range c.Workloads {
		if _, ok := w.Workload.(QueuedTransfer); ok && w.Weight > 0 {
			return true
		}
	}
	return false
}

// queue is the run's broker and what the harness sent to it.
type queue struct {
	b         broker
	published atomic.Int64 // commands published, copies included
	resent    atomic.Int64 // copies that reach the consumers
	kills     atomic.Int64
	// linkFaults counts the toxics put on the instances' links to it.
	linkFaults atomic.Int64
	lost       int // queued commands not applied once the queue drained
}

// startQueue starts the broker and returns the -transfers-from of the
// instances, before routing.
func (h *harness) startQueue(ctx context.Context) (string, error) {
	if h.cfg.Store != StorePostgres {
		return "", errors.New("chaos: the queued transfers run on PostgreSQL only")
	}
	var (
		b   broker
		err error
	)
	switch h.cfg.Queue {
	case QueueRabbitMQ:
		fmt.Fprintf(h.cfg.Progress, "chaos: starting a throwaway RabbitMQ node\n")
		var rb *rabbitBroker
		rb, err = startRabbit(h.dir)
		if rb != nil {
			b = rb
		}
	default:
		var nb *natsBroker
		nb, err = startNATS(ctx, h.dir, h.client)
		if nb != nil {
			b = nb
		}
	}
	if b != nil {
		h.queue = &queue{b: b}
	}
	if err != nil {
		return "", err
	}
	return b.transfersFrom(), nil
}

func cutPort(addr string) (string, string, bool) {
	for i := len(addr) - 1; i >= 0; i-- {
		if addr[i] == ':' {
			return addr[:i], addr[i+1:], true
		}
	}
	return addr, "", false
}

// publish publishes a command until the broker stored it, or ctx ends.
func (q *queue) publish(ctx context.Context, key, token string, body []byte) bool {
	for n := 0; ctx.Err() == nil; n++ {
		if err := q.b.publish(ctx, key, token, body); err == nil {
			q.published.Add(1)
			return true
		}
		sleepCtx(ctx, idemclientBackoff(n))
	}
	return false
}

// publishCommands publishes Config.QueueCommands transfer commands, each
// due at its share of the traffic's duration, so that the consumers take
// them while the faults fall; every tenth is published a second time, a
// moment later, and every twentieth (others than those) is also sent over
// HTTP with the same key, retried to a final answer. It returns when every
// command and copy is published and every HTTP request answered, or ctx
// ends.
func (h *harness) publishCommands(ctx context.Context, start time.Time) {
	n := h.cfg.QueueCommands
	q := h.queue
	var next atomic.Int64
	var wg, copies sync.WaitGroup
	defer copies.Wait()
	for p := range queuePublishers {
		rnd := rand.New(rand.NewPCG(h.cfg.Seed, uint64(5000+p)))
		wg.Go(func() {
			for ctx.Err() == nil {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				sleepCtx(ctx, time.Until(start.Add(h.cfg.Duration*time.Duration(i)/time.Duration(n))))
				t := tenants[i%len(tenants)]
				accts := h.bank.accounts[t.name]
				from := rnd.IntN(len(accts))
				to := (from + 1 + rnd.IntN(len(accts)-1)) % len(accts)
				amount := 1 + rnd.Int64N(queueCommandMax)
				body := transferBody(accts[from], accts[to], amount)
				op := h.history.add(&Op{
					Workload: "queued-command", Client: t.name, Key: fmt.Sprintf("chaos-%d-command-%07d", h.cfg.Seed, i), Kind: kindTransfer,
					From: accts[from], To: accts[to], Amount: amount, token: t.token, Queued: true,
				}, body)
				if !q.publish(ctx, op.Key, t.token, body) {
					continue
				}
				switch i % 20 {
				case 0, 10:
					d := q.b.copyDelay() + time.Duration(rnd.Int64N(int64(q.b.copyDelay())))
					copies.Go(func() {
						sleepCtx(ctx, d)
						if q.publish(ctx, op.Key, t.token, body) {
							q.resent.Add(1)
						}
					})
				case 5:
					seed := rnd.Uint64()
					copies.Go(func() { h.drive(ctx, op, "traffic", rand.New(rand.NewPCG(seed, 4))) })
				}
			}
		})
	}
	wg.Wait()
}

// killBroker kills the broker with SIGKILL every interval until ctx ends;
// it is started again on its files.
func (h *harness) killBroker(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if h.queue.b.kill() {
			h.queue.kills.Add(1)
		}
	}
}

// faultBrokerLinks puts a toxic on one instance's link to the broker every
// queueLinkFaultEvery on average, until ctx ends: connections reset,
// answers held back, or answers late, as Network faults do to the other
// links. They fall on a schedule of their own, drawn from the seed, so
// that the other faults fall as they do without a queue.
func (h *harness) faultBrokerLinks(ctx context.Context) {
	rnd := rand.New(rand.NewPCG(h.cfg.Seed, 9001))
	for {
		sleepCtx(ctx, queueLinkFaultEvery/2+time.Duration(rnd.Int64N(int64(queueLinkFaultEvery))))
		if ctx.Err() != nil {
			return
		}
		i, toxic := rnd.IntN(len(h.instances)), Toxic(rnd.IntN(int(toxics)))
		hold := time.Second + time.Duration(rnd.Int64N(int64(2*time.Second)+1))
		if toxic == ToxicReset {
			hold = 200*time.Millisecond + time.Duration(rnd.Int64N(int64(800*time.Millisecond)+1))
		}
		h.faults.network.Add(1)
		h.queue.linkFaults.Add(1)
		h.faultLog.add(faultMark{At: time.Since(h.start), Kind: Network, Instance: i, Hold: hold, Link: LinkBroker, Toxic: toxic})
		if err := h.net.inject(LinkBroker, i, toxic, hold); err != nil {
			fmt.Fprintf(h.cfg.Progress, "chaos: %v\n", err)
		}
	}
}

// drainQueue waits until the broker holds nothing more for the consumers
// and every queued command's key is completed in the database, then counts
// the queued commands whose key is not: each is a message lost. It gives
// up when neither the backlog nor the commands left shrink for
// queueDrainTimeout: then, with nothing left in the broker, the commands
// left are lost; with a backlog, the run could not be made. It runs before
// the settling, which would send them over HTTP.
func (h *harness) drainQueue(ctx context.Context) error {
	pool, err := h.openDB(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	q := h.queue
	var queued []*Op
	for _, op := range h.history.Ops() {
		if op.Queued {
			queued = append(queued, op)
		}
	}
	last, progress := "no answer", time.Now()
	bestBacklog, bestLeft := -1, len(queued)+1
	for {
		backlog, detail, berr := q.b.backlog(ctx)
		if berr != nil {
			backlog, last = -1, berr.Error()
		} else {
			last = detail
		}
		left, err := unapplied(ctx, pool, queued)
		if err != nil {
			return err
		}
		if backlog == 0 && left == 0 {
			return nil
		}
		if backlog >= 0 && (bestBacklog < 0 || backlog < bestBacklog) || left < bestLeft {
			if backlog >= 0 {
				bestBacklog = backlog
			}
			bestLeft, progress = min(bestLeft, left), time.Now()
		}
		if time.Since(progress) > queueDrainTimeout {
			if backlog != 0 {
				return fmt.Errorf("chaos: the queue did not drain: no progress in %s: %s; %d commands not applied", queueDrainTimeout, last, left)
			}
			q.lost = left
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		sleepCtx(ctx, queueDrainPoll)
	}
}

// unapplied counts the queued commands whose key is not completed in the
// database. Completed means processed: with the transfer's 201 or the 402
// of insufficient funds (which moves nothing); the checker then audits
// the answer and the money.
func unapplied(ctx context.Context, pool *sql.DB, ops []*Op) (int, error) {
	done := map[scopeKey]bool{}
	rows, err := pool.QueryContext(ctx, `SELECT client_id, idempotency_key FROM idempotency_keys WHERE status = 'completed'`)
	if err != nil {
		return 0, fmt.Errorf("chaos: look up the queued commands: %w", err)
	}
	var k scopeKey
	if err := forEachRow(rows, []any{&k.client, &k.key}, func() { done[k] = true }); err != nil {
		return 0, fmt.Errorf("chaos: look up the queued commands: %w", err)
	}
	n := 0
	for _, op := range ops {
		if !done[scopeKey{op.Client, op.Key}] {
			n++
		}
	}
	return n, nil
}

// stop stops the broker and closes the harness's connections to it.
func (q *queue) stop() { q.b.stop() }
