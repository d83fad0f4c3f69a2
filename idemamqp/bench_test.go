package idemamqp_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemamqp"
	"github.com/idemkit/idem/idemconsume"
	"github.com/idemkit/idem/idempg"
	"github.com/idemkit/idem/internal/pgtest"
)

// benchPrefetch is the prefetch of both consumers of BenchmarkThroughput:
// each handles up to this many deliveries at once.
const benchPrefetch = 8

// benchRound is the number of messages each consumer takes in one round
// of BenchmarkThroughput.
const benchRound = 1000

// BenchmarkThroughput compares, side by side, a bare RabbitMQ consumer
// that inserts a row per delivery in a transaction of its own and acks it,
// with an idem consumer doing the same insert in the transaction that
// records the message's key; both with manual acks and handling up to
// benchPrefetch deliveries at once. Each iteration is a round of
// benchRound messages for each, one after the other, so that both see the
// same machine; it reports the medians of their rates and of the ratio
// idem/bare per round. A third consumer, bare too, inserts the
// benchPrefetch deliveries it holds in one transaction and acks them with
// one multiple ack: what batching would add (batched/bare), which neither
// of the others does.
func BenchmarkThroughput(b *testing.B) {
	ctx := context.Background()
	pool := pgtest.NewPool(b)
	store, err := idempg.New(pool, &idempg.Config{Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	if err := store.Migrate(ctx); err != nil {
		b.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE effects (name text NOT NULL)`); err != nil {
		b.Fatal(err)
	}
	conn, ch := dial(b)
	b.Cleanup(func() { conn.Close() })
	if err := ch.Confirm(false); err != nil {
		b.Fatal(err)
	}
	rate := func(mode string) float64 {
		queue := uniqueName("idembench.")
		if _, err := ch.QueueDeclare(queue, false, false, false, false, nil); err != nil {
			b.Fatal(err)
		}
		defer ch.QueueDelete(queue, false, false, false)
		var last *amqp.DeferredConfirmation
		for i := range benchRound {
			last, err = ch.PublishWithDeferredConfirmWithContext(ctx, "", queue, false, false, amqp.Publishing{
				MessageId: fmt.Sprintf("%s-%d", queue, i), ContentType: "application/json",
				Body: fmt.Appendf(nil, `{"n":%d,"amount":100}`, i),
			})
			if err != nil {
				b.Fatal(err)
			}
		}
		if ok, err := last.WaitContext(ctx); !ok || err != nil {
			b.Fatal("publish not confirmed", err)
		}
		start := time.Now()
		switch mode {
		case "bare":
			consumeBare(b, queue, store, benchRound)
		case "batched":
			consumeBatched(b, queue, store, benchRound)
		default:
			consumeIdem(b, queue, store, benchRound)
		}
		return benchRound / time.Since(start).Seconds()
	}
	var bare, idem, ratio, batched []float64
	b.ResetTimer()
	for range b.N {
		r0, r1, r2 := rate("bare"), rate("idem"), rate("batched")
		bare, idem, ratio = append(bare, r0), append(idem, r1), append(ratio, r1/r0)
		batched = append(batched, r2/r0)
	}
	b.Logf("idem/bare per round: %.2f; batched/bare: %.2f", ratio, batched)
	b.ReportMetric(median(bare), "bare-msgs/s")
	b.ReportMetric(median(idem), "idem-msgs/s")
	b.ReportMetric(median(ratio), "ratio")
	b.ReportMetric(median(batched), "batched/bare")
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}

func consumeBare(b *testing.B, queue string, store *idempg.Store, n int) {
	ctx := context.Background()
	pool := store.Pool()
	conn, ch := dial(b)
	defer conn.Close()
	if err := ch.Qos(benchPrefetch, 0, false); err != nil {
		b.Fatal(err)
	}
	deliveries, err := ch.Consume(queue, "", false, false, false, false, nil)
	if err != nil {
		b.Fatal(err)
	}
	var (
		done atomic.Int64
		wg   sync.WaitGroup
		all  = make(chan struct{})
	)
	go func() {
		for d := range deliveries {
			wg.Go(func() {
				tx, err := pool.Begin(ctx)
				if err == nil {
					_, err = tx.Exec(ctx, `INSERT INTO effects (name) VALUES ($1)`, d.MessageId)
				}
				if err == nil {
					err = tx.Commit(ctx)
				}
				if err == nil {
					err = d.Ack(false)
				}
				if err != nil {
					b.Error(err)
				}
				if done.Add(1) == int64(n) {
					close(all)
				}
			})
		}
	}()
	select {
	case <-all:
	case <-time.After(10 * time.Minute):
		b.Fatal("not done in 10 minutes")
	}
	wg.Wait()
}

func consumeIdem(b *testing.B, queue string, store *idempg.Store, n int) {
	c, err := idemconsume.New(store, func(ctx context.Context, m *idemconsume.Message) error {
		tx, err := idempg.TxFromContext(ctx)
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `INSERT INTO effects (name) VALUES ($1)`, m.ID)
		return err
	}, &idemconsume.Config{Name: "bench", Idem: &idem.Config{Logger: quiet}})
	if err != nil {
		b.Fatal(err)
	}
	var done atomic.Int64
	all := make(chan struct{})
	sub, err := idemamqp.NewSubscriber(c, idemamqp.DialURL(amqpURL()), &idemamqp.SubscriberConfig{
		Queue: queue, Prefetch: benchPrefetch, Logger: quiet,
		Results: func(d idemamqp.Delivery) {
			if d.Result.Outcome != idemconsume.OutcomeExecuted || d.AckErr != nil {
				b.Errorf("delivery %+v", d)
			}
			if done.Add(1) == int64(n) {
				close(all)
			}
		},
	})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { sub.Run(ctx) })
	select {
	case <-all:
	case <-time.After(10 * time.Minute):
		b.Fatal("not done in 10 minutes")
	}
	cancel()
	wg.Wait()
}

// consumeBatched is consumeBare with one transaction per benchPrefetch
// deliveries, one transaction at a time: it waits until it holds a batch,
// sends its inserts in one pipelined batch, commits, and acks them with one
// multiple ack. Its prefetch is two batches, so that the broker sends the
// next batch while one commits.
func consumeBatched(b *testing.B, queue string, store *idempg.Store, n int) {
	ctx := context.Background()
	pool := store.Pool()
	conn, ch := dial(b)
	defer conn.Close()
	if err := ch.Qos(2*benchPrefetch, 0, false); err != nil {
		b.Fatal(err)
	}
	deliveries, err := ch.Consume(queue, "", false, false, false, false, nil)
	if err != nil {
		b.Fatal(err)
	}
	deadline := time.After(10 * time.Minute)
	for done := 0; done < n; {
		batch := make([]amqp.Delivery, 0, benchPrefetch)
		for len(batch) < min(benchPrefetch, n-done) {
			select {
			case d := <-deliveries:
				batch = append(batch, d)
			case <-deadline:
				b.Fatal("not done in 10 minutes")
			}
		}
		tx, err := pool.Begin(ctx)
		if err == nil {
			var inserts pgx.Batch
			for _, d := range batch {
				inserts.Queue(`INSERT INTO effects (name) VALUES ($1)`, d.MessageId)
			}
			err = tx.SendBatch(ctx, &inserts).Close()
		}
		if err == nil {
			err = tx.Commit(ctx)
		}
		if err == nil {
			err = batch[len(batch)-1].Ack(true)
		}
		if err != nil {
			b.Fatal(err)
		}
		done += len(batch)
	}
}
