package payments

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemoutbox"
	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/internal/bearer"
)

// Processor charges a card at a downstream processor. The key is derived
// from the client's idempotency key, so a retried or taken-over request
// charges once. An error wrapping ErrDeclined is a decline: the payment is
// recorded as declined and answered 402. An error wrapping ErrRefused (a
// *RefusedError) is a refusal of the request itself, with nothing charged:
// the payment is recorded as failed and answered 424 payment-failed. Any
// other error is a failure to get an answer, and the charge is retried.
type Processor interface {
	Charge(ctx context.Context, key string, p Params) (chargeID string, err error)
}

// Problem kinds of the payments API, besides idem's own.
var (
	ProblemInvalidCredentials = idem.ProblemKind{Code: "invalid-credentials", Status: http.StatusUnauthorized, Title: "Invalid credentials",
		About: "Send Authorization: Bearer <secret key>. The key is missing, malformed or unknown."}
	ProblemInvalidParameter = idem.ProblemKind{Code: "invalid-parameter", Status: http.StatusBadRequest, Title: "Invalid parameter",
		About: "A request parameter is missing or invalid; \"param\" names it. The request was not processed, so a corrected retry may reuse the same Idempotency-Key."}
	ProblemNotFound = idem.ProblemKind{Code: "not-found", Status: http.StatusNotFound, Title: "Not found",
		About: "No resource of yours has this address."}
	ProblemInternal = idem.ProblemKind{Code: "internal-error", Status: http.StatusInternalServerError, Title: "Internal error",
		About: "The service failed; \"detail\" says what is known of the outcome. The key was released: retry with the same Idempotency-Key, never a new one, so that the payment is made at most once."}
)

// Config configures the service's HTTP handler.
type Config struct {
	// Repo stores payments. Required.
	Repo Repo
	// Store keeps idempotency keys. Required.
	Store idemstore.Store
	// Tokens maps bearer tokens to client ids. Required.
	Tokens *bearer.Tokens
	// Idem is the service's one idempotency configuration: its middleware,
	// key-status and readiness handlers are built from it, and so are the
	// purger and the resumer that run beside it (see IdemConfig).
	// ClientID, Mode and Resume.Operations are set by the service.
	// Defaults to idem's defaults.
	Idem idem.Config
	// Processor, when set, charges each payment, and POST /v1/payments
	// runs by phases (see ResumePhases): a pending payment, the charge
	// with a key derived from the client's, the outcome. Phases need
	// idem.ModeTwoPhase, so the service sets Idem.Mode to it, and a Repo
	// that settles pending payments (SQLiteRepo, PostgresRepo). Defaults
	// to none: each payment is recorded as succeeded in the middleware's
	// Idem.Mode, a database insert with no downstream call.
	Processor Processor
	// BeforePhase, when set, is called as each phase of a payment starts,
	// with the recovery point it runs from, which has committed: a hook
	// for tests that stop the process between two phases. Defaults to
	// none.
	BeforePhase func(ctx context.Context, point string)
	// Outbox, when set, receives a payment.succeeded, payment.declined or
	// payment.failed event in each payment's transaction, and serves GET
	// /v1/events.
	// Defaults to none: no events, and GET /v1/events answers 404.
	Outbox idemoutbox.Store
	// ProcessorEvents, when set, serves POST /v1/webhooks/processor,
	// without a bearer token: the receiver verifies the processor's
	// signature (see NewProcessorEvents). Defaults to none.
	ProcessorEvents http.Handler
	// Ledger, when set, serves accounts and transfers (POST /v1/accounts,
	// POST /v1/transfers and their GETs) behind an idem middleware in
	// idem.ModeAtomic, whatever Idem.Mode says; with Outbox set, each
	// transfer enqueues a transfer.created event. Defaults to none: the
	// routes answer 404.
	Ledger LedgerRepo
	// Keys answers GET /v1/idempotency-keys/{key}. Defaults to Store, when
	// it implements idemstore.KeyReader; otherwise the route is not served.
	Keys idemstore.KeyReader
	// Ready answers GET /readyz. Defaults to Store, when it implements
	// idemstore.Readier; otherwise /readyz answers as /healthz does.
	Ready idemstore.Readier
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Now defaults to time.Now.
	Now func() time.Time
}

