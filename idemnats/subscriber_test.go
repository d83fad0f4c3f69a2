package idemnats_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemkit/idem/idemconsume"
	"github.com/idemkit/idem/idemconsume/idemconsumetest"
	"github.com/idemkit/idem/idemnats"
)

// natsURL is the shared JetStream server of the project's machines.
func natsURL() string {
	if u := os.Getenv("IDEM_NATS_URL"); u != "" {
		return u
	}
	return "nats://127.0.0.1:4222"
}

func connect(t testing.TB, url string) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		t.Fatalf("connect to NATS at %s: %v", url, err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return nc, js
}

func uniqueName(prefix string) string {
	b := make([]byte, 6)
	rand.Read(b)
	return prefix + strings.ToUpper(hex.EncodeToString(b))
}

// broker is a stream of the test's own on the shared server: commands on
// <stream>.cmd, dead letters on <stream>.dead.
type broker struct {
	url    string
	js     jetstream.JetStream
	stream string
}

// commandIDHeader is the id header of the suite's commands: with the
// stream's own deduplication out of the way, every copy of a command
// reaches the consumers, as a re-send after the duplicate window does.
const commandIDHeader = "Command-Id"

func newBroker(t *testing.T, url string) *broker {
	t.Helper()
	nc, js := connect(t, url)
	b := &broker{url: url, js: js, stream: uniqueName("IDEMTEST_")}
	ctx := context.Background()
	_, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name: b.stream, Subjects: []string{b.stream + ".cmd", b.stream + ".dead"}, Storage: jetstream.FileStorage,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := js.DeleteStream(context.Background(), b.stream); err != nil {
			t.Errorf("delete stream %s: %v", b.stream, err)
		}
		nc.Close()
	})
	return b
}

func (b *broker) Publish(ctx context.Context, id string, body []byte) error {
	h := nats.Header{}
	h.Set(commandIDHeader, id)
	h.Set("Content-Type", "application/json")
	_, err := b.js.PublishMsg(ctx, &nats.Msg{Subject: b.stream + ".cmd", Data: body, Header: h})
	return err
}

type instance struct {
	nc     *nats.Conn
	cancel context.CancelFunc
}

func (i *instance) Kill() {
	i.cancel()
	i.nc.Close()
}

func (b *broker) Start(t *testing.T, group string, c *idemconsume.Consumer) idemconsumetest.Instance {
	nc, js := connect(t, b.url)
	ctx := context.Background()
	pull, err := js.CreateOrUpdateConsumer(ctx, b.stream, jetstream.ConsumerConfig{
		Durable: group, AckPolicy: jetstream.AckExplicitPolicy, AckWait: 3 * time.Second,
		FilterSubject: b.stream + ".cmd", MaxDeliver: -1,
	})
	if err != nil {
		nc.Close()
		t.Error(err)
		return &instance{nc: nc, cancel: func() {}}
	}
	sub, err := idemnats.NewSubscriber(c, js, pull, &idemnats.SubscriberConfig{
		Batch: 1, FetchWait: 500 * time.Millisecond, IDHeader: commandIDHeader,
		DeadLetterSubject: b.stream + ".dead", Logger: quiet,
	})
	if err != nil {
		nc.Close()
		t.Error(err)
		return &instance{nc: nc, cancel: func() {}}
	}
	runCtx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { sub.Run(runCtx) })
	t.Cleanup(func() { cancel(); nc.Close(); wg.Wait() })
	return &instance{nc: nc, cancel: cancel}
}

func (b *broker) DeadLetters(ctx context.Context) ([]idemconsumetest.DeadLetter, error) {
	s, err := b.js.Stream(ctx, b.stream)
	if err != nil {
		return nil, err
	}
	var out []idemconsumetest.DeadLetter
	last := s.CachedInfo().State.LastSeq
	for seq := uint64(1); seq <= last; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if m.Subject != b.stream+".dead" {
			continue
		}
		dl := idemconsumetest.DeadLetter{ID: m.Header.Get(idemnats.HeaderMessageID), Reason: m.Header.Get(idemnats.HeaderDeadLetterReason)}
		if f := m.Header.Get(idemnats.HeaderDeadLetterFields); f != "" {
			dl.Fields = strings.Split(f, ",")
		}
		out = append(out, dl)
	}
	return out, nil
}

func (b *broker) Settled(ctx context.Context, group string) (bool, error) {
	c, err := b.js.Consumer(ctx, b.stream, group)
	if err != nil {
		return false, err
	}
	info, err := c.Info(ctx)
	if err != nil {
		return false, err
	}
	return info.NumPending == 0 && info.NumAckPending == 0, nil
}

func TestConformance(t *testing.T) {
	for name, env := range map[string]func(*testing.T) idemconsumetest.Env{"PostgreSQL": pgEnv, "SQLite": sqliteEnv} {
		t.Run(name, func(t *testing.T) {
			idemconsumetest.Run(t, idemconsumetest.Harness{
				NewEnv:    env,
				NewBroker: func(t *testing.T) idemconsumetest.Broker { return newBroker(t, natsURL()) },
			})
		})
	}
}
