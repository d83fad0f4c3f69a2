package idemnats

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemkit/idem/idemconsume"
)

// Defaults of [SubscriberConfig].
const (
	BatchDefault       = 32
	FetchWaitDefault   = 5 * time.Second
	ParallelismDefault = 1
)

// Headers the subscriber reads and writes.
const (
	// HeaderMsgID is JetStream's publish deduplication header; its value is
	// the message's id, the idempotency key.
	HeaderMsgID = jetstream.MsgIDHeader
	// HeaderDeadLetterReason carries, on a dead letter, why the message
	// was dead-lettered.
	HeaderDeadLetterReason = "Idem-Dead-Letter-Reason"
	// HeaderDeadLetterFields carries, on a dead letter of a changed
	// payload, the fields that differ, comma-separated JSON pointers.
	HeaderDeadLetterFields = "Idem-Dead-Letter-Fields"
	// HeaderDeadLetterOutcome carries the [idemconsume.Outcome] of a dead
	// letter.
	HeaderDeadLetterOutcome = "Idem-Dead-Letter-Outcome"
	// HeaderMessageID carries, on a dead letter, the message's id: its
	// Nats-Msg-Id is not kept, so that the dead-letter stream keeps every
	// copy.
	HeaderMessageID = "Idem-Message-Id"
	// HeaderConsumer carries the name of the consumer that dead-lettered.
	HeaderConsumer = "Idem-Consumer"
)

// SubscriberConfig configures a [Subscriber].
type SubscriberConfig struct {
	// Batch is the most messages one Fetch takes. Defaults to
	// BatchDefault (32).
	Batch int
	// FetchWait is how long a Fetch waits for its first message. Defaults
	// to FetchWaitDefault (5 s).
	FetchWait time.Duration
	// Parallelism is how many messages of a batch are handled at once.
	// Defaults to ParallelismDefault (1).
	Parallelism int
	// IDHeader names the header that carries a message's id. Defaults to
	// Nats-Msg-Id, which JetStream also deduplicates publishing by within
	// the stream's duplicate window; name another header when publishers
	// set their own.
	IDHeader string
	// UseSequence takes the stream sequence as the id of a message that
	// has no id header, written "<stream>:<sequence>". It makes
	// redeliveries of one stored message idempotent, but not two
	// publications of one command, which get two sequences. Without it a
	// message without one is dead-lettered as malformed. Defaults
	// to false.
	UseSequence bool
	// Client returns the scope's client of a message; "" means the
	// consumer's name. Defaults to none: every key is scoped by the
	// consumer.
	Client func(msg jetstream.Msg) string
	// DeadLetterSubject receives a copy of each dead-lettered message,
	// with its headers and the Idem-Dead-Letter-* headers, published to
	// JetStream (so it must be a subject of a stream) before the message
	// is terminated. Defaults to "": the message is only terminated, which
	// JetStream reports in its $JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED
	// advisory, and the reason is in the subscriber's log.
	DeadLetterSubject string
	// Logger receives failed acks and dead letters. Defaults to
	// slog.Default().
	Logger *slog.Logger
}

// Subscriber runs an [idemconsume.Consumer] on a JetStream pull consumer:
// it fetches batches, hands each message to the consumer, and acks a
// message only after the consumer committed it (or found it completed),
// naks it with the consumer's delay, or terminates it to its dead-letter
// subject.
//
// The pull consumer must use AckExplicitPolicy. Its AckWait is how long
// JetStream waits for the ack before it delivers the message again; while
// a message is handled the subscriber tells JetStream it is in progress
// every AckWait/2, so AckWait bounds how long a dead subscriber holds a
// message, not how long a handler may run. A redelivery that meets a
// handler still running is not run: it is naked with what is left of the
// lease (the two-phase mode's idem.Config.LockTimeout, 1 s in the atomic
// mode). Keep MaxDeliver unlimited (-1) or large: a message naked while
// another delivery holds its key counts a delivery.
type Subscriber struct {
	consumer *idemconsume.Consumer
	js       jetstream.JetStream
	pull     jetstream.Consumer
	cfg      SubscriberConfig
	ackWait  time.Duration
}

