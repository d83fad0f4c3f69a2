package payments

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/cmd/internal/database"
	"github.com/idemkit/idem/idempg"
	"github.com/idemkit/idem/idemsqlite"
	"github.com/idemkit/idem/idemwebhook"
)

// ProcessorEventsPath is the route of the processor's webhooks.
const ProcessorEventsPath = "/v1/webhooks/processor"

// ProcessorEventsEndpoint is the receiver's endpoint: the scope of the
// processor's event ids and watermarks.
const ProcessorEventsEndpoint = "processor"

// ProcessorEventsConfig configures [NewProcessorEvents].
type ProcessorEventsConfig struct {
	// DB is the service's database, SQLite or PostgreSQL: the charges the
	// events report are recorded there, in the transaction that records
	// the event as processed. Required.
	DB *database.DB
	// Secrets verify the events, as processord -webhook-secret signs
	// them; several during a rotation. Required.
	Secrets []string
	// Idem is the service's idempotency configuration; its ClientID and
	// Require are set by the receiver. Defaults to idem's defaults.
	Idem idem.Config
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// ProcessorCharge is a charge as the processor's events report it.
type ProcessorCharge struct {
	ID             string `json:"id"`
	IdempotencyKey string `json:"idempotency_key"`
	Amount         int64  `json:"amount"`
	Currency       string `json:"currency"`
	Outcome        string `json:"outcome"`
}

// NewProcessorEvents returns the receiver of the processor's charge events
// (processord -webhook-url), for POST /v1/webhooks/processor: Standard
// Webhooks verified with the secrets, each event handled once across
// redeliveries and instances (idemwebhook), its charge recorded in the
// processor_charges table with the outcome of the charge's newest event.
// The processor sends an event for every charge, also for one whose answer
// paymentsd never got, so the table is paymentsd's record of what the
// processor charged.
func NewProcessorEvents(ctx context.Context, cfg ProcessorEventsConfig) (http.Handler, error) {
	if cfg.DB == nil {
		return nil, errors.New("payments: ProcessorEventsConfig.DB is required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	verifier, err := idemwebhook.NewStandardWebhooks(cfg.Secrets, nil)
	if err != nil {
		return nil, fmt.Errorf("payments: processor events: %w", err)
	}
	var rec chargeRecorder
	switch {
	case cfg.DB.SQLite != nil:
		if _, err := cfg.DB.SQLite.DB().ExecContext(ctx, sqliteProcessorChargesSchema); err != nil {
			return nil, fmt.Errorf("payments: create processor_charges: %w", err)
		}
		rec = sqliteChargeRecorder{cfg.DB.SQLite}
	case cfg.DB.Postgres != nil:
		if err := createPostgresSchema(ctx, cfg.DB.Pool, cfg.DB.NoAdvisoryLocks, postgresProcessorChargesSchema); err != nil {
			return nil, fmt.Errorf("payments: create processor_charges: %w", err)
		}
		rec = pgChargeRecorder{cfg.DB.Postgres}
	default:
		return nil, errors.New("payments: the processor's events are recorded on SQLite or PostgreSQL only")
	}
	ic := cfg.Idem
	ic.ClientID, ic.Require = nil, nil
	if ic.Logger == nil {
		ic.Logger = cfg.Logger
	}
	rc, err := idemwebhook.New(cfg.DB.Store(), &idemwebhook.Config{Endpoint: ProcessorEventsEndpoint, Verifier: verifier, Idem: &ic, Logger: cfg.Logger})
	if err != nil {
		return nil, fmt.Errorf("payments: processor events: %w", err)
	}
	return rc.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		handleChargeEvent(w, r, rec, cfg.Logger)
	})), nil
}

