package idemnats_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemconsume"
	"github.com/idemkit/idem/idemnats"
	"github.com/idemkit/idem/idempg"
	"github.com/idemkit/idem/internal/pgtest"
)

// benchRound is the number of messages each consumer takes in one round
// of BenchmarkThroughput.
const benchRound = 1000

// BenchmarkThroughput compares, side by side, a bare JetStream consumer
// that inserts a row per message in a transaction of its own and acks it,
// with an idem consumer doing the same insert in the transaction that
// records the message's key; both fetch batches of 32 and handle them one
// message at a time. Each iteration is a round of benchRound messages for
// each, one after the other, so that both see the same machine; it
// reports the medians of their rates and of the ratio idem/bare per round.
// A third consumer, bare too, inserts each fetched batch in one
// transaction: what batching would add (batched/bare), which neither of
// the others does.
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
	nc, js := connect(b, natsURL())
	b.Cleanup(nc.Close)
	rate := func(mode string) float64 {
		stream := uniqueName("IDEMBENCH_")
		if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: stream, Subjects: []string{stream}, Storage: jetstream.FileStorage}); err != nil {
			b.Fatal(err)
		}
		defer js.DeleteStream(context.Background(), stream)
		for i := range benchRound {
			h := nats.Header{}
			h.Set(idemnats.HeaderMsgID, fmt.Sprintf("%s-%d", stream, i))
			if _, err := js.PublishMsgAsync(&nats.Msg{Subject: stream, Data: fmt.Appendf(nil, `{"n":%d,"amount":100}`, i), Header: h}); err != nil {
				b.Fatal(err)
			}
		}
		select {
		case <-js.PublishAsyncComplete():
		case <-time.After(time.Minute):
			b.Fatal("publishing took over a minute")
		}
		pull, err := js.CreateOrUpdateConsumer(ctx, stream, jetstream.ConsumerConfig{Durable: "bench", AckPolicy: jetstream.AckExplicitPolicy, MaxDeliver: -1})
		if err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		switch mode {
		case "bare":
			consumeBare(b, pull, pool, benchRound)
		case "batched":
			consumeBatched(b, pull, pool, benchRound)
		default:
			consumeIdem(b, js, pull, store, benchRound)
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

func consumeBare(b *testing.B, pull jetstream.Consumer, pool *pgxpool.Pool, n int) {
	ctx := context.Background()
	for done := 0; done < n; {
		batch, err := pull.Fetch(32, jetstream.FetchMaxWait(time.Second))
		if err != nil {
			b.Fatal(err)
		}
		for msg := range batch.Messages() {
			tx, err := pool.Begin(ctx)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := tx.Exec(ctx, `INSERT INTO effects (name) VALUES ($1)`, msg.Headers().Get(idemnats.HeaderMsgID)); err != nil {
				b.Fatal(err)
			}
			if err := tx.Commit(ctx); err != nil {
				b.Fatal(err)
			}
			if err := msg.Ack(); err != nil {
				b.Fatal(err)
			}
			done++
		}
	}
}

// consumeBatched is consumeBare with one transaction per fetched batch:
// the inserts of its messages sent in one pipelined batch, one commit,
// then an ack of each.
func consumeBatched(b *testing.B, pull jetstream.Consumer, pool *pgxpool.Pool, n int) {
	ctx := context.Background()
	for done := 0; done < n; {
		batch, err := pull.Fetch(32, jetstream.FetchMaxWait(time.Second))
		if err != nil {
			b.Fatal(err)
		}
		var msgs []jetstream.Msg
		var inserts pgx.Batch
		for msg := range batch.Messages() {
			msgs = append(msgs, msg)
			inserts.Queue(`INSERT INTO effects (name) VALUES ($1)`, msg.Headers().Get(idemnats.HeaderMsgID))
		}
		if len(msgs) == 0 {
			continue
		}
		tx, err := pool.Begin(ctx)
		if err == nil {
			err = tx.SendBatch(ctx, &inserts).Close()
		}
		if err == nil {
			err = tx.Commit(ctx)
		}
		if err != nil {
			b.Fatal(err)
		}
		for _, msg := range msgs {
			if err := msg.Ack(); err != nil {
				b.Fatal(err)
			}
		}
		done += len(msgs)
	}
}

func consumeIdem(b *testing.B, js jetstream.JetStream, pull jetstream.Consumer, store *idempg.Store, n int) {
	ctx := context.Background()
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
	sub, err := idemnats.NewSubscriber(c, js, pull, &idemnats.SubscriberConfig{Batch: 32, FetchWait: time.Second, Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	for done := 0; done < n; {
		ds, err := sub.FetchOnce(ctx)
		if err != nil {
			b.Fatal(err)
		}
		for _, d := range ds {
			if d.Result.Outcome != idemconsume.OutcomeExecuted || d.AckErr != nil {
				b.Fatalf("delivery %+v", d)
			}
		}
		done += len(ds)
	}
}