// Service is the payments HTTP API.
type Service struct {
	cfg    Config
	mw     *idem.Middleware
	status http.Handler // nil without Config.Keys
	ready  http.Handler // nil without Config.Ready

	ledgerMW *idem.Middleware // in idem.ModeAtomic; nil without Config.Ledger
}

// NewService checks cfg and builds the service.
func NewService(cfg Config) (*Service, error) {
	if cfg.Repo == nil || cfg.Store == nil {
		return nil, errors.New("payments: Config.Repo and Config.Store are required")
	}
	if cfg.Tokens == nil {
		return nil, errors.New("payments: Config.Tokens is required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	ic := cfg.Idem
	if cfg.Processor != nil {
		if _, ok := cfg.Repo.(settler); !ok {
			return nil, fmt.Errorf("payments: a Processor needs a Repo that settles pending payments; %T does not", cfg.Repo)
		}
		ic.Mode = idem.ModeTwoPhase
	}
	ic.ClientID = func(r *http.Request) (string, bool) { return ClientFromContext(r.Context()) }
	if ic.Logger == nil {
		ic.Logger = cfg.Logger
	}
	mw, err := idem.New(cfg.Store, &ic)
	if err != nil {
		return nil, err
	}
	cfg.Idem = ic
	svc := &Service{cfg: cfg, mw: mw}
	if cfg.Ledger != nil {
		if svc.ledgerMW, err = newLedgerMiddleware(cfg.Store, ic); err != nil {
			return nil, err
		}
	}
	if cfg.Keys == nil {
		cfg.Keys, _ = cfg.Store.(idemstore.KeyReader)
	}
	if cfg.Keys != nil {
		if svc.status, err = idem.NewStatusHandler(cfg.Keys, &ic); err != nil {
			return nil, err
		}
	}
	if cfg.Ready == nil {
		cfg.Ready, _ = cfg.Store.(idemstore.Readier)
	}
	if cfg.Ready != nil {
		if svc.ready, err = idem.NewReadyHandler(cfg.Ready, &ic); err != nil {
			return nil, err
		}
	}
	if cfg.Processor != nil {
		cfg.Idem.Resume.Operations = map[string]idem.Phases{"POST /v1/payments": svc.ResumePhases(), rpcOperation: svc.rpcResumePhases()}
	}
	svc.cfg = cfg
	return svc, nil
}

// IdemConfig returns the configuration the service's middleware was built
// from, with ClientID, Mode and (with a Processor) Resume.Operations set:
// build the purger and the resumer from it, so that they keep the
// middleware's retention, lock timeout, clock and replay headers.
func (s *Service) IdemConfig() *idem.Config {
	c := s.cfg.Idem
	return &c
}

// Handler returns the service's routes.
func (s *Service) Handler() http.Handler {
	mux := http.NewServeMux()
	auth := Authenticator{Tokens: s.cfg.Tokens}
	mux.Handle("POST /v1/payments", auth.Wrap(routePath(s.mw.Wrap(http.HandlerFunc(s.Create)))))
	mux.Handle("GET /v1/payments/{id}", auth.Wrap(http.HandlerFunc(s.get)))
	if s.cfg.Ledger != nil {
		s.ledgerRoutes(mux, auth)
	}
	if s.cfg.Outbox != nil {
		mux.Handle("GET /v1/events", auth.Wrap(http.HandlerFunc(s.listEvents)))
	}
	if s.cfg.ProcessorEvents != nil {
		mux.Handle("POST "+ProcessorEventsPath, s.cfg.ProcessorEvents)
	}
	if s.status != nil {
		mux.Handle("GET /v1/idempotency-keys/{key}", auth.Wrap(s.status))
	}
	// /healthz is liveness: the process serves HTTP. /readyz is readiness:
	// the key store answers and its schema is current.
	healthz := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		io.WriteString(w, "ok\n")
	})
	mux.Handle("GET /healthz", healthz)
	if s.ready != nil {
		mux.Handle("GET /readyz", s.ready)
	} else {
		mux.Handle("GET /readyz", healthz)
	}
	mux.Handle("GET /problems/", idem.ProblemsHandler(ProblemInvalidCredentials, ProblemInvalidParameter, ProblemNotFound, ProblemInternal, ProblemDeclined, ProblemFailed, ProblemInsufficientFunds))
	mux.HandleFunc("GET /openapi.json", s.openAPI)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		problem(w, ProblemNotFound, fmt.Sprintf("There is no %s %s.", r.Method, r.URL.Path))
	})
	return mux
}

