// Package idemconsumetest is the conformance suite that every adapter of
// package idemconsume passes against its real broker: the failures of the
// deduplicators before it, each as a test.
package idemconsumetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemconsume"
	"github.com/idemkit/idem/idemstore"
)

// Env is a store and the business write that handlers make in its
// transaction.
type Env struct {
	// Store keeps the keys.
	Store idemstore.Store
	// Apply writes one effect named name through the transaction that ctx
	// carries, as an atomic-mode handler does. It must not deduplicate:
	// two calls that commit are two effects.
	Apply func(ctx context.Context, name string) error
	// Applied counts the committed effects named name.
	Applied func(ctx context.Context, name string) (int, error)
}

// Broker is an adapter on its real broker, with names (streams, queues,
// consumers) of its own.
type Broker interface {
	// Publish publishes a message with the id and the JSON body, past any
	// deduplication of the broker's own, so that every copy reaches the
	// consumers: a re-send after the broker's window.
	Publish(ctx context.Context, id string, body []byte) error
	// Start runs c on the broker's consumer group named group (a durable
	// consumer, a queue), which receives every message published after
	// the first Start of the group, until the instance is killed or the
	// test ends. Instances of one group share its messages. It hands an
	// instance at most one unacknowledged message at a time.
	Start(t *testing.T, group string, c *idemconsume.Consumer) Instance
	// DeadLetters returns the messages dead-lettered so far.
	DeadLetters(ctx context.Context) ([]DeadLetter, error)
	// Settled reports whether the broker holds no message for the group
	// that is still to be delivered or acknowledged: every message was
	// acked, or dead-lettered for good.
	Settled(ctx context.Context, group string) (bool, error)
}

// Instance is one running subscriber.
type Instance interface {
	// Kill drops the instance's connection at once, without answering the
	// messages it holds, as a process that crashes does; it returns when
	// the connection is closed.
	Kill()
}

// DeadLetter is a message on the dead-letter path.
type DeadLetter struct {
	ID     string
	Reason string
	Fields []string
}

// Harness makes what each test of the suite needs, fresh for each.
type Harness struct {
	NewEnv    func(t *testing.T) Env
	NewBroker func(t *testing.T) Broker
	// Timeout bounds each wait of the suite. Defaults to a minute.
	Timeout time.Duration
}

// Run runs the suite.
func Run(t *testing.T, h Harness) {
	if h.Timeout == 0 {
		h.Timeout = time.Minute
	}
	tests := []struct {
		name string
		fn   func(*testing.T, Harness)
	}{
		{"FailedHandlerRunsAgainOnRedelivery", testFailedHandler},
		{"CrashBetweenCommitAndAckAppliesOnce", testCrashBeforeAck},
		{"TwoInstancesRunADuplicateOnce", testTwoInstances},
		{"TwoConsumersOfOneIDRunItOnceEach", testTwoConsumers},
		{"ChangedPayloadIsDeadLetteredWithItsReason", testChangedPayload},
		{"DuplicatesAndCrashesApplyEachOnce", testManyWithCrashes},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { tt.fn(t, h) })
	}
}

// recorder counts results and handler runs, and lets a test wait for
// counts.
type recorder struct {
	mu      sync.Mutex
	changed chan struct{}
	results map[idemconsume.Outcome]int
	runs    map[string]int
	hook    func(idemconsume.Result) // called after each result, outside mu
}

func newRecorder() *recorder {
	return &recorder{changed: make(chan struct{}), results: map[idemconsume.Outcome]int{}, runs: map[string]int{}}
}

func (r *recorder) Message(_ context.Context, _ string, res idemconsume.Result, _ bool) {
	r.mu.Lock()
	r.results[res.Outcome]++
	hook := r.hook
	r.notify()
	r.mu.Unlock()
	if hook != nil {
		hook(res)
	}
}

func (r *recorder) ran(id string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.runs[id]++
	r.notify()
	return r.runs[id]
}

func (r *recorder) notify() {
	close(r.changed)
	r.changed = make(chan struct{})
}

