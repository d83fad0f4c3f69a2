// Package processor is the simulated card processor that processord
// serves and tests of the payments service charge through: POST
// /v1/charges behind the idem middleware (a real processor is idempotent
// too), with optional latency and failures.
package processor

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	mrand "math/rand/v2"
	"net/http"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemsqlite"
	"github.com/idemkit/idem/internal/bearer"
	"github.com/idemkit/idem/internal/payments"
)

// DevToken is the token of the development client "paymentsd", which
// processord accepts when it is given no tokens and paymentsd sends when it
// is given none.
const DevToken = "sk_test_paymentsd"

// Charge is a card charge.
type Charge struct {
	ID       string `json:"id"`
	Object   string `json:"object"`
	Amount   int64  `json:"amount"`
	Currency string `json:"currency"`
	Customer string `json:"customer"`
	Created  int64  `json:"created"`
}

// Config configures the processor.
type Config struct {
	// Store is the processor's own database. Required.
	Store *idemsqlite.Store
	// Tokens authenticate the processor's clients. Required.
	Tokens *bearer.Tokens
	// Delay is added to every charge, to simulate a slow network call.
	// Defaults to 0.
	Delay time.Duration
	// FailRate is the probability, 0 to 1, that a charge fails with 503
	// before anything is charged. Defaults to 0.
	FailRate float64
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

const chargesSchema = `CREATE TABLE IF NOT EXISTS charges (
    id              TEXT    PRIMARY KEY,
    client_id       TEXT    NOT NULL,
    idempotency_key TEXT    NOT NULL,
    amount          INTEGER NOT NULL,
    currency        TEXT    NOT NULL,
    customer        TEXT    NOT NULL,
    created         INTEGER NOT NULL
)`

const (
	insertCharge = `INSERT INTO charges (id, client_id, idempotency_key, amount, currency, customer, created) VALUES (?, ?, ?, ?, ?, ?, ?)`
	countCharges = `SELECT count(*) FROM charges WHERE client_id = ? AND (? = '' OR idempotency_key = ?)`
)

var problemBusy = idem.ProblemKind{Code: "processor-busy", Status: http.StatusServiceUnavailable, Title: "Processor busy",
	About: "A simulated failure before anything was charged. Retry with the same Idempotency-Key."}

// NewHandler returns the processor's API: POST /v1/charges, and GET
// /v1/charges/count?key=K, the number of charges the authenticated client
// made with key K (every charge of the client without key), for tests.
// Both require a bearer token of cfg.Tokens.
func NewHandler(ctx context.Context, cfg Config) (http.Handler, error) {
	switch {
	case cfg.Store == nil:
		return nil, errors.New("processor: Config.Store is required")
	case cfg.Tokens == nil:
		return nil, errors.New("processor: Config.Tokens is required")
	case cfg.FailRate < 0 || cfg.FailRate > 1:
		return nil, errors.New("processor: Config.FailRate must be between 0 and 1")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if _, err := cfg.Store.DB().ExecContext(ctx, chargesSchema); err != nil {
		return nil, fmt.Errorf("processor: create charges table: %w", err)
	}
	mw, err := idem.New(cfg.Store, &idem.Config{
		Mode: idem.ModeAtomic, Logger: cfg.Logger,
		ClientID: func(r *http.Request) (string, bool) { return clientFrom(r.Context()) },
	})
	if err != nil {
		return nil, err
	}
	p := &processor{cfg: cfg}
	auth := payments.Authenticator{Tokens: cfg.Tokens, Realm: "processor"}
	mux := http.NewServeMux()
	mux.Handle("POST /v1/charges", auth.Wrap(withClient(mw.Wrap(http.HandlerFunc(p.create)))))
	mux.Handle("GET /v1/charges/count", auth.Wrap(withClient(http.HandlerFunc(p.count))))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok\n") })
	mux.Handle("GET /problems/", idem.ProblemsHandler(payments.ProblemInvalidCredentials, payments.ProblemInvalidParameter, payments.ProblemInternal, problemBusy))
	return mux, nil
}

type processor struct{ cfg Config }

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

func (p *processor) create(w http.ResponseWriter, r *http.Request) {
	if p.cfg.FailRate > 0 && mrand.Float64() < p.cfg.FailRate {
		problem(w, problemBusy, "Simulated failure; nothing was charged. Retry with the same Idempotency-Key.")
		return
	}
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
	scope, _ := idem.ScopeFromContext(ctx)
	p.cfg.Logger.InfoContext(ctx, "processord: charging", "amount", params.Amount, "currency", params.Currency)
	time.Sleep(p.cfg.Delay) // the simulated latency, not a synchronisation
	c := &Charge{ID: "ch_" + rand.Text(), Object: "charge", Amount: params.Amount, Currency: params.Currency, Customer: params.Customer, Created: time.Now().Unix()}
	tx, err := idemsqlite.TxFromContext(ctx)
	if err == nil {
		_, err = tx.ExecContext(ctx, insertCharge, c.ID, scope.ClientID, scope.Key, c.Amount, c.Currency, c.Customer, c.Created)
	}
	if err != nil {
		// The charge and the key commit together: nothing was charged.
		p.cfg.Logger.ErrorContext(ctx, "processord: insert charge failed", "err", err)
		problem(w, payments.ProblemInternal, "The charge could not be recorded; nothing was charged. Retry with the same Idempotency-Key.")
		return
	}
	w.Header().Set("Location", "/v1/charges/"+c.ID)
	writeJSON(w, http.StatusCreated, c)
}

func (p *processor) count(w http.ResponseWriter, r *http.Request) {
	client, _ := clientFrom(r.Context())
	key := r.URL.Query().Get("key")
	var n int
	err := p.cfg.Store.ReadDB().QueryRowContext(r.Context(), countCharges, client, key, key).Scan(&n)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		p.cfg.Logger.ErrorContext(r.Context(), "processord: count failed", "err", err)
		problem(w, payments.ProblemInternal, "The charges could not be counted; retry.")
		return
	}
	writeJSON(w, http.StatusOK, map[string]int{"charges": n})
}

func problem(w http.ResponseWriter, k idem.ProblemKind, detail string) {
	idem.WriteProblem(w, k.New(idem.ProblemTypeBaseDefault, detail), 0)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("processor: marshal response: %v", err))
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(append(body, '\n'))
}
