// Package processor is the simulated card processor that processord
// serves and tests of the payments service charge through. POST
// /v1/charges runs behind the idem middleware (a real processor is
// idempotent too) and fails the ways real processors do: slowly (Delay),
// with a 503 before charging (FailRate), by charging and then dropping the
// connection without an answer (LoseRate), or by charging and answering
// only after the caller gave up (TimeoutRate). Amounts ending in 02 are
// declined: a final answer, stored and replayed like a charge. GET
// /v1/charges lists every charge with its idempotency key and outcome, so
// that anyone can check that no key was charged twice.
package processor

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/cmd/internal/payments"
	"github.com/idemkit/idem/idemoutbox"
	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/internal/bearer"
)

// DevToken is the token of the development client "paymentsd", which
// processord accepts when it is given no tokens and paymentsd sends when it
// is given none.
const DevToken = "sk_test_paymentsd"

// Outcomes of a charge.
const (
	OutcomeSucceeded = "succeeded"
	OutcomeDeclined  = "declined"
)

// Limits of GET /v1/charges.
const (
	// ListLimitDefault is the page size when the request sets no limit.
	ListLimitDefault = 10
	// ListLimitMax is the largest limit a request may set.
	ListLimitMax = 100
)

// HoldMaxDefault is the default of [Config.HoldMax], processord's read
// timeout.
const HoldMaxDefault = 30 * time.Second

// Charge is a card charge, or a declined attempt at one.
type Charge struct {
	ID             string `json:"id"`
	Object         string `json:"object"` // always "charge"
	IdempotencyKey string `json:"idempotency_key"`
	Amount         int64  `json:"amount"`
	Currency       string `json:"currency"`
	Customer       string `json:"customer"`
	Outcome        string `json:"outcome"` // OutcomeSucceeded or OutcomeDeclined
	Created        int64  `json:"created"` // Unix seconds
}

// ChargeList is a page of GET /v1/charges, newest charge first.
type ChargeList struct {
	Object  string   `json:"object"` // always "list"
	Data    []Charge `json:"data"`
	HasMore bool     `json:"has_more"`
	// NextCursor, passed back as ?cursor= with the same idempotency_key,
	// gets the next page; it is set when HasMore is.
	NextCursor string `json:"next_cursor,omitempty"`
}