func problem(w http.ResponseWriter, k idem.ProblemKind, detail string) {
	idem.WriteProblem(w, k.New(idem.ProblemTypeBaseDefault, detail), 0)
}

// WriteParamProblem answers a *ParamError from ParseParams with a 400
// problem naming the parameter.
func WriteParamProblem(w http.ResponseWriter, err error) {
	var pe *ParamError
	if !errors.As(err, &pe) {
		pe = &ParamError{Param: "body", Reason: "is invalid"}
	}
	p := ProblemInvalidParameter.New(idem.ProblemTypeBaseDefault, fmt.Sprintf("%s %s.", pe.Param, pe.Reason))
	p.Param = pe.Param
	idem.WriteProblem(w, p, 0)
}

// routePath gives next the request with its path as the route's: the
// middleware fingerprints the path, and POST /v1/%70ayments, which the mux
// routes here, is the same operation as POST /v1/payments. Only for
// patterns without wildcards, as every idempotent route here is.
func routePath(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		path := r.Pattern
		if _, p, ok := strings.Cut(path, " "); ok {
			path = p // the pattern's method
		}
		if !strings.HasPrefix(path, "/") || strings.Contains(path, "{") {
			panic("payments: routePath needs a pattern without wildcards, got " + strconv.Quote(r.Pattern))
		}
		if r.URL.EscapedPath() != path {
			u := *r.URL
			u.Path, u.RawPath = path, ""
			r2 := *r
			r2.URL = &u
			r = &r2
		}
		next.ServeHTTP(w, r)
	})
}

// claimRefused reports whether err is a statement's refusal to run because
// the request's key, claimed with that statement (see
// idemstore.ClaimParams.Speculative), turned out to be held or completed: not a
// failure, and the middleware answers from the key, never with what the
// handler writes.
func claimRefused(err error) bool {
	var exists *idemstore.ExistsError
	return errors.As(err, &exists)
}

// Create is POST /v1/payments itself: it validates every parameter before
// it charges or writes anything, then, with a processor, runs the payment
// by phases (createPhases); without one, it records the payment as
// succeeded. Handler serves it behind the token check and the idem
// middleware; served without the middleware (as the benchmarks' baseline
// does, without a processor) it makes a payment per request, retries
// included.
func (s *Service) Create(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		problem(w, idem.ProblemBodyMalformed.Kind(), "The request body could not be read; nothing was charged or recorded.")
		return
	}
	params, err := ParseParams(r.Header.Get("Content-Type"), body)
	if err != nil {
		WriteParamProblem(w, err)
		return
	}
	if s.cfg.Processor != nil {
		if err := s.createPhases(params).Run(r.Context(), w); err != nil {
			s.cfg.Logger.WarnContext(r.Context(), "payments: the payment is unfinished; a retry or the resumer resumes it", "err", err)
		}
		return
	}
	client, _ := ClientFromContext(r.Context())
	scope, _ := idem.ScopeFromContext(r.Context())
	p := &Payment{
		ID: NewID(), Object: "payment", Amount: params.Amount, Currency: params.Currency,
		Customer: params.Customer, Description: params.Description, Status: StatusSucceeded,
		Created: s.cfg.Now().Unix(), ClientID: client, IdempotencyKey: scope.Key,
	}
	err = s.cfg.Repo.Insert(r.Context(), p)
	if err == nil {
		err = s.enqueuePaymentEvent(r.Context(), p)
	}
	if claimRefused(err) {
		w.WriteHeader(http.StatusConflict) // the middleware answers from the key
		return
	}
	if err != nil {
		s.cfg.Logger.ErrorContext(r.Context(), "payments: insert failed", "client_id", client, "err", err)
		writeFailure(w, err, "The payment could not be recorded, and no card was charged. Retry with the same Idempotency-Key.")
		return
	}
	w.Header().Set("Location", "/v1/payments/"+p.ID)
	writeJSON(w, http.StatusCreated, p)
}

