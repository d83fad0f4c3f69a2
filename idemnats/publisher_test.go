package idemnats_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemconsume"
	"github.com/idemkit/idem/idemoutbox"
	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/internal/pgtest"
)

// poll calls cond every few milliseconds until it returns true, failing
// the test after the deadline.
func poll(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %s for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond) // a poll under a deadline
	}
}

func streamMsgs(t *testing.T, js jetstream.JetStream, name string) uint64 {
	t.Helper()
	s, err := js.Stream(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	return s.CachedInfo().State.Msgs
}

// The outbox relay publishing to JetStream is killed with SIGKILL while it
// publishes, again and again: every event is in the stream once, and the
// re-publishes of the events a killed relay had published but not marked
// are removed by JetStream's duplicate window, which reports them.
func TestOutboxRelayKilledWhilePublishing(t *testing.T) {
	const (
		n     = 2000
		kills = 5
		batch = 50
	)
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
	// The events come from a consumer: each command's handler enqueues
	// its event in the transaction that records the command.
	c, err := idemconsume.New(store, func(ctx context.Context, m *idemconsume.Message) error {
		_, err := idemoutbox.Enqueue(ctx, store, idemoutbox.EventParams{Purpose: "transfer.applied", Type: "transfer.applied", Payload: m.Body})
		return err
	}, &idemconsume.Config{Name: "ledger", Idem: &idem.Config{Logger: quiet}})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{}
	for i := range n {
		id := fmt.Sprintf("cmd-%d", i)
		if r := c.Handle(ctx, &idemconsume.Message{ID: id, Body: fmt.Appendf(nil, `{"transfer":%d}`, i)}); r.Outcome != idemconsume.OutcomeExecuted {
			t.Fatalf("%s: %+v", id, r)
		}
		want[idemoutbox.EventID(idem.ContextWithScope(ctx, idemstore.Scope{ClientID: "ledger", Key: id}), "transfer.applied")] = true
	}

	nc, js := connect(t, natsURL())
	t.Cleanup(nc.Close)
	stream := uniqueName("IDEMTEST_")
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: stream, Subjects: []string{stream + ".events"}, Storage: jetstream.FileStorage}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { js.DeleteStream(context.Background(), stream) })
	env := []string{"IDEM_TEST_DB=" + dbURL, "IDEM_TEST_NATS=" + natsURL(), "IDEM_TEST_SUBJECT=" + stream + ".events"}
	var (
		mu   sync.Mutex
		dups = map[string]int{}
	)
	lines := func(line string) {
		if k, v := splitLine(line); k == "duplicate" {
			mu.Lock()
			dups[v]++
			mu.Unlock()
		}
	}
	for range kills {
		before := streamMsgs(t, js, stream)
		relay := startChild(t, "relay", env, lines)
		// Kill it in the middle of a batch: some of the batch's events
		// are in the stream, and none is marked delivered.
		poll(t, time.Minute, "the relay to publish", func() bool {
			got := streamMsgs(t, js, stream) - before
			return got%batch != 0 || streamMsgs(t, js, stream) == n
		})
		kill(relay)
	}
	relay := startChild(t, "relay", env, lines)
	poll(t, 2*time.Minute, "the outbox to drain", func() bool {
		st, err := store.OutboxStats(ctx)
		return err == nil && st.Pending == 0
	})
	kill(relay)

	s, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	info := s.CachedInfo()
	seen := map[string]int{}
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		seen[m.Header.Get(jetstream.MsgIDHeader)]++
	}
	missing, twice := 0, 0
	for id := range want {
		switch seen[id] {
		case 0:
			missing++
		case 1:
		default:
			twice++
		}
	}
	mu.Lock()
	defer mu.Unlock()
	t.Logf("%d events, relay killed %d times while publishing: stream holds %d messages, %d distinct; %d missing, %d twice; JetStream reported %d re-publishes as duplicates",
		n, kills, info.State.Msgs, len(seen), missing, twice, len(dups))
	if info.State.Msgs != n || len(seen) != n || missing != 0 || twice != 0 {
		t.Fatal("want every event in the stream once")
	}
	if len(dups) == 0 {
		t.Error("no re-publish was reported: the relays were not killed between publishing and marking")
	}
}
