package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"
)

func uniqueQueueName(prefix string) string {
	b := make([]byte, 6)
	rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

// queueBroker is a broker of the test's own names that paymentsd takes
// transfer commands from and publishes its events to.
type queueBroker struct {
	transfersFrom, eventsTo string
	// publish sends a command with the id and the token (none when "").
	publish func(t *testing.T, id, token, body string)
	// events returns the ids of the events published so far.
	events func(t *testing.T) []string
}

func natsQueueBroker(t *testing.T) *queueBroker {
	nc, err := nats.Connect("nats://127.0.0.1:4222")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, _ := jetstream.New(nc)
	ts, es := uniqueQueueName("PAYTEST_T"), uniqueQueueName("PAYTEST_E")
	t.Cleanup(func() {
		js.DeleteStream(context.Background(), ts)
		js.DeleteStream(context.Background(), es)
	})
	return &queueBroker{
		transfersFrom: "nats://127.0.0.1:4222/" + ts + ".cmd?stream=" + ts,
		eventsTo:      "nats://127.0.0.1:4222/" + es + ".events?stream=" + es,
		publish: func(t *testing.T, id, token, body string) {
			h := nats.Header{}
			h.Set(jetstream.MsgIDHeader, id)
			h.Set("Content-Type", "application/json")
			if token != "" {
				h.Set("Authorization", "Bearer "+token)
			}
			if _, err := js.PublishMsg(context.Background(), &nats.Msg{Subject: ts + ".cmd", Data: []byte(body), Header: h}); err != nil {
				t.Fatal(err)
			}
		},
		events: func(t *testing.T) []string {
			s, err := js.Stream(context.Background(), es)
			if err != nil {
				return nil // not created yet
			}
			var ids []string
			for seq := uint64(1); seq <= s.CachedInfo().State.LastSeq; seq++ {
				m, err := s.GetMsg(context.Background(), seq)
				if err != nil {
					t.Fatal(err)
				}
				ids = append(ids, m.Header.Get(jetstream.MsgIDHeader))
			}
			return ids
		},
	}
}

func amqpQueueBroker(t *testing.T) *queueBroker {
	const url = "amqp://guest:guest@127.0.0.1:5672/"
	conn, err := amqp.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	tq, eq := uniqueQueueName("paytest.transfers."), uniqueQueueName("paytest.events.")
	if _, err := ch.QueueDeclare(eq, false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ch.QueueDelete(tq, false, false, false)
		ch.QueueDelete(eq, false, false, false)
	})
	var seen []string
	return &queueBroker{
		transfersFrom: url + "?queue=" + tq,
		eventsTo:      url + "?routing_key=" + eq,
		publish: func(t *testing.T, id, token, body string) {
			h := amqp.Table{}
			if token != "" {
				h["Authorization"] = "Bearer " + token
			}
			if err := ch.PublishWithContext(context.Background(), "", tq, false, false, amqp.Publishing{
				MessageId: id, ContentType: "application/json", Headers: h, Body: []byte(body), DeliveryMode: amqp.Persistent,
			}); err != nil {
				t.Fatal(err)
			}
		},
		events: func(t *testing.T) []string {
			for {
				d, ok, err := ch.Get(eq, true)
				if err != nil {
					t.Fatal(err)
				}
				if !ok {
					return seen
				}
				seen = append(seen, d.MessageId)
			}
		},
	}
}