func (s *Service) get(w http.ResponseWriter, r *http.Request) {
	client, _ := ClientFromContext(r.Context())
	p, err := s.cfg.Repo.Get(r.Context(), client, r.PathValue("id"))
	switch {
	case errors.Is(err, ErrNotFound):
		problem(w, ProblemNotFound, "You have no payment with this id.")
	case err != nil:
		s.cfg.Logger.ErrorContext(r.Context(), "payments: read failed", "client_id", client, "err", err)
		problem(w, ProblemInternal, "The payment could not be read; retry.")
	default:
		writeJSON(w, http.StatusOK, p)
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("payments: marshal response: %v", err))
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(append(body, '\n'))
}

// openAPI publishes the API and its idempotency policy, as the draft
// standard requires a resource to do.
func (s *Service) openAPI(w http.ResponseWriter, r *http.Request) {
	ic := s.cfg.Idem
	retention := ic.Retention
	if retention == 0 {
		retention = idem.RetentionDefault
	}
	lock := ic.LockTimeout
	if lock == 0 {
		lock = idem.LockTimeoutDefault
	}
	policy := fmt.Sprintf("Idempotency keys are retained for %s (%d seconds) after their first use; "+
		"after that, a request that reuses a key runs as new (a new payment, account or transfer). A request that fails with a 5xx is not stored: "+
		"retry it with the same key. Keys are scoped per client; at most %d characters.",
		humanDuration(retention), int(retention.Seconds()), idem.MaxKeyLength)
	doc := map[string]any{
		"openapi": "3.1.0",
		"info": map[string]any{
			"title": "idem reference payments API", "version": "1",
			"description": policy,
		},
		"x-idempotency": map[string]any{
			"header": idem.HeaderKey, "retention": humanDuration(retention), "retention_seconds": int(retention.Seconds()),
			"lock_timeout_seconds": int(lock.Seconds()), "max_key_length": idem.MaxKeyLength,
			"replay_header": idem.HeaderReplayed, "server_errors": "released, not stored; retry with the same key",
			"scope": "per authenticated client",
		},
		"paths": map[string]any{
			"/v1/payments": map[string]any{"post": map[string]any{
				"summary": "Create a payment",
				"parameters": []any{map[string]any{
					"name": idem.HeaderKey, "in": "header", "required": true,
					"description": "A unique key per logical payment (a v4 UUID). " + policy,
					"schema":      map[string]any{"type": "string", "maxLength": idem.MaxKeyLength},
				}},
				"requestBody": map[string]any{"required": true, "content": map[string]any{
					"application/json":                  map[string]any{"schema": paymentSchema},
					"application/x-www-form-urlencoded": map[string]any{"schema": paymentSchema},
				}},
				"responses": map[string]any{
					"201": map[string]any{"description": "Created; a retry with the same key replays this response with Idempotent-Replayed: true."},
					"400": map[string]any{"description": "Missing or malformed Idempotency-Key, or an invalid parameter (problem+json)."},
					"401": map[string]any{"description": "Invalid credentials."},
					"402": map[string]any{"description": "The card processor declined the charge (payment-declined); the declined payment is at Location. Stored and replayed like a 201."},
					"409": map[string]any{"description": "A request with this key is still in progress; retry after Retry-After."},
					"424": map[string]any{"description": "The card processor refused the charge request itself, which is not a decline of the card (payment-failed): nothing was charged, and the failed payment is at Location. Stored and replayed like a 201; a new attempt needs a new key."},
					"413": map[string]any{"description": "The body is larger than the limit (problem+json, payload-too-large)."},
					"415": map[string]any{"description": "The body is not application/json (problem+json)."},
					"422": map[string]any{"description": "The key was used with a different request; \"fields\" names what differs."},
					"503": map[string]any{"description": "The idempotency store did not answer, the outcome of the commit is unknown, or the payment stopped at a recovery point (operation-unfinished: what it completed is kept); retry with the same key after Retry-After (problem+json)."},
				},
			}},
			"/v1/payments/{id}": map[string]any{"get": map[string]any{"summary": "Retrieve one of your payments"}},
			"/v1/idempotency-keys/{key}": map[string]any{"get": map[string]any{
				"summary": "What became of one of your idempotency keys",
				"description": "Reports the state of a key of the calling client without running or replaying its request. " +
					"A key that is unknown, past retention or another client's gets the same 404.",
				"parameters": []any{map[string]any{
					"name": "key", "in": "path", "required": true,
					"description": "The Idempotency-Key value, unquoted and percent-encoded.",
					"schema":      map[string]any{"type": "string", "minLength": 1, "maxLength": idem.MaxKeyLength},
				}},
				"responses": map[string]any{
					"200": map[string]any{"description": "The key's state.", "content": map[string]any{
						"application/json": map[string]any{"schema": keyStatusSchema},
					}},
					"400": map[string]any{"description": "The key is malformed (problem+json)."},
					"401": map[string]any{"description": "Invalid credentials."},
					"404": map[string]any{"description": "You have no key with this value (problem+json, idempotency-key-not-found)."},
					"503": map[string]any{"description": "The idempotency store did not answer; retry after Retry-After."},
				},
			}},
			"/healthz": map[string]any{"get": map[string]any{
				"summary":   "Liveness: the process serves HTTP; it does not look at the database",
				"responses": map[string]any{"200": map[string]any{"description": "ok"}},
			}},
			"/readyz": map[string]any{"get": map[string]any{
				"summary": "Readiness: the key store answers within 2 s and its schema is at the version this build needs",
				"responses": map[string]any{
					"200": map[string]any{"description": "ready"},
					"503": map[string]any{"description": "Not ready: the store did not answer in time or its schema is behind (problem+json, store-unavailable)."},
				},
			}},
			"/v1/events": map[string]any{"get": map[string]any{
				"summary": "List your events, newest first (payment.succeeded, payment.declined, payment.failed, transfer.created); served when the service keeps events",
				"parameters": []any{
					map[string]any{"name": "limit", "in": "query", "schema": map[string]any{"type": "integer", "minimum": 1, "maximum": EventsLimitMax, "default": EventsLimitDefault}},
					map[string]any{"name": "cursor", "in": "query", "description": "next_cursor of the previous page", "schema": map[string]any{"type": "string"}},
				},
				"responses": map[string]any{
					"200": map[string]any{"description": "{object: list, data: [{id, object: event, type, created, data, delivery: {status, attempts}}], has_more, next_cursor}. Another client's events are never listed."},
					"400": map[string]any{"description": "An invalid limit or cursor (problem+json)."},
				},
			}},
		},
	}
	if s.cfg.Ledger != nil {
		addLedgerPaths(doc["paths"].(map[string]any), policy)
	}
	writeJSON(w, http.StatusOK, doc)
}

