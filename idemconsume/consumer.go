package idemconsume

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemstore"
)

// Defaults of [Config].
const (
	// RetryDelayDefault is the default of [Config.RetryDelay].
	RetryDelayDefault = time.Second
	// TimeoutDefault is the default of [Config.Timeout].
	TimeoutDefault = time.Minute
	// ContentTypeDefault is the media type of a message that names none.
	ContentTypeDefault = "application/json"
)

// ProblemMessageRejected is the code of the answer recorded for a message
// that its handler rejected ([Reject]), status 422.
const ProblemMessageRejected idem.ProblemCode = "message-rejected"

var rejectedKind = idem.ProblemKind{
	Code: ProblemMessageRejected, Status: http.StatusUnprocessableEntity, Title: "Message rejected",
	About: "The consumer's handler rejected the message: it can never be processed. It was dead-lettered with the reason.",
}

// Handler processes one message. Its database writes go through the
// transaction that ctx carries in the atomic mode (the store's accessor,
// such as idempg.TxFromContext), and commit with the key, or not at all.
// In the two-phase mode it runs [RunPhases] when it calls other systems.
//
// nil commits its work and acknowledges the message. [Reject] records
// that the message can never be processed and dead-letters it. Any other
// error, or a panic, rolls its writes back and releases the key: the
// message is redelivered and the handler runs again. In the atomic mode a
// handler may start more than once for one delivery (after a transaction
// conflict); exactly one run commits.
type Handler func(ctx context.Context, msg *Message) error

// Config configures a [Consumer].
type Config struct {
	// Name is the consumer's name: its durable, queue or group. It is the
	// scope of the keys of messages that name no [Message.Client], so two
	// consumers of one message each process it once. Required.
	Name string

	// Idem is the idempotency configuration, shared with the service's
	// middleware, purger and resumer: mode, lock timeout, retention,
	// store timeout, logger, metrics. Its ClientID, Require and Outcome
	// must be nil: the consumer sets them (the scope from the message, a
	// key on every message, and the outcome of a handler from its error).
	// Defaults to the zero idem.Config.
	Idem *idem.Config

	// Path is the resource a message is fingerprinted and recorded under,
	// as a POST: a consumer that shares keys with an HTTP endpoint names
	// the endpoint's path ("/v1/transfers"), so that a message and a
	// request with the same key and scope are the same operation. Defaults
	// to "/messages/" followed by the escaped Name.
	Path string

	// RetryDelay is the delay of the Nak after a handler failed. Defaults
	// to RetryDelayDefault (1 s).
	RetryDelay time.Duration

	// Timeout bounds the handling of one message, from the claim to the
	// commit: a handler stuck on a dead connection is cancelled, its
	// writes roll back and the message is naked, instead of being held
	// (and kept in progress) forever. Defaults to TimeoutDefault (1 min).
	Timeout time.Duration

	// Metrics receives the result of every message. Defaults to none.
	Metrics Metrics
}

// Consumer runs a handler for each message under the idempotency
// contract. It is safe for concurrent use.
type Consumer struct {
	name    string
	path    string
	retry   time.Duration
	timeout time.Duration
	metrics Metrics
	log     *slog.Logger
	handler Handler
	served  http.Handler
}

// New returns a consumer that runs handler for the messages it is given,
// with keys in store.
func New(store idemstore.Store, handler Handler, cfg *Config) (*Consumer, error) {
	if cfg == nil || cfg.Name == "" {
		return nil, errors.New("idemconsume: Config.Name is required")
	}
	if handler == nil {
		return nil, errors.New("idemconsume: a Handler is required")
	}
	if cfg.RetryDelay < 0 || cfg.Timeout < 0 {
		return nil, errors.New("idemconsume: Config.RetryDelay and Config.Timeout must not be negative")
	}
	ic := idem.Config{}
	if cfg.Idem != nil {
		ic = *cfg.Idem
	}
	if ic.ClientID != nil || ic.Require != nil || ic.Outcome != nil {
		return nil, errors.New("idemconsume: Config.Idem's ClientID, Require and Outcome must be nil: the consumer sets them")
	}
	ic.ClientID = clientOf
	ic.Require = requireFields
	ic.Outcome = outcomeOf
	mw, err := idem.New(store, &ic)
	if err != nil {
		return nil, err
	}
	c := &Consumer{
		name: cfg.Name, path: cfg.Path, retry: cfg.RetryDelay, timeout: cfg.Timeout, metrics: cfg.Metrics,
		log: ic.Logger, handler: handler,
	}
	if c.path == "" {
		c.path = "/messages/" + url.PathEscape(cfg.Name)
	}
	if !strings.HasPrefix(c.path, "/") {
		return nil, fmt.Errorf("idemconsume: Config.Path %q must start with /", c.path)
	}
	if c.retry == 0 {
		c.retry = RetryDelayDefault
	}
	if c.timeout == 0 {
		c.timeout = TimeoutDefault
	}
	if c.metrics == nil {
		c.metrics = noMetrics{}
	}
	if c.log == nil {
		c.log = slog.Default()
	}
	c.served = mw.Wrap(http.HandlerFunc(c.serve))
	return c, nil
}