// handleChargeEvent records the charge of a charge.succeeded or
// charge.declined event, unless a newer event of the charge was recorded.
func handleChargeEvent(w http.ResponseWriter, r *http.Request, rec chargeRecorder, logger *slog.Logger) {
	ctx := r.Context()
	ev, _ := idemwebhook.EventFromContext(ctx)
	var body struct {
		Data ProcessorCharge `json:"data"`
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil || body.Data.ID == "" || ev.Object != body.Data.ID {
		// 400 releases the event id; every delivery of the event is
		// refused the same way, until the processor gives up on it.
		problem(w, ProblemInvalidParameter, "The event is not a charge event of the processor: its data has no charge id.")
		return
	}
	newest, err := idemwebhook.Newest(ctx, rec.watermarks(), body.Data.ID)
	if err == nil && newest {
		err = rec.record(ctx, ev, body.Data)
	}
	if err != nil {
		// 500 rolls back; the middleware answers a key held by another
		// delivery (409) or a failed store (503) for what they are.
		logger.ErrorContext(ctx, "paymentsd: recording a processor event failed", "event_id", ev.ID, "err", err)
		problem(w, ProblemInternal, "The event could not be recorded; nothing was recorded. The processor delivers it again.")
		return
	}
	if !newest {
		logger.InfoContext(ctx, "paymentsd: a processor event older than the charge's newest was ignored", "event_id", ev.ID, "charge", body.Data.ID)
	}
	w.WriteHeader(http.StatusNoContent)
}

// chargeRecorder writes processor charges in the transaction of a
// receiver's lease.
type chargeRecorder interface {
	watermarks() idemwebhook.Watermarks
	record(ctx context.Context, ev idemwebhook.Event, c ProcessorCharge) error
}

const sqliteProcessorChargesSchema = `CREATE TABLE IF NOT EXISTS processor_charges (
    id              TEXT    PRIMARY KEY,
    idempotency_key TEXT    NOT NULL,
    amount          INTEGER NOT NULL,
    currency        TEXT    NOT NULL,
    outcome         TEXT    NOT NULL,
    event_id        TEXT    NOT NULL,
    event_time      INTEGER NOT NULL,
    received        INTEGER NOT NULL
)`

const postgresProcessorChargesSchema = `CREATE TABLE IF NOT EXISTS processor_charges (
    id              text        PRIMARY KEY,
    idempotency_key text        NOT NULL,
    amount          bigint      NOT NULL,
    currency        text        NOT NULL,
    outcome         text        NOT NULL,
    event_id        text        NOT NULL,
    event_time      timestamptz NOT NULL,
    received        timestamptz NOT NULL
)`

type sqliteChargeRecorder struct{ store *idemsqlite.Store }

func (s sqliteChargeRecorder) watermarks() idemwebhook.Watermarks { return s.store }

func (s sqliteChargeRecorder) record(ctx context.Context, ev idemwebhook.Event, c ProcessorCharge) error {
	tx, err := idemsqlite.TxFromContext(ctx)
	if err != nil {
		return err
	}
	_, err = tx.ExecContext(ctx, `INSERT INTO processor_charges (id, idempotency_key, amount, currency, outcome, event_id, event_time, received)
VALUES (?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (id) DO UPDATE SET outcome = excluded.outcome, event_id = excluded.event_id, event_time = excluded.event_time, received = excluded.received`,
		c.ID, c.IdempotencyKey, c.Amount, c.Currency, c.Outcome, ev.ID, ev.Time.UnixMicro(), time.Now().UnixMicro())
	return err
}

type pgChargeRecorder struct{ store *idempg.Store }

func (s pgChargeRecorder) watermarks() idemwebhook.Watermarks { return s.store }

func (s pgChargeRecorder) record(ctx context.Context, ev idemwebhook.Event, c ProcessorCharge) error {
	tx, err := idempg.TxFromContext(ctx)
	if err != nil {
		return err
	}
	_, err = tx.Exec(ctx, `INSERT INTO processor_charges (id, idempotency_key, amount, currency, outcome, event_id, event_time, received)
VALUES ($1, $2, $3, $4, $5, $6, $7, now())
ON CONFLICT (id) DO UPDATE SET outcome = excluded.outcome, event_id = excluded.event_id, event_time = excluded.event_time, received = excluded.received`,
		c.ID, c.IdempotencyKey, c.Amount, c.Currency, c.Outcome, ev.ID, ev.Time)
	return err
}
