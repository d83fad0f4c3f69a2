package idemnats_test

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemkit/idem/internal/pgtest"
)

var (
	commands  = flag.Int("commands", 1000, "commands of TestCommandsWithKilledConsumers (the report runs 10000)")
	killEvery = flag.Duration("kill-every", 2*time.Second, "how often TestCommandsWithKilledConsumers kills a consumer")
)

// Commands, a tenth of them published twice, go to two consumer processes
// of one durable consumer, one of which is killed with SIGKILL every few
// seconds and started again: every command is applied once, none is lost,
// and the bank's total is what it was.
func TestCommandsWithKilledConsumers(t *testing.T) {
	n := *commands
	ctx := context.Background()
	dbURL := pgtest.NewDatabase(t)
	pool, store, err := openStore(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if err := store.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, bankSchema); err != nil {
		t.Fatal(err)
	}
	nc, js := connect(t, natsURL())
	t.Cleanup(nc.Close)
	stream := uniqueName("IDEMTEST_")
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: stream, Subjects: []string{stream + ".cmd"}, Storage: jetstream.FileStorage}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { js.DeleteStream(context.Background(), stream) })
	durable, err := js.CreateOrUpdateConsumer(ctx, stream, jetstream.ConsumerConfig{
		Durable: "bank", AckPolicy: jetstream.AckExplicitPolicy, AckWait: 5 * time.Second, MaxDeliver: -1,
	})
	if err != nil {
		t.Fatal(err)
	}

	env := []string{"IDEM_TEST_DB=" + dbURL, "IDEM_TEST_NATS=" + natsURL(), "IDEM_TEST_STREAM=" + stream}
	consumers := []*proc{startChild(t, "consumer", env, nil), startChild(t, "consumer", env, nil)}
	start := time.Now()
	// The publisher: each command once, and a tenth of them again, as a
	// publisher that retries after a lost answer does.
	published := make(chan error, 1)
	go func() { published <- publishCommands(ctx, js, stream+".cmd", n) }()

	// A consumer is killed every kill-every, and after each twentieth of
	// the commands, whichever comes first, so that a fast machine sees as
	// many kills as a slow one.
	kills, lastKill, lastApplied := 0, time.Now(), 0
	poll := time.NewTicker(100 * time.Millisecond)
	defer poll.Stop()
	deadline := time.After(8 * time.Minute) // under go test's own limit
	pubDone := false
	for {
		select {
		case err := <-published:
			if err != nil {
				t.Fatal(err)
			}
			pubDone = true
			continue
		case <-poll.C:
		case <-deadline:
			t.Fatalf("after 8 minutes %d of %d applied", applied(t, pool), n)
		}
		got := applied(t, pool)
		if pubDone && got >= n && drained(t, durable) {
			break
		}
		if time.Since(lastKill) < *killEvery && got-lastApplied < n/20 || got >= n {
			continue
		}
		lastKill, lastApplied = time.Now(), got
		i := kills % len(consumers)
		kill(consumers[i])
		consumers[i] = startChild(t, "consumer", env, nil)
		kills++
	}
	elapsed := time.Since(start)
	for _, c := range consumers {
		kill(c)
	}
	var rows, distinct int
	var total int64
	if err := pool.QueryRow(ctx, `SELECT count(*), count(DISTINCT id) FROM applied`).Scan(&rows, &distinct); err != nil {
		t.Fatal(err)
	}
	if err := pool.QueryRow(ctx, `SELECT sum(balance) FROM accounts`).Scan(&total); err != nil {
		t.Fatal(err)
	}
	t.Logf("JetStream: %d commands (%d published twice), %d consumer processes killed with SIGKILL in %s: %d applied, %d twice, %d lost, bank total %d (want %d)",
		n, n/10, kills, elapsed.Round(time.Second), distinct, rows-distinct, n-distinct, total, bankTotal)
	if rows != n || distinct != n || total != bankTotal {
		t.Fatal("want every command applied once and the total unchanged")
	}
}

func publishCommands(ctx context.Context, js jetstream.JetStream, subject string, n int) error {
	send := func(i int) error {
		id := fmt.Sprintf("transfer-%d", i)
		r := rand.New(rand.NewPCG(uint64(i), 7))
		body, _ := json.Marshal(transferCommand{From: r.IntN(100), To: r.IntN(100), Amount: 1 + r.Int64N(1000)})
		h := nats.Header{}
		h.Set(commandIDHeader, id)
		h.Set("Content-Type", "application/json")
		for {
			_, err := js.PublishMsg(ctx, &nats.Msg{Subject: subject, Data: body, Header: h})
			if err == nil {
				return nil
			}
			if ctx.Err() != nil {
				return err
			}
			time.Sleep(50 * time.Millisecond) // the publisher's retry
		}
	}
	for i := range n {
		if err := send(i); err != nil {
			return err
		}
		if i%10 == 5 {
			// The re-send of an earlier command, whose answer the
			// publisher did not get.
			if err := send(i - 5); err != nil {
				return err
			}
		}
	}
	return nil
}

func applied(t *testing.T, pool *pgxpool.Pool) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), `SELECT count(DISTINCT id) FROM applied`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// drained reports whether the durable has no message left to deliver or
// to be acked.
func drained(t *testing.T, c jetstream.Consumer) bool {
	t.Helper()
	info, err := c.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return info.NumPending == 0 && info.NumAckPending == 0
}