// Name returns the consumer's name.
func (c *Consumer) Name() string { return c.name }

// delivery is one call of Handle, which the request's context carries to
// the functions the middleware calls.
type delivery struct {
	msg    *Message
	client string
	w      *answer // the response the handler's phases write to
	err    error   // the handler's last error
}

type deliveryKey struct{}

func deliveryFrom(ctx context.Context) *delivery {
	d, _ := ctx.Value(deliveryKey{}).(*delivery)
	return d
}

// clientOf is the middleware's ClientID: the scope's client.
func clientOf(r *http.Request) (string, bool) {
	d := deliveryFrom(r.Context())
	if d == nil {
		return "", false
	}
	return d.client, d.client != ""
}

// requireFields is the middleware's Require: a JSON payload is
// fingerprinted by fields; a payload of another media type byte for byte
// (a key on a request that does not require one).
func requireFields(r *http.Request) bool {
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	return err == nil && (mt == "application/json" || strings.HasSuffix(mt, "+json"))
}

// outcomeOf is the middleware's outcome policy: a handler's failure (500,
// written by serve) releases the key, as does an answer by which a handler
// says it did not process the message (idem.NotProcessed: 400, 404, 429
// ...), as over HTTP; its success and its rejection are stored. An
// unfinished phased operation is released whatever the policy.
func outcomeOf(status int) idem.Outcome {
	if status >= 500 || idem.NotProcessed(status) {
		return idem.OutcomeRelease
	}
	return idem.OutcomeStore
}

// Handle processes one message: it claims the key (the message's scope and
// id), runs the handler unless the key is completed or held, commits its
// work with the key, and returns what the adapter must do with the
// message. An adapter acknowledges the message only after Handle returned
// Ack, which is after the commit.
func (c *Consumer) Handle(ctx context.Context, msg *Message) Result {
	res := c.handle(ctx, msg)
	c.metrics.Message(ctx, c.name, res, msg.Redelivered)
	return res
}

func (c *Consumer) handle(ctx context.Context, msg *Message) Result {
	if ctx.Err() != nil {
		return Result{Outcome: OutcomeUnavailable, Action: Nak, Delay: c.retry, Reason: "the consumer is stopping"}
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	d := &delivery{msg: msg, client: msg.Client}
	if d.client == "" {
		d.client = c.name
	}
	ct := msg.ContentType
	if ct == "" {
		ct = ContentTypeDefault
	}
	req := (&http.Request{
		Method:        http.MethodPost,
		URL:           &url.URL{Path: c.path},
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        http.Header{idem.HeaderKey: {quoteKey(msg.ID)}, "Content-Type": {ct}},
		Body:          http.NoBody,
		ContentLength: int64(len(msg.Body)),
		Host:          "consumer",
		RequestURI:    c.path,
	}).WithContext(context.WithValue(ctx, deliveryKey{}, d))
	if len(msg.Body) > 0 {
		req.Body = &bodyReader{b: msg.Body}
	}
	w := &answer{header: make(http.Header)}
	c.served.ServeHTTP(w, req)
	return c.decide(ctx, d, w)
}

// serve is the handler behind the middleware: it runs the consumer's
// handler and answers with what the handler wrote (see [ResponseWriter]),
// or 204 when it succeeded and wrote nothing, 422 when it rejected the
// message, and 500, which releases the key, when it failed.
func (c *Consumer) serve(w http.ResponseWriter, r *http.Request) {
	d := deliveryFrom(r.Context())
	ans := &answer{header: make(http.Header)}
	d.w = ans
	err := c.run(r.Context(), d.msg)
	d.err = err
	var rej *RejectError
	switch {
	case errors.As(err, &rej):
		idem.WriteProblem(w, rejectedKind.New(idem.ProblemTypeBaseDefault, rej.Reason), 0)
	case err != nil && ans.status >= 500:
		ans.copyTo(w) // RunPhases's answer for an unfinished operation
	case err != nil:
		w.WriteHeader(http.StatusInternalServerError)
	case ans.status != 0:
		ans.copyTo(w)
	default:
		w.WriteHeader(http.StatusNoContent)
	}
}

// run runs the handler, turning a panic into an error: the key is
// released and the message redelivered.
func (c *Consumer) run(ctx context.Context, msg *Message) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("idemconsume: the handler panicked: %v", p)
		}
	}()
	return c.handler(ctx, msg)
}