// Config configures the processor.
type Config struct {
	// Store is the processor's key store, an *idemsqlite.Store or an
	// *idempg.Store, migrated; the charges table lives on its database.
	// Required.
	Store idemstore.Store
	// Tokens authenticate the processor's clients. Required.
	Tokens *bearer.Tokens
	// Delay is added to every charge, to simulate a slow network call.
	// Defaults to 0.
	Delay time.Duration
	// FailRate is the probability, 0 to 1, that a charge fails with 503
	// before anything is charged. Defaults to 0.
	FailRate float64
	// LoseRate is the probability, 0 to 1, that a charge is made and the
	// connection then closed without an answer. Defaults to 0.
	LoseRate float64
	// TimeoutRate is the probability, 0 to 1, that a charge is made and
	// its answer held until the caller gives up (closes the connection),
	// at most HoldMax. Defaults to 0.
	TimeoutRate float64
	// HoldMax bounds how long TimeoutRate holds an answer for a caller that
	// never gives up. Defaults to HoldMaxDefault.
	HoldMax time.Duration
	// Seed seeds the draws of FailRate, LoseRate and TimeoutRate: each
	// charge that runs draws once, so the same seed and the same sequence
	// of charges fail the same way. 0 picks a random seed, which is
	// logged. Defaults to 0.
	Seed uint64
	// Events, when set, receives a charge.succeeded or charge.declined
	// event in each new charge's transaction (the store, as an
	// idemoutbox.Enqueuer), for processord's relay to deliver as signed
	// Standard Webhooks. Defaults to none.
	Events idemoutbox.Enqueuer
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

var (
	problemBusy = idem.ProblemKind{Code: "processor-busy", Status: http.StatusServiceUnavailable, Title: "Processor busy",
		About: "A simulated failure before anything was charged. Retry with the same Idempotency-Key."}
	problemDeclined = idem.ProblemKind{Code: "card-declined", Status: http.StatusPaymentRequired, Title: "Card declined",
		About: "The card was declined; \"charge\" is the declined attempt, listed by GET /v1/charges with outcome \"declined\". " +
			"A decline is final: a retry with the same Idempotency-Key gets the same answer. The simulator declines amounts ending in 02."}
)

// NewHandler returns the processor's API, every route behind a bearer
// token of cfg.Tokens:
//
//   - POST /v1/charges charges once per Idempotency-Key: 201 and the
//     charge, or 402 card-declined for an amount ending in 02;
//   - GET /v1/charges lists the client's charges, newest first (?limit=,
//     ?cursor=, ?idempotency_key=K for the charge of key K);
//   - GET /v1/charges/count?key=K counts the client's charges with key K
//     (all of them without key).
//
// Answers held by TimeoutRate are released when ctx is done.
func NewHandler(ctx context.Context, cfg Config) (http.Handler, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	l, err := newLedger(cfg.Store)
	if err != nil {
		return nil, err
	}
	if err := l.migrate(ctx); err != nil {
		return nil, err
	}
	mw, err := idem.New(cfg.Store, &idem.Config{
		Mode: idem.ModeAtomic, Logger: cfg.Logger,
		ClientID: func(r *http.Request) (string, bool) { return clientFrom(r.Context()) },
	})
	if err != nil {
		return nil, err
	}
	p := &processor{cfg: cfg, ledger: l, faults: newFaults(cfg), stop: ctx.Done()}
	if p.faults.any() {
		cfg.Logger.InfoContext(ctx, "processord: simulating failures", "fail_rate", cfg.FailRate, "lose_rate", cfg.LoseRate, "timeout_rate", cfg.TimeoutRate, "seed", p.faults.seed)
	}
	auth := payments.Authenticator{Tokens: cfg.Tokens, Realm: "processor"}
	mux := http.NewServeMux()
	mux.Handle("POST /v1/charges", auth.Wrap(withClient(p.withFaults(mw.Wrap(http.HandlerFunc(p.create))))))
	mux.Handle("GET /v1/charges", auth.Wrap(withClient(http.HandlerFunc(p.list))))
	mux.Handle("GET /v1/charges/count", auth.Wrap(withClient(http.HandlerFunc(p.count))))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok\n") })
	mux.Handle("GET /problems/", idem.ProblemsHandler(payments.ProblemInvalidCredentials, payments.ProblemInvalidParameter, payments.ProblemInternal, problemBusy, problemDeclined))
	return mux, nil
}

func (c Config) withDefaults() Config {
	if c.HoldMax == 0 {
		c.HoldMax = HoldMaxDefault
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

func (c Config) validate() error {
	if c.Tokens == nil {
		return errors.New("processor: Config.Tokens is required")
	}
	for _, r := range []struct {
		name string
		rate float64
	}{{"FailRate", c.FailRate}, {"LoseRate", c.LoseRate}, {"TimeoutRate", c.TimeoutRate}} {
		if !(r.rate >= 0 && r.rate <= 1) {
			return fmt.Errorf("processor: Config.%s must be between 0 and 1", r.name)
		}
	}
	if c.FailRate+c.LoseRate+c.TimeoutRate > 1 {
		return errors.New("processor: Config.FailRate, LoseRate and TimeoutRate must add up to at most 1")
	}
	if c.Delay < 0 || c.HoldMax < 0 {
		return errors.New("processor: Config.Delay and HoldMax must not be negative")
	}
	return nil
}

type processor struct {
	cfg    Config
	ledger ledger
	faults *faults
	stop   <-chan struct{}
}

type clientKey struct{}

// withClient copies the authenticated client into the processor's own
// context key.
func withClient(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		client, _ := payments.ClientFromContext(r.Context())
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), clientKey{}, client)))
	})
}

func clientFrom(ctx context.Context) (string, bool) {
	c, ok := ctx.Value(clientKey{}).(string)
	return c, ok && c != ""
}

// declines reports whether the simulator declines amount: it ends in 02.
func declines(amount int64) bool { return amount%100 == 2 }

func (p *processor) create(w http.ResponseWriter, r *http.Request) {
	// Like a real processor, a charge that has started finishes even when
	// the caller goes away.
	ctx := context.WithoutCancel(r.Context())
	body, err := io.ReadAll(r.Body)
	if err != nil {
		problem(w, idem.ProblemBodyMalformed.Kind(), "The request body could not be read; nothing was charged.")
		return
	}
	params, err := payments.ParseParams(r.Header.Get("Content-Type"), body)
	if err != nil {
		payments.WriteParamProblem(w, err)
		return
	}
	f := p.faults.draw()
	if f == faultFail {
		problem(w, problemBusy, "Simulated failure; nothing was charged. Retry with the same Idempotency-Key.")
		return
	}
	scope, _ := idem.ScopeFromContext(ctx)
	p.cfg.Logger.InfoContext(ctx, "processord: charging", "amount", params.Amount, "currency", params.Currency)
	time.Sleep(p.cfg.Delay) // the simulated latency, not a synchronisation
	c := &Charge{ID: "ch_" + rand.Text(), Object: "charge", IdempotencyKey: scope.Key, Amount: params.Amount,
		Currency: params.Currency, Customer: params.Customer, Outcome: OutcomeSucceeded, Created: time.Now().Unix()}
	if declines(c.Amount) {
		c.Outcome = OutcomeDeclined
	}
	stored, charged, err := p.ledger.chargeTx(ctx, scope.ClientID, c)
	if err != nil {
		// The charge and the key commit together: nothing was charged.
		p.cfg.Logger.ErrorContext(ctx, "processord: insert charge failed", "err", err)
		problem(w, payments.ProblemInternal, "The charge could not be recorded; nothing was charged. Retry with the same Idempotency-Key.")
		return
	}
	if charged {
		err = p.enqueueChargeEvent(ctx, stored)
	}
	if err != nil {
		// Answered 500, which rolls the charge back with the event.
		p.cfg.Logger.ErrorContext(ctx, "processord: enqueue charge event failed", "err", err)
		problem(w, payments.ProblemInternal, "The charge could not be recorded; nothing was charged. Retry with the same Idempotency-Key.")
		return
	}
	if !charged && (stored.Amount != c.Amount || stored.Currency != c.Currency || stored.Customer != c.Customer) {
		// The key's record expired from the key store, but its charge
		// stays: a key charges once, ever.
		problem(w, idem.ProblemKeyReused.Kind(), "This Idempotency-Key was used for a charge with other parameters; nothing was charged. Use a new key for a new charge.")
		return
	}
	if charged && c.Outcome == OutcomeDeclined {
		p.cfg.Logger.InfoContext(ctx, "processord: declined", "charge", c.ID)
	}
	status := answer(w, stored)
	if charged {
		setFault(r.Context(), f, status, c.ID)
	}
}

