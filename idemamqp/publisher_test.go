package idemamqp_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemamqp"
	"github.com/idemkit/idem/idemconsume"
	"github.com/idemkit/idem/idemoutbox"
	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/internal/pgtest"
)

// The relay delivers an outbox's events to a queue through the publisher:
// each with its id as message-id, marked delivered after the confirm.
func TestPublisherDeliversOutbox(t *testing.T) {
	const n = 200
	ctx := context.Background()
	pool, store, err := openStore(ctx, pgtest.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if err := store.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
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
	conn, ch := dial(t)
	t.Cleanup(func() { conn.Close() })
	queue := uniqueName("idemtest.") + ".events"
	if _, err := ch.QueueDeclare(queue, false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ch.QueueDelete(queue, false, false, false) })

	pub, err := idemamqp.NewPublisher(idemamqp.DialURL(amqpURL()), &idemamqp.PublisherConfig{RoutingKey: queue})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pub.Close() })
	relay, err := idemoutbox.NewRelay(store, pub, &idemoutbox.RelayConfig{BatchSize: 50, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	for {
		n, err := relay.DeliverOnce(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
	}
	if st, err := store.OutboxStats(ctx); err != nil || st.Pending != 0 || st.Dead != 0 {
		t.Fatalf("outbox %+v, %v: want all delivered", st, err)
	}
	seen := map[string]int{}
	for {
		d, ok, err := ch.Get(queue, true)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			break
		}
		if d.Type != "transfer.applied" || d.ContentType != "application/json" {
			t.Fatalf("message %+v", d)
		}
		seen[d.MessageId]++
	}
	if len(seen) != n {
		t.Fatalf("%d distinct messages, want %d", len(seen), n)
	}
	for id, k := range seen {
		if !want[id] || k != 1 {
			t.Fatalf("message-id %s seen %d times, expected %v", id, k, want[id])
		}
	}

	// A broker that cannot route the event returns it: not delivered.
	lost, err := idemamqp.NewPublisher(idemamqp.DialURL(amqpURL()), &idemamqp.PublisherConfig{RoutingKey: uniqueName("idemtest.nowhere.")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lost.Close() })
	err = lost.Deliver(ctx, idemoutbox.Event{ID: "evt_1", Type: "t", Payload: []byte(`{}`)})
	var ret *idemamqp.ReturnedError
	if !errors.As(err, &ret) {
		t.Fatalf("Deliver to no queue: %v, want a ReturnedError", err)
	}
}
