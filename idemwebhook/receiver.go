package idemwebhook

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"slices"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/internal/keyspec"
)

// ClientIDPrefix starts the client id under which the receiver keeps an
// endpoint's event ids: "webhook:" and the endpoint, apart from the ids of
// an API's own clients in the same key table.
const ClientIDPrefix = "webhook:"

// Config configures a [Receiver].
type Config struct {
	// Endpoint names the route, such as "stripe" or "processor": event ids
	// are deduplicated per endpoint, and watermarks kept per endpoint.
	// Give each route its own, and keep it when the route's path changes.
	// Required.
	Endpoint string

	// Verifier checks each delivery: a [StandardWebhooks] or a [Stripe].
	// Required.
	Verifier Verifier

	// Idem is the configuration of the idem middleware that runs the
	// handler under the event id. The receiver sets its ClientID (to
	// ClientIDPrefix + Endpoint) and its Require (every delivery has a
	// key), which must be left nil, and adds the provider's fields that
	// change between deliveries of one event to ExcludeFields. Its Mode
	// defaults to idem.ModeAtomic, in which the claim of the event id, the
	// handler's writes and the record of the processed event commit
	// together. Its Outcome defaults to idem.DefaultOutcomePolicy, which
	// releases the event id when the handler answers 5xx, so that the
	// provider's retry runs the handler again; a policy that stores 500
	// is refused. Its MaxBodyBytes bounds
	// the body read for verification too. Nil means the defaults.
	Idem *idem.Config

	// Logger receives refused deliveries, at Warn. Defaults to
	// Idem.Logger, then slog.Default().
	Logger *slog.Logger

	// Now is the clock that signed timestamps are checked against.
	// Defaults to Idem.Now, then time.Now.
	Now func() time.Time
}

// Receiver is net/http middleware that receives webhooks of one provider
// on one route: it verifies each delivery, then runs the handler behind
// the idem middleware with the event id as the idempotency key. See the
// package documentation for its answers.
type Receiver struct {
	endpoint string
	verifier Verifier
	mw       *idem.Middleware
	maxBody  int64
	base     string // the problem type base
	log      *slog.Logger
	now      func() time.Time
}

// New returns the receiver of one endpoint, whose event ids are kept in
// store.
func New(store idemstore.Store, cfg *Config) (*Receiver, error) {
	if cfg == nil {
		return nil, errors.New("idemwebhook: Config.Endpoint and Config.Verifier are required")
	}
	switch {
	case cfg.Endpoint == "":
		return nil, errors.New("idemwebhook: Config.Endpoint is required")
	case cfg.Verifier == nil:
		return nil, errors.New("idemwebhook: Config.Verifier is required")
	}
	if err := keyspec.Check(cfg.Endpoint); err != nil {
		return nil, fmt.Errorf("idemwebhook: Config.Endpoint: %w", err)
	}
	var ic idem.Config
	if cfg.Idem != nil {
		ic = *cfg.Idem
	}
	if ic.ClientID != nil || ic.Require != nil {
		return nil, errors.New("idemwebhook: Config.Idem.ClientID and Config.Idem.Require are set by the receiver; leave them nil")
	}
	if ic.Outcome != nil && ic.Outcome(http.StatusInternalServerError) == idem.OutcomeStore {
		// A provider's retry of an event whose handler failed would get
		// the stored failure, and the event would never run.
		return nil, errors.New("idemwebhook: Config.Idem.Outcome stores 500 answers; a failed event must release its id so that the provider's retry runs it")
	}
	clientID := ClientIDPrefix + cfg.Endpoint
	ic.ClientID = func(*http.Request) (string, bool) { return clientID, true }
	ic.Require = func(*http.Request) bool { return true }
	if x, ok := cfg.Verifier.(interface{ excludeFields() []string }); ok {
		for _, f := range x.excludeFields() {
			if !slices.Contains(ic.ExcludeFields, f) {
				ic.ExcludeFields = append(slices.Clip(ic.ExcludeFields), f)
			}
		}
	}
	mw, err := idem.New(store, &ic)
	if err != nil {
		return nil, fmt.Errorf("idemwebhook: %w", err)
	}
	rc := &Receiver{
		endpoint: cfg.Endpoint, verifier: cfg.Verifier, mw: mw,
		maxBody: ic.MaxBodyBytes, base: ic.ProblemTypeBase,
		log: cfg.Logger, now: cfg.Now,
	}
	if rc.maxBody == 0 {
		rc.maxBody = idem.MaxBodyBytesDefault
	}
	if rc.base == "" {
		rc.base = idem.ProblemTypeBaseDefault
	}
	if rc.log == nil {
		rc.log = ic.Logger
	}
	if rc.log == nil {
		rc.log = slog.Default()
	}
	if rc.now == nil {
		rc.now = ic.Now
	}
	if rc.now == nil {
		rc.now = time.Now
	}
	return rc, nil
}