// answer writes the charge: 201, or 402 for a decline.
func answer(w http.ResponseWriter, c *Charge) int {
	if c.Outcome == OutcomeDeclined {
		p := struct {
			*idem.Problem
			Charge *Charge `json:"charge"`
		}{problemDeclined.New(idem.ProblemTypeBaseDefault, "The card was declined; nothing was charged. The decline is final."), c}
		w.Header().Set("Cache-Control", "no-store")
		writeJSONAs(w, idem.ProblemContentType, http.StatusPaymentRequired, p)
		return http.StatusPaymentRequired
	}
	w.Header().Set("Location", "/v1/charges?idempotency_key="+url.QueryEscape(c.IdempotencyKey))
	writeJSON(w, http.StatusCreated, c)
	return http.StatusCreated
}

func (p *processor) list(w http.ResponseWriter, r *http.Request) {
	client, _ := clientFrom(r.Context())
	query := r.URL.Query()
	q := listQuery{key: query.Get("idempotency_key"), limit: ListLimitDefault}
	if s := query.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > ListLimitMax {
			payments.WriteParamProblem(w, &payments.ParamError{Param: "limit", Reason: fmt.Sprintf("must be an integer from 1 to %d", ListLimitMax)})
			return
		}
		q.limit = n
	}
	if s := query.Get("cursor"); s != "" {
		seq, ok := parseCursor(s)
		if !ok {
			payments.WriteParamProblem(w, &payments.ParamError{Param: "cursor", Reason: "is not a next_cursor of this API"})
			return
		}
		q.before = seq
	}
	want := q.limit
	q.limit++ // one more tells whether there is a next page
	rows, err := p.ledger.list(r.Context(), client, q)
	if err != nil {
		p.cfg.Logger.ErrorContext(r.Context(), "processord: list charges failed", "err", err)
		problem(w, payments.ProblemInternal, "The charges could not be listed; retry.")
		return
	}
	page := ChargeList{Object: "list", Data: []Charge{}}
	if len(rows) > want {
		rows = rows[:want]
		page.HasMore, page.NextCursor = true, formatCursor(rows[want-1].seq)
	}
	for _, row := range rows {
		page.Data = append(page.Data, row.charge)
	}
	writeJSON(w, http.StatusOK, page)
}

func (p *processor) count(w http.ResponseWriter, r *http.Request) {
	client, _ := clientFrom(r.Context())
	n, err := p.ledger.count(r.Context(), client, r.URL.Query().Get("key"))
	if err != nil {
		p.cfg.Logger.ErrorContext(r.Context(), "processord: count failed", "err", err)
		problem(w, payments.ProblemInternal, "The charges could not be counted; retry.")
		return
	}
	writeJSON(w, http.StatusOK, map[string]int{"charges": n})
}

// A cursor is the sequence number of the last charge of a page, opaque to
// clients.
const cursorPrefix = "seq:"

func formatCursor(seq int64) string {
	return base64.RawURLEncoding.EncodeToString([]byte(cursorPrefix + strconv.FormatInt(seq, 10)))
}

func parseCursor(s string) (int64, bool) {
	raw, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return 0, false
	}
	digits, ok := strings.CutPrefix(string(raw), cursorPrefix)
	if !ok {
		return 0, false
	}
	seq, err := strconv.ParseInt(digits, 10, 64)
	return seq, err == nil && seq > 0
}

func problem(w http.ResponseWriter, k idem.ProblemKind, detail string) {
	idem.WriteProblem(w, k.New(idem.ProblemTypeBaseDefault, detail), 0)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	writeJSONAs(w, "application/json", status, v)
}

func writeJSONAs(w http.ResponseWriter, contentType string, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("processor: marshal response: %v", err))
	}
	w.Header().Set("Content-Type", contentType)
	w.WriteHeader(status)
	w.Write(append(body, '\n'))
}
