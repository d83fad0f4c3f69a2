package payments

import (
	"context"
	"crypto/rand"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	mrand "math/rand/v2"
	"net/http"
	"strings"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemsqlite"
)

// Charge is a card charge made by the simulated processor.
type Charge struct {
	ID       string `json:"id"`
	Object   string `json:"object"`
	Amount   int64  `json:"amount"`
	Currency string `json:"currency"`
	Customer string `json:"customer"`
	Created  int64  `json:"created"`
}

// ProcessorConfig configures the simulated card processor.
type ProcessorConfig struct {
	// Store is the processor's own database. Required.
	Store *idemsqlite.Store
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

// NewProcessorHandler returns the simulated processor's API: POST
// /v1/charges behind the idem middleware (the processor is itself
// idempotent, as a real one is), GET /v1/charges/count?key=K for tests.
func NewProcessorHandler(ctx context.Context, cfg ProcessorConfig) (http.Handler, error) {
	if cfg.Store == nil {
		return nil, errors.New("payments: ProcessorConfig.Store is required")
	}
	if cfg.FailRate < 0 || cfg.FailRate > 1 {
		return nil, errors.New("payments: ProcessorConfig.FailRate must be between 0 and 1")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if _, err := cfg.Store.DB().ExecContext(ctx, chargesSchema); err != nil {
		return nil, fmt.Errorf("payments: create charges table: %w", err)
	}
	mw, err := idem.New(cfg.Store, &idem.Config{
		Mode: idem.ModeAtomic, Logger: cfg.Logger,
		ClientID: func(r *http.Request) (string, bool) {
			token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
			return token, ok && token != ""
		},
	})
	if err != nil {
		return nil, err
	}
	create := func(w http.ResponseWriter, r *http.Request) {
		if cfg.FailRate > 0 && mrand.Float64() < cfg.FailRate {
			problem(w, idem.ProblemKind{Code: "processor-busy", Status: http.StatusServiceUnavailable, Title: "Processor busy"}, "Simulated failure; nothing was charged.")
			return
		}
		// Like a real processor, a charge that has started finishes even
		// when the caller goes away.
		ctx := context.WithoutCancel(r.Context())
		body, _ := io.ReadAll(r.Body)
		params, err := ParseParams(r.Header.Get("Content-Type"), body)
		if err != nil {
			paramProblem(w, err)
			return
		}
		scope, _ := idem.ScopeFromContext(ctx)
		cfg.Logger.InfoContext(ctx, "processord: charging", "amount", params.Amount, "currency", params.Currency)
		time.Sleep(cfg.Delay)
		c := &Charge{ID: "ch_" + rand.Text(), Object: "charge", Amount: params.Amount, Currency: params.Currency, Customer: params.Customer, Created: time.Now().Unix()}
		tx, err := idemsqlite.TxFromContext(ctx)
		if err == nil {
			_, err = tx.ExecContext(ctx, `INSERT INTO charges (id, client_id, idempotency_key, amount, currency, customer, created) VALUES (?, ?, ?, ?, ?, ?, ?)`,
				c.ID, scope.ClientID, scope.Key, c.Amount, c.Currency, c.Customer, c.Created)
		}
		if err != nil {
			cfg.Logger.ErrorContext(ctx, "processord: insert charge failed", "err", err)
			problem(w, ProblemInternal, "The charge could not be recorded; nothing was charged.")
			return
		}
		w.Header().Set("Location", "/v1/charges/"+c.ID)
		writeJSON(w, http.StatusCreated, c)
	}
	count := func(w http.ResponseWriter, r *http.Request) {
		var n int
		err := cfg.Store.ReadDB().QueryRowContext(r.Context(), `SELECT count(*) FROM charges WHERE idempotency_key = ?`, r.URL.Query().Get("key")).Scan(&n)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			problem(w, ProblemInternal, "The charges could not be counted.")
			return
		}
		writeJSON(w, http.StatusOK, map[string]int{"charges": n})
	}
	mux := http.NewServeMux()
	mux.Handle("POST /v1/charges", mw.Wrap(http.HandlerFunc(create)))
	mux.HandleFunc("GET /v1/charges/count", count)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok\n") })
	mux.Handle("GET /problems/", idem.ProblemsHandler(ProblemInvalidParameter, ProblemInternal))
	return mux, nil
}