// NewSubscriber returns a subscriber that runs consumer on pull, a pull
// consumer of js.
func NewSubscriber(consumer *idemconsume.Consumer, js jetstream.JetStream, pull jetstream.Consumer, cfg *SubscriberConfig) (*Subscriber, error) {
	if consumer == nil || js == nil || pull == nil {
		return nil, errors.New("idemnats: a consumer, a JetStream and a pull consumer are required")
	}
	c := SubscriberConfig{}
	if cfg != nil {
		c = *cfg
	}
	if c.Batch < 0 || c.FetchWait < 0 || c.Parallelism < 0 {
		return nil, errors.New("idemnats: SubscriberConfig fields must not be negative")
	}
	if c.Batch == 0 {
		c.Batch = BatchDefault
	}
	if c.FetchWait == 0 {
		c.FetchWait = FetchWaitDefault
	}
	if c.Parallelism == 0 {
		c.Parallelism = ParallelismDefault
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.IDHeader == "" {
		c.IDHeader = HeaderMsgID
	}
	info := pull.CachedInfo()
	if info == nil {
		return nil, errors.New("idemnats: the pull consumer has no info")
	}
	if info.Config.AckPolicy != jetstream.AckExplicitPolicy {
		return nil, fmt.Errorf("idemnats: consumer %q must use AckExplicitPolicy, so that a message is acked only after its commit", info.Name)
	}
	return &Subscriber{consumer: consumer, js: js, pull: pull, cfg: c, ackWait: info.Config.AckWait}, nil
}

// Delivery is what became of one message of a batch.
type Delivery struct {
	// ID is the message's id ("" when it had none).
	ID string
	// Sequence is the message's stream sequence.
	Sequence uint64
	// NumDelivered counts the deliveries of the message, this one
	// included.
	NumDelivered uint64
	// Result is what the consumer did with it.
	Result idemconsume.Result
	// AckErr is the error of the ack, nak or termination sent for it.
	AckErr error
}

// Run fetches and handles batches until ctx ends, then returns nil. A
// Fetch that fails is logged and tried again after FetchWait.
func (s *Subscriber) Run(ctx context.Context) error {
	for ctx.Err() == nil {
		if _, err := s.FetchOnce(ctx); err != nil && ctx.Err() == nil {
			s.cfg.Logger.WarnContext(ctx, "idemnats: fetch failed", "err", err, "consumer", s.consumer.Name())
			t := time.NewTimer(s.cfg.FetchWait)
			select {
			case <-ctx.Done():
			case <-t.C:
			}
			t.Stop()
		}
	}
	return nil
}

// FetchOnce fetches one batch, waiting up to FetchWait for its first
// message, handles its messages and returns what became of each, in
// order of arrival.
func (s *Subscriber) FetchOnce(ctx context.Context) ([]Delivery, error) {
	wait, cancel := context.WithTimeout(ctx, s.cfg.FetchWait)
	defer cancel()
	batch, err := s.pull.Fetch(s.cfg.Batch, jetstream.FetchContext(wait))
	if err != nil {
		return nil, err
	}
	var (
		out []Delivery
		mu  sync.Mutex
		wg  sync.WaitGroup
		sem = make(chan struct{}, s.cfg.Parallelism)
	)
	for msg := range batch.Messages() {
		i := len(out)
		out = append(out, Delivery{})
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			d := s.handle(ctx, msg)
			mu.Lock()
			out[i] = d
			mu.Unlock()
		})
	}
	wg.Wait()
	if err := batch.Error(); err != nil && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, nats.ErrTimeout) && !errors.Is(err, jetstream.ErrNoMessages) {
		return out, err
	}
	return out, nil
}