// TestRunTakesTransfersFromAQueue: paymentsd applies transfer commands
// from JetStream and from RabbitMQ with the ledger's rules, once per key
// and client whether the command comes from the queue or over HTTP, and
// publishes the transfers' events to the broker.
func TestRunTakesTransfersFromAQueue(t *testing.T) {
	for name, newBroker := range map[string]func(*testing.T) *queueBroker{"JetStream": natsQueueBroker, "RabbitMQ": amqpQueueBroker} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := newBroker(t)
			db := "sqlite:" + filepath.Join(t.TempDir(), "p.db")
			p := runInProcess(t, "-addr", "127.0.0.1:0", "-admin-addr", "off", "-db", db, "-tokens", "sk_a=alice",
				"-transfers-from", b.transfersFrom, "-events-to", b.eventsTo)
			base := waitListening(t, p.stdout.lines, "paymentsd")
			client := &http.Client{Timeout: 20 * time.Second}
			send := func(method, path, key, body string) (int, map[string]any, http.Header) {
				t.Helper()
				req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
				req.Header.Set("Authorization", "Bearer sk_a")
				if body != "" {
					req.Header.Set("Content-Type", "application/json")
				}
				if key != "" {
					req.Header.Set("Idempotency-Key", key)
				}
				res, err := client.Do(req)
				if err != nil {
					t.Fatalf("%s %s: %v", method, path, err)
				}
				defer res.Body.Close()
				raw, _ := io.ReadAll(res.Body)
				var v map[string]any
				json.Unmarshal(raw, &v)
				return res.StatusCode, v, res.Header
			}
			var ids []string
			for i, balance := range []int{1000, 0} {
				status, a, _ := send(http.MethodPost, "/v1/accounts", fmt.Sprintf("acct-%d", i), fmt.Sprintf(`{"currency":"usd","balance":%d}`, balance))
				if status != http.StatusCreated {
					t.Fatalf("open account: %d %v", status, a)
				}
				ids = append(ids, a["id"].(string))
			}
			balances := func() [2]float64 {
				var out [2]float64
				for i := range ids {
					_, a, _ := send(http.MethodGet, "/v1/accounts/"+ids[i], "", "")
					out[i], _ = a["balance"].(float64)
				}
				return out
			}
			waitBalances := func(want [2]float64) {
				t.Helper()
				deadline := time.Now().Add(time.Minute)
				for balances() != want {
					if time.Now().After(deadline) {
						t.Fatalf("balances %v, want %v", balances(), want)
					}
					time.Sleep(20 * time.Millisecond) // a poll under a deadline
				}
			}
			transfer := func(amount int) string {
				return fmt.Sprintf(`{"from":%q,"to":%q,"amount":%d}`, ids[0], ids[1], amount)
			}

			// A command, then a request with the same key: one transfer,
			// and the request gets the command's answer.
			b.publish(t, "tr-1", "sk_a", transfer(100))
			waitBalances([2]float64{900, 100})
			status, tr, h := send(http.MethodPost, "/v1/transfers", "tr-1", transfer(100))
			if status != http.StatusCreated || h.Get("Idempotent-Replayed") != "true" || tr["amount"] != 100.0 {
				t.Fatalf("request after the command: %d %v %v", status, tr, h)
			}
			// A request, then a command with the same key, then a command
			// with a key of its own: the second command is applied, the
			// first is not.
			if status, _, _ := send(http.MethodPost, "/v1/transfers", "tr-2", transfer(200)); status != http.StatusCreated {
				t.Fatalf("request: %d", status)
			}
			b.publish(t, "tr-2", "sk_a", transfer(200))
			b.publish(t, "tr-3", "sk_a", transfer(300))
			waitBalances([2]float64{400, 600})
			// Refused commands are not applied: an unknown token, an
			// overdraft, a changed body under a used key.
			b.publish(t, "tr-4", "sk_unknown", transfer(1))
			b.publish(t, "tr-5", "sk_a", transfer(401))
			b.publish(t, "tr-3", "sk_a", transfer(999)) // JetStream's own window drops it first
			b.publish(t, "tr-6", "sk_a", transfer(2))
			waitBalances([2]float64{398, 602}) // tr-6 is behind the others
			// Three transfers, three events, each published once.
			deadline := time.Now().Add(time.Minute)
			for len(b.events(t)) < 4 && time.Now().Before(deadline) {
				time.Sleep(20 * time.Millisecond) // a poll under a deadline
			}
			events := b.events(t)
			distinct := map[string]bool{}
			for _, id := range events {
				distinct[id] = true
			}
			if len(events) != 4 || len(distinct) != 4 {
				t.Fatalf("events %v, want 4 distinct: tr-1, tr-2, tr-3, tr-6", events)
			}
			if err := p.stop(t); err != nil {
				t.Fatalf("Run returned %v", err)
			}
		})
	}
}

// TestRunRefusesBadQueueURLs: a malformed -transfers-from or -events-to
// stops paymentsd at start with the reason.
func TestRunRefusesBadQueueURLs(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ flag, url, want string }{
		{"-transfers-from", "http://127.0.0.1:4222/x", "want nats or amqp"},
		{"-transfers-from", "nats://127.0.0.1:4222", "name the subject"},
		{"-transfers-from", "amqp://guest:guest@127.0.0.1:5672/", "name the queue"},
		{"-events-to", "kafka://127.0.0.1:9092/x", "want nats or amqp"},
	} {
		db := "sqlite:" + filepath.Join(t.TempDir(), "p.db")
		err := Run(context.Background(), []string{"-addr", "127.0.0.1:0", "-admin-addr", "off", "-db", db, "-tokens", "sk_a=alice", tt.flag, tt.url}, io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s %s: %v, want an error with %q", tt.flag, tt.url, err, tt.want)
		}
	}
}