// Wrap returns next behind the receiver. Its method value is a
// func(http.Handler) http.Handler, for routers that chain middleware.
func (rc *Receiver) Wrap(next http.Handler) http.Handler {
	inner := rc.mw.Wrap(next)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc.serve(w, r, inner)
	})
}

func (rc *Receiver) serve(w http.ResponseWriter, r *http.Request, inner http.Handler) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		rc.refuse(w, r, ProblemMethod, r.Method+" is not POST.", "")
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, rc.maxBody))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			rc.refuse(w, r, idem.ProblemBodyTooLarge, fmt.Sprintf("The body is larger than the limit of %d bytes.", rc.maxBody), "")
			return
		}
		rc.refuse(w, r, idem.ProblemBodyMalformed, "The request body could not be read.", "")
		return
	}
	ev, err := rc.verifier.Verify(r.Header, body, rc.now())
	if err != nil {
		var ve *VerifyError
		if !errors.As(err, &ve) {
			ve = &VerifyError{Err: ErrSignature, Reason: "the delivery could not be verified"}
		}
		rc.refuse(w, r, ve.code(), "The delivery was refused: "+ve.Reason+". Nothing was processed.", ve.Reason)
		return
	}
	key, err := keyspec.Format(ev.ID, false)
	if err != nil {
		rc.refuse(w, r, ProblemMalformed, "The event id is not usable as a key: "+err.Error()+". Nothing was processed.", "event id: "+err.Error())
		return
	}
	ev.Endpoint = rc.endpoint
	r2 := r.WithContext(ContextWithEvent(r.Context(), ev))
	r2.Header = r.Header.Clone()
	r2.Header.Set(idem.HeaderKey, key)
	if r2.Header.Get("Content-Type") == "" && json.Valid(body) {
		r2.Header.Set("Content-Type", "application/json") // the providers' payloads are JSON
	}
	r2.Body = io.NopCloser(bytes.NewReader(body))
	r2.ContentLength = int64(len(body))
	r2.GetBody = nil
	mw := &mismatchWriter{ResponseWriter: w}
	inner.ServeHTTP(mw, r2)
	mw.log(rc, r2, ev)
}

// refuse answers a delivery refused before any effect, and logs why.
func (rc *Receiver) refuse(w http.ResponseWriter, r *http.Request, code idem.ProblemCode, detail, reason string) {
	if reason != "" {
		rc.log.WarnContext(r.Context(), "idemwebhook: delivery refused", "endpoint", rc.endpoint, "code", string(code), "reason", reason)
	}
	idem.WriteProblem(w, kindOf(code).New(rc.base, detail), 0)
}

// mismatchWriter passes a response through and keeps the body of a 422
// problem, so that the receiver can log the fields of an event id
// delivered again with a different payload: the middleware names them in
// its answer, the one place where they are compared.
type mismatchWriter struct {
	http.ResponseWriter
	status int
	body   []byte
}

// mismatchBodyLimit bounds the 422 body kept; a problem is far smaller.
const mismatchBodyLimit = 64 << 10

func (m *mismatchWriter) WriteHeader(code int) {
	if m.status == 0 {
		m.status = code
	}
	m.ResponseWriter.WriteHeader(code)
}

func (m *mismatchWriter) Write(b []byte) (int, error) {
	if m.status == 0 {
		m.status = http.StatusOK
	}
	if m.status == http.StatusUnprocessableEntity && len(m.body)+len(b) <= mismatchBodyLimit {
		m.body = append(m.body, b...)
	}
	return m.ResponseWriter.Write(b)
}

// Unwrap returns the writer underneath, for http.ResponseController.
func (m *mismatchWriter) Unwrap() http.ResponseWriter { return m.ResponseWriter }

// log logs a refused event id that the middleware answered 422.
func (m *mismatchWriter) log(rc *Receiver, r *http.Request, ev Event) {
	if m.status != http.StatusUnprocessableEntity {
		return
	}
	if media, _, _ := mime.ParseMediaType(m.Header().Get("Content-Type")); media != idem.ProblemContentType {
		return
	}
	var p idem.Problem
	if json.Unmarshal(m.body, &p) != nil || p.Code != string(idem.ProblemKeyReused) {
		return // the handler's own 422
	}
	rc.log.WarnContext(r.Context(), "idemwebhook: an event id was delivered again with a different payload; refused",
		"endpoint", rc.endpoint, "event_id", ev.ID, "event_type", ev.Type, "fields", p.Fields, "detail", p.Detail)
}