// decide maps the middleware's answer to the adapter's action.
func (c *Consumer) decide(ctx context.Context, d *delivery, w *answer) Result {
	status := w.status
	if status == 0 {
		// The middleware answers nothing when ctx ended before the claim:
		// nothing was claimed nor run.
		return Result{Outcome: OutcomeUnavailable, Action: Nak, Delay: c.retry, Reason: "the consumer stopped before the message was claimed"}
	}
	replayed := w.header.Get(idem.HeaderReplayed) == "true"
	switch {
	case status < 300 && replayed:
		return Result{Outcome: OutcomeDuplicate, Action: Ack}
	case status < 300:
		return Result{Outcome: OutcomeExecuted, Action: Ack}
	case status == http.StatusInternalServerError && !isProblem(w.header):
		return Result{Outcome: OutcomeFailed, Action: Nak, Delay: c.retry, Reason: "the handler failed: " + errText(d.err), Err: d.err}
	}
	delay := c.retry
	if s, err := strconv.Atoi(w.header.Get("Retry-After")); err == nil && s > 0 {
		delay = time.Duration(s) * time.Second
	}
	if status == http.StatusTooManyRequests || status == http.StatusRequestTimeout {
		// The handler's word that it could not process the message now.
		return Result{Outcome: OutcomeFailed, Action: Nak, Delay: delay, Reason: fmt.Sprintf("the handler answered %d", status)}
	}
	var p idem.Problem
	if !isProblem(w.header) || json.Unmarshal(w.body, &p) != nil {
		if status < 500 {
			// The handler's own answer, recorded with the key.
			return Result{Outcome: OutcomeRejected, Action: DeadLetter, Reason: fmt.Sprintf("rejected: the handler answered %d", status)}
		}
		c.log.ErrorContext(ctx, "idemconsume: unexpected answer", "status", status, "consumer", c.name)
		return Result{Outcome: OutcomeUnavailable, Action: Nak, Delay: c.retry, Reason: fmt.Sprintf("unexpected answer %d", status)}
	}
	reason := p.Detail
	if reason == "" {
		reason = p.Title
	}
	switch idem.ProblemCode(p.Code) {
	case ProblemMessageRejected:
		return Result{Outcome: OutcomeRejected, Action: DeadLetter, Reason: "rejected: " + reason, Err: d.err}
	case idem.ProblemKeyInFlight:
		return Result{Outcome: OutcomeInFlight, Action: Nak, Delay: delay, Reason: reason}
	case idem.ProblemKeyReused:
		return Result{Outcome: OutcomeMismatch, Action: DeadLetter, Reason: reason, Fields: p.Fields}
	case idem.ProblemKeyMalformed, idem.ProblemKeyMissing, idem.ProblemBodyMalformed, idem.ProblemBodyTooLarge, idem.ProblemMediaType:
		return Result{Outcome: OutcomeMalformed, Action: DeadLetter, Reason: reason}
	}
	if status < 500 {
		// A problem of the handler's own, such as a refused command,
		// recorded with the key.
		return Result{Outcome: OutcomeRejected, Action: DeadLetter, Reason: "rejected: " + reason}
	}
	// Store unavailable, outcome unknown, operation unfinished: nothing is
	// known to be committed, or what is will be found by the redelivery.
	return Result{Outcome: OutcomeUnavailable, Action: Nak, Delay: delay, Reason: reason, Err: d.err}
}

func errText(err error) string {
	if err == nil {
		return "no error"
	}
	return err.Error()
}

func isProblem(h http.Header) bool {
	return h.Get("Content-Type") == idem.ProblemContentType
}

// quoteKey writes a message id as an sf-string, so that any id of
// printable ASCII is one key; the middleware refuses others as malformed.
func quoteKey(id string) string {
	if !strings.ContainsAny(id, `"\`) {
		return `"` + id + `"`
	}
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(id); i++ {
		if id[i] == '"' || id[i] == '\\' {
			b.WriteByte('\\')
		}
		b.WriteByte(id[i])
	}
	b.WriteByte('"')
	return b.String()
}

// ResponseWriter returns, inside a [Handler], the writer of the answer that
// is recorded with the message's key, or nil outside one. A handler that
// shares keys with an HTTP endpoint (see [Config.Path] and
// [Message.Client]) writes the endpoint's answer there, so that a request
// with the same key and scope replays it; what a handler writes is kept
// only when it returns nil. An answer of 2xx acknowledges the message; one
// of 4xx records a refusal and dead-letters it with the answer's detail
// (the same as [Reject], in the endpoint's words); 5xx releases the key,
// as an error does.
func ResponseWriter(ctx context.Context) http.ResponseWriter {
	d := deliveryFrom(ctx)
	if d == nil || d.w == nil {
		return nil
	}
	return d.w
}

// RunPhases runs a phased operation from a handler in the two-phase mode,
// as [idem.Phases.Run] does for an HTTP handler: each phase commits with
// its recovery point, and a redelivery resumes where an earlier delivery
// stopped. The final phase's answer (what it writes to its
// http.ResponseWriter) is recorded with the key. When it returns an error
// the handler returns it: the message is redelivered.
func RunPhases(ctx context.Context, ph idem.Phases) error {
	d := deliveryFrom(ctx)
	if d == nil || d.w == nil {
		return errors.New("idemconsume: RunPhases outside a Handler")
	}
	return ph.Run(ctx, d.w)
}