// wait waits until cond, read under the lock, holds.
func (r *recorder) wait(t *testing.T, h Harness, what string, cond func() bool) {
	t.Helper()
	deadline := time.NewTimer(h.Timeout)
	defer deadline.Stop()
	for {
		r.mu.Lock()
		ok, ch := cond(), r.changed
		r.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-ch:
		case <-deadline.C:
			r.mu.Lock()
			defer r.mu.Unlock()
			t.Fatalf("waited %s for %s; results %v, runs %v", h.Timeout, what, r.results, r.runs)
		}
	}
}

func newConsumer(t *testing.T, env Env, name string, mode idem.Mode, rec *recorder, h idemconsume.Handler) *idemconsume.Consumer {
	t.Helper()
	c, err := idemconsume.New(env.Store, h, &idemconsume.Config{
		Name: name, Metrics: rec, RetryDelay: 100 * time.Millisecond,
		Idem: &idem.Config{Mode: mode, LockTimeout: 2 * time.Second, Logger: quietLogger},
	})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func body(id string, amount int) []byte {
	return fmt.Appendf(nil, `{"id":%q,"from":"alice","to":"bob","amount":%d}`, id, amount)
}

func applied(t *testing.T, env Env, name string) int {
	t.Helper()
	n, err := env.Applied(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// Watermill's deduplicator records the id before the handler runs, so a
// handler that fails is then dropped as a duplicate.
func testFailedHandler(t *testing.T, h Harness) {
	env, b, rec := h.NewEnv(t), h.NewBroker(t), newRecorder()
	ctx := context.Background()
	c := newConsumer(t, env, "ledger", idem.ModeAtomic, rec, func(ctx context.Context, m *idemconsume.Message) error {
		if err := env.Apply(ctx, m.ID); err != nil {
			return err
		}
		if rec.ran(m.ID) == 1 {
			return errors.New("downstream failed") // its write rolls back
		}
		return nil
	})
	b.Start(t, "ledger", c)
	if err := b.Publish(ctx, "cmd-1", body("cmd-1", 100)); err != nil {
		t.Fatal(err)
	}
	rec.wait(t, h, "the redelivery to run", func() bool { return rec.results[idemconsume.OutcomeExecuted] == 1 })
	if n := applied(t, env, "cmd-1"); n != 1 {
		t.Fatalf("applied %d times, want 1", n)
	}
	if rec.results[idemconsume.OutcomeFailed] != 1 || rec.runs["cmd-1"] != 2 {
		t.Fatalf("results %v, runs %v: want one failure and two runs", rec.results, rec.runs)
	}
}

// Powertools keeps its record apart from the handler's writes: a crash
// between them re-runs the work.
func testCrashBeforeAck(t *testing.T, h Harness) {
	env, b, rec := h.NewEnv(t), h.NewBroker(t), newRecorder()
	ctx := context.Background()
	c := newConsumer(t, env, "ledger", idem.ModeAtomic, rec, func(ctx context.Context, m *idemconsume.Message) error {
		rec.ran(m.ID)
		return env.Apply(ctx, m.ID)
	})
	executed, killed := make(chan struct{}), make(chan struct{})
	var once sync.Once
	rec.hook = func(r idemconsume.Result) {
		if r.Outcome == idemconsume.OutcomeExecuted {
			once.Do(func() {
				close(executed) // committed; the ack is not sent yet
				<-killed
			})
		}
	}
	first := b.Start(t, "ledger", c)
	if err := b.Publish(ctx, "cmd-1", body("cmd-1", 100)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-executed:
	case <-time.After(h.Timeout):
		t.Fatal("the message was not handled")
	}
	first.Kill()
	close(killed)
	b.Start(t, "ledger", c)
	rec.wait(t, h, "the redelivery", func() bool { return rec.results[idemconsume.OutcomeDuplicate] >= 1 })
	if n := applied(t, env, "cmd-1"); n != 1 {
		t.Fatalf("applied %d times, want 1", n)
	}
	if rec.runs["cmd-1"] != 1 {
		t.Fatalf("handler ran %d times, want 1", rec.runs["cmd-1"])
	}
}

// NServiceBus's outbox lets two instances that receive the same duplicate
// both run the handler.
func testTwoInstances(t *testing.T, h Harness) {
	env, b, rec := h.NewEnv(t), h.NewBroker(t), newRecorder()
	ctx := context.Background()
	inFlight := make(chan struct{})
	var once sync.Once
	rec.hook = func(r idemconsume.Result) {
		if r.Outcome == idemconsume.OutcomeInFlight {
			once.Do(func() { close(inFlight) })
		}
	}
	// The two-phase mode commits the claim first, so the second instance
	// finds the key held while the first runs.
	c := newConsumer(t, env, "ledger", idem.ModeTwoPhase, rec, func(ctx context.Context, m *idemconsume.Message) error {
		if rec.ran(m.ID) == 1 {
			select {
			case <-inFlight:
			case <-time.After(h.Timeout):
				return errors.New("the duplicate never reached the second instance")
			}
		}
		return nil
	})
	b.Start(t, "ledger", c)
	b.Start(t, "ledger", c)
	for range 2 {
		if err := b.Publish(ctx, "cmd-1", body("cmd-1", 100)); err != nil {
			t.Fatal(err)
		}
	}
	rec.wait(t, h, "both copies to be acked", func() bool {
		return rec.results[idemconsume.OutcomeExecuted]+rec.results[idemconsume.OutcomeDuplicate] == 2
	})
	if rec.runs["cmd-1"] != 1 || rec.results[idemconsume.OutcomeInFlight] < 1 || rec.results[idemconsume.OutcomeExecuted] != 1 {
		t.Fatalf("results %v, runs %v: want one run, one in flight", rec.results, rec.runs)
	}
}

// MassTransit's inbox, keyed on the message id alone, dropped the message
// for a second consumer.
func testTwoConsumers(t *testing.T, h Harness) {
	env, b := h.NewEnv(t), h.NewBroker(t)
	ctx := context.Background()
	recs := map[string]*recorder{}
	for _, name := range []string{"ledger", "notifier"} {
		rec := newRecorder()
		recs[name] = rec
		c := newConsumer(t, env, name, idem.ModeAtomic, rec, func(ctx context.Context, m *idemconsume.Message) error {
			rec.ran(m.ID)
			return env.Apply(ctx, name+"/"+m.ID)
		})
		b.Start(t, name, c)
	}
	for range 2 {
		if err := b.Publish(ctx, "cmd-1", body("cmd-1", 100)); err != nil {
			t.Fatal(err)
		}
	}
	for name, rec := range recs {
		rec.wait(t, h, name+" to ack both copies", func() bool {
			return rec.results[idemconsume.OutcomeExecuted] == 1 && rec.results[idemconsume.OutcomeDuplicate] == 1
		})
		if n := applied(t, env, name+"/cmd-1"); n != 1 || rec.runs["cmd-1"] != 1 {
			t.Fatalf("%s: applied %d, ran %d; want 1 and 1", name, n, rec.runs["cmd-1"])
		}
	}
}

// The same id with another payload is a publisher's bug: it is not run,
// and goes to the dead letters with the fields that differ.
func testChangedPayload(t *testing.T, h Harness) {
	env, b, rec := h.NewEnv(t), h.NewBroker(t), newRecorder()
	ctx := context.Background()
	c := newConsumer(t, env, "ledger", idem.ModeAtomic, rec, func(ctx context.Context, m *idemconsume.Message) error {
		rec.ran(m.ID)
		return env.Apply(ctx, m.ID)
	})
	b.Start(t, "ledger", c)
	if err := b.Publish(ctx, "cmd-1", body("cmd-1", 100)); err != nil {
		t.Fatal(err)
	}
	rec.wait(t, h, "the first to run", func() bool { return rec.results[idemconsume.OutcomeExecuted] == 1 })
	if err := b.Publish(ctx, "cmd-1", body("cmd-1", 900)); err != nil {
		t.Fatal(err)
	}
	rec.wait(t, h, "the changed one to be dead-lettered", func() bool { return rec.results[idemconsume.OutcomeMismatch] == 1 })
	deadline := time.Now().Add(h.Timeout)
	for {
		dls, err := b.DeadLetters(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(dls) == 1 {
			dl := dls[0]
			if dl.ID != "cmd-1" || dl.Reason == "" || !slices.Equal(dl.Fields, []string{"/amount"}) {
				t.Fatalf("dead letter %+v: want cmd-1, a reason, and /amount", dl)
			}
			break
		}
		if len(dls) > 1 || time.Now().After(deadline) {
			t.Fatalf("dead letters %+v, want 1", dls)
		}
		time.Sleep(50 * time.Millisecond) // a poll of the broker, under a deadline
	}
	settle(t, h, b, "ledger")
	if n := applied(t, env, "cmd-1"); n != 1 || rec.runs["cmd-1"] != 1 || rec.results[idemconsume.OutcomeMismatch] != 1 {
		t.Fatalf("applied %d, ran %d, results %v; want 1, 1 and one mismatch", n, rec.runs["cmd-1"], rec.results)
	}
}

// settle waits until the broker holds nothing more for the group: a
// dead-lettered message is not delivered again.
func settle(t *testing.T, h Harness, b Broker, group string) {
	t.Helper()
	deadline := time.Now().Add(h.Timeout)
	for {
		ok, err := b.Settled(context.Background(), group)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the broker still holds messages for %s after %s", group, h.Timeout)
		}
		time.Sleep(50 * time.Millisecond) // a poll of the broker, under a deadline
	}
}

// Many commands, a tenth of them published twice, with instances killed
// between commit and ack along the way: each is applied once, none lost.
func testManyWithCrashes(t *testing.T, h Harness) {
	const n, every = 200, 40
	env, b, rec := h.NewEnv(t), h.NewBroker(t), newRecorder()
	ctx := context.Background()
	c := newConsumer(t, env, "ledger", idem.ModeAtomic, rec, func(ctx context.Context, m *idemconsume.Message) error {
		rec.ran(m.ID)
		return env.Apply(ctx, m.ID)
	})
	kill := make(chan chan struct{})
	rec.hook = func(r idemconsume.Result) {
		if r.Outcome != idemconsume.OutcomeExecuted {
			return
		}
		rec.mu.Lock()
		k := rec.results[idemconsume.OutcomeExecuted]%every == 0
		rec.mu.Unlock()
		if k {
			done := make(chan struct{})
			kill <- done // committed, not acked: the test kills this instance
			<-done
		}
	}
	var (
		mu    sync.Mutex
		kills int
	)
	inst := b.Start(t, "ledger", c)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case done := <-kill:
				mu.Lock()
				inst.Kill()
				kills++
				close(done)
				inst = b.Start(t, "ledger", c)
				mu.Unlock()
			case <-stop:
				return
			}
		}
	})
	defer func() { close(stop); wg.Wait() }()
	for i := range n {
		id := fmt.Sprintf("cmd-%d", i)
		copies := 1
		if i%10 == 0 {
			copies = 2
		}
		for range copies {
			if err := b.Publish(ctx, id, body(id, 100+i)); err != nil {
				t.Fatal(err)
			}
		}
	}
	rec.wait(t, h, "every command to run", func() bool { return rec.results[idemconsume.OutcomeExecuted] == n })
	mu.Lock()
	// Each command killed before its ack comes back, as do the copies.
	want := n/10 + kills
	mu.Unlock()
	rec.wait(t, h, "the redeliveries", func() bool { return rec.results[idemconsume.OutcomeDuplicate] >= want })
	settle(t, h, b, "ledger")
	for i := range n {
		id := fmt.Sprintf("cmd-%d", i)
		if got := applied(t, env, id); got != 1 {
			t.Fatalf("%s applied %d times, want 1", id, got)
		}
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	t.Logf("%d commands, %d copies, %d instances killed between commit and ack: results %v", n, n/10, want-n/10, rec.results)
}
