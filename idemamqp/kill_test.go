package idemamqp_test

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/idemkit/idem/internal/pgtest"
)

var (
	commands  = flag.Int("commands", 1000, "commands of TestCommandsWithKilledConsumers (the report runs 10000)")
	killEvery = flag.Duration("kill-every", 2*time.Second, "how often TestCommandsWithKilledConsumers kills a consumer")
)

// Commands, a tenth of them published twice, go to two consumer processes
// on one queue, one of which is killed with SIGKILL every few seconds and
// started again: every command is applied once, none is lost, and the
// bank's total is what it was.
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
	conn, ch := dial(t)
	t.Cleanup(func() { conn.Close() })
	queue := uniqueName("idemtest.") + ".bank"
	if _, err := ch.QueueDeclare(queue, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ch.QueueDelete(queue, false, false, false) })

	var (
		mu    sync.Mutex
		acked = map[string]int{}
	)
	lines := func(line string) {
		if k, v := splitLine(line); k == "acked" {
			mu.Lock()
			acked[v]++
			mu.Unlock()
		}
	}
	ackedTotal := func() int {
		mu.Lock()
		defer mu.Unlock()
		return acked["executed"] + acked["duplicate"]
	}
	env := []string{"IDEM_TEST_DB=" + dbURL, "IDEM_TEST_QUEUE=" + queue}
	consumers := []*proc{startChild(t, "consumer", env, lines), startChild(t, "consumer", env, lines)}
	start := time.Now()
	pubConn, pubCh := dial(t)
	t.Cleanup(func() { pubConn.Close() })
	published := make(chan error, 1)
	go func() { published <- publishCommands(ctx, pubCh, queue, n) }()

	kills, lastKill, lastApplied := 0, time.Now(), 0
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	// Under go test's own 10-minute limit, so that a stall is reported with
	// its figures rather than as a panic.
	deadline := time.After(8 * time.Minute)
	pubDone := false
	// The acks a consumer prints are not all seen: one killed after an ack
	// and before its line loses it. The run ends when every command is
	// applied, the queue has nothing ready and no ack came for 2 s.
	lastAcked, quietSince := -1, time.Now()
	for {
		select {
		case err := <-published:
			if err != nil {
				t.Fatal(err)
			}
			pubDone = true
			continue
		case <-tick.C:
		case <-deadline:
			t.Fatalf("after 8 minutes %d of %d applied", applied(t, pool), n)
		}
		got := applied(t, pool)
		if a := ackedTotal(); a != lastAcked {
			lastAcked, quietSince = a, time.Now()
		}
		if pubDone && got >= n && time.Since(quietSince) > 2*time.Second && ready(t, ch, queue) == 0 {
			break
		}
		if time.Since(lastKill) < *killEvery && got-lastApplied < n/20 || got >= n {
			continue
		}
		lastKill, lastApplied = time.Now(), got
		i := kills % len(consumers)
		kill(consumers[i])
		consumers[i] = startChild(t, "consumer", env, lines)
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
	mu.Lock()
	t.Logf("RabbitMQ: %d commands (%d published twice), %d consumer processes killed with SIGKILL in %s: %d applied, %d twice, %d lost, bank total %d (want %d); acks seen %v",
		n, n/10, kills, elapsed.Round(time.Second), distinct, rows-distinct, n-distinct, total, bankTotal, acked)
	mu.Unlock()
	if rows != n || distinct != n || total != bankTotal {
		t.Fatal("want every command applied once and the total unchanged")
	}
}

// publishCommands publishes n commands to the queue with publisher
// confirms, and a tenth of them again, as a publisher that retries after a
// lost answer does.
func publishCommands(ctx context.Context, ch *amqp.Channel, queue string, n int) error {
	if err := ch.Confirm(false); err != nil {
		return err
	}
	send := func(i int) error {
		id := fmt.Sprintf("transfer-%d", i)
		r := rand.New(rand.NewPCG(uint64(i), 7))
		body, _ := json.Marshal(transferCommand{From: r.IntN(100), To: r.IntN(100), Amount: 1 + r.Int64N(1000)})
		dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", queue, true, false, amqp.Publishing{
			MessageId: id, ContentType: "application/json", Body: body, DeliveryMode: amqp.Persistent,
		})
		if err != nil {
			return err
		}
		if ok, err := dc.WaitContext(ctx); err != nil || !ok {
			return fmt.Errorf("confirm of %s: %v %v", id, ok, err)
		}
		return nil
	}
	for i := range n {
		if err := send(i); err != nil {
			return err
		}
		if i%10 == 5 {
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

// ready returns the number of messages ready in the queue.
func ready(t *testing.T, ch *amqp.Channel, queue string) int {
	t.Helper()
	q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	return q.Messages
}