// handle handles one message and acks, naks or terminates it.
func (s *Subscriber) handle(ctx context.Context, msg jetstream.Msg) Delivery {
	var d Delivery
	md, err := msg.Metadata()
	if err == nil {
		d.Sequence, d.NumDelivered = md.Sequence.Stream, md.NumDelivered
	}
	d.ID = msg.Headers().Get(s.cfg.IDHeader)
	if d.ID == "" && s.cfg.UseSequence && md != nil {
		d.ID = md.Stream + ":" + strconv.FormatUint(md.Sequence.Stream, 10)
	}
	m := &idemconsume.Message{
		ID: d.ID, Body: msg.Data(), ContentType: msg.Headers().Get("Content-Type"),
		Header: http.Header(msg.Headers()), Redelivered: d.NumDelivered > 1,
	}
	if s.cfg.Client != nil {
		m.Client = s.cfg.Client(msg)
	}
	stop := s.keepInProgress(msg)
	d.Result = s.consumer.Handle(ctx, m)
	stop()
	switch d.Result.Action {
	case idemconsume.Ack:
		d.AckErr = msg.Ack()
	case idemconsume.DeadLetter:
		d.AckErr = s.deadLetter(ctx, msg, d.ID, d.Result)
	default:
		d.AckErr = msg.NakWithDelay(d.Result.Delay)
	}
	if d.AckErr != nil {
		s.cfg.Logger.WarnContext(ctx, "idemnats: answering a message failed; JetStream delivers it again after AckWait", "err", d.AckErr, "consumer", s.consumer.Name(), "action", d.Result.Action.String(), "sequence", d.Sequence)
	}
	return d
}

// keepInProgress tells JetStream every AckWait/2 that msg is still being
// handled, until stop is called.
func (s *Subscriber) keepInProgress(msg jetstream.Msg) (stop func()) {
	if s.ackWait <= 0 {
		return func() {}
	}
	var mu sync.Mutex
	stopped := false
	var t *time.Timer
	t = time.AfterFunc(s.ackWait/2, func() {
		mu.Lock()
		defer mu.Unlock()
		if stopped {
			return
		}
		msg.InProgress()
		t.Reset(s.ackWait / 2)
	})
	return func() {
		mu.Lock()
		stopped = true
		mu.Unlock()
		t.Stop()
	}
}

// deadLetter publishes a copy of msg to the dead-letter subject, when
// there is one, and terminates msg. When the copy is not confirmed the
// message is naked instead, so that no dead letter is lost.
func (s *Subscriber) deadLetter(ctx context.Context, msg jetstream.Msg, id string, r idemconsume.Result) error {
	s.cfg.Logger.WarnContext(ctx, "idemnats: message dead-lettered", "consumer", s.consumer.Name(), "outcome", string(r.Outcome), "reason", r.Reason)
	if s.cfg.DeadLetterSubject != "" {
		h := nats.Header{}
		for k, v := range msg.Headers() {
			if k != HeaderMsgID { // the dead-letter stream must keep every copy
				h[k] = v
			}
		}
		h.Set(HeaderDeadLetterReason, oneLine(r.Reason))
		h.Set(HeaderDeadLetterOutcome, string(r.Outcome))
		h.Set(HeaderConsumer, s.consumer.Name())
		h.Set(HeaderMessageID, id)
		if len(r.Fields) > 0 {
			h.Set(HeaderDeadLetterFields, strings.Join(r.Fields, ","))
		}
		if _, err := s.js.PublishMsg(ctx, &nats.Msg{Subject: s.cfg.DeadLetterSubject, Data: msg.Data(), Header: h}); err != nil {
			nak := msg.NakWithDelay(time.Second)
			return errors.Join(fmt.Errorf("idemnats: publish the dead letter: %w", err), nak)
		}
	}
	// Term, not TermWithReason, whose reason servers before 2.10.4 do not
	// understand: they ignore the termination and deliver the message
	// again. The reason is in the dead letter's headers and the log.
	return msg.Term()
}

func oneLine(s string) string {
	return strings.NewReplacer("\r", " ", "\n", " ").Replace(s)
}