// keyStatusSchema publishes idem.KeyStatus.
var keyStatusSchema = map[string]any{
	"type": "object", "required": []string{"key", "state", "method", "path", "created", "expires"},
	"properties": map[string]any{
		"key":             map[string]any{"type": "string"},
		"state":           map[string]any{"type": "string", "enum": []string{idem.KeyStateInFlight, idem.KeyStateCompleted}},
		"method":          map[string]any{"type": "string"},
		"path":            map[string]any{"type": "string"},
		"created":         map[string]any{"type": "string", "format": "date-time"},
		"expires":         map[string]any{"type": "string", "format": "date-time", "description": "created plus the retention period"},
		"response_status": map[string]any{"type": "integer", "description": "The stored response's status (completed keys only)."},
		"link":            map[string]any{"type": "string", "description": "The stored response's Location (completed keys only, when it had one)."},
	},
}

// paymentSchema publishes ParseParams' rules. Strings are valid UTF-8
// without control characters (a description may hold tab, CR and LF).
var paymentSchema = map[string]any{
	"type": "object", "required": []string{"amount", "currency", "customer"}, "additionalProperties": false,
	"properties": map[string]any{
		"amount": map[string]any{"type": "integer", "minimum": 1, "maximum": int64(MaxAmount),
			"description": "In the currency's minor unit, read exactly: a fraction is refused, never rounded."},
		"currency":    map[string]any{"type": "string", "pattern": "^[A-Za-z]{3}$"},
		"customer":    map[string]any{"type": "string", "minLength": 1, "maxLength": MaxCustomer, "pattern": "^[^\\p{Cc}]*$"},
		"description": map[string]any{"type": "string", "maxLength": MaxDescription},
	},
}

func humanDuration(d time.Duration) string {
	switch {
	case d%(24*time.Hour) == 0 && d >= 48*time.Hour:
		return fmt.Sprintf("%d days", d/(24*time.Hour))
	case d == time.Hour:
		return "1 hour"
	case d%time.Hour == 0:
		return fmt.Sprintf("%d hours", d/time.Hour)
	default:
		return d.String()
	}
}
