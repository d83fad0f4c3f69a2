package checktest

import (
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"github.com/idemkit/idem/internal/keyspec"
)

// Fault is one deliberate defect of the server.
type Fault int

// The defects a Server can have; each breaks exactly one rule of the contract.
const (
	// NoFault makes a conforming server.
	NoFault Fault = iota
	// AcceptsMissingKey processes requests without Idempotency-Key instead of
	// answering 400.
	AcceptsMissingKey
	// NoFingerprint does not compare bodies: a used key with a different body
	// replays the stored response.
	NoFingerprint
	// NoConcurrencyGuard records a key only after executing, so a duplicate
	// that arrives while the first request runs executes again.
	NoConcurrencyGuard
	// GlobalKeys keeps one key space for all clients instead of one per
	// Authorization value.
	GlobalKeys
)

// Publication says where the server publishes its idempotency specification.
type Publication int

// Where the specification can be found.
const (
	// PublishOpenAPI serves /openapi.json with an x-idempotency extension and a
	// 24 hours retention statement.
	PublishOpenAPI Publication = iota
	// PublishLink serves no OpenAPI document; every response carries
	// Link: </docs/idempotency>; rel="help", a page stating the retention.
	PublishLink
	// PublishProblemType serves no OpenAPI document; problem bodies carry the
	// type /problems/idempotency-key, a page stating the retention.
	PublishProblemType
	// PublishNothing publishes no specification at all.
	PublishNothing
)

const (
	// BurstDefault is the default of Config.Burst.
	BurstDefault = 8
	// MaxKeyLength is the longest key the server accepts.
	MaxKeyLength = keyspec.MaxLength
	// PaymentsPath is the path of the payments endpoint.
	PaymentsPath = "/v1/payments"
)

// Config configures a Server.
type Config struct {
	// Fault is the defect the server has. Defaults to NoFault.
	Fault Fault
	// Publication is where the specification is published. Defaults to PublishOpenAPI.
	Publication Publication
	// Burst is the number of simultaneous requests the checker's concurrency
	// check sends. Defaults to 8.
	Burst int
}

// Server is an in-memory payments endpoint at PaymentsPath that implements the
// Idempotency-Key contract, or breaks one rule of it on purpose.
//
// Records are kept per (Authorization, key) with a SHA-256 fingerprint of the
// body. A key being executed answers duplicates with 409, a used key with a
// different body gets 422, a completed key replays its stored status and body
// with Idempotent-Replayed: true, and a missing, malformed, over-long (more
// than 255 characters) or repeated key gets 400. Keys may be quoted sf-strings
// or bare tokens.
//
// To make races deterministic without timing, requests whose User-Agent names
// the checker's concurrency check hold their execution: a conforming server
// holds it until the other Burst-1 duplicates were answered with 409, a
// NoConcurrencyGuard server until a second duplicate has also started
// executing. Either wait ends when the request's context does.
type Server struct {
	cfg Config

	mu       sync.Mutex
	records  map[recordKey]*record
	payments int
	waits    map[recordKey]*burstWait
}

type recordKey struct{ scope, key string }

type record struct {
	fingerprint [32]byte
	done        bool
	status      int
	body        []byte
	location    string
}

// burstWait holds executions of one key during the concurrency check.
type burstWait struct {
	conflicts int           // duplicates answered with 409
	executing int           // executions started (NoConcurrencyGuard)
	release   chan struct{} // closed when the executions may finish
	released  bool
}

// New returns a Server; cfg may be nil.
func New(cfg *Config) *Server {
	c := Config{}
	if cfg != nil {
		c = *cfg
	}
	if c.Burst == 0 {
		c.Burst = BurstDefault
	}
	return &Server{cfg: c, records: make(map[recordKey]*record), waits: make(map[recordKey]*burstWait)}
}

// Payments reports how many payments the server has executed.
func (s *Server) Payments() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.payments
}

const retentionText = "Idempotency keys are retained for 24 hours. After that a reused key starts a new payment."

// ServeHTTP routes the payments endpoint and the published documents.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Publication == PublishLink {
		w.Header().Add("Link", `</docs/idempotency>; rel="help"`)
	}
	switch {
	case r.URL.Path == PaymentsPath && r.Method == http.MethodPost:
		s.servePayment(w, r)
	case r.URL.Path == PaymentsPath:
		w.Header().Set("Allow", http.MethodPost)
		s.problem(w, http.StatusMethodNotAllowed, "Method not allowed", "")
	case r.Method == http.MethodGet && r.URL.Path == "/openapi.json" && s.cfg.Publication == PublishOpenAPI:
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, openAPI)
	case r.Method == http.MethodGet && r.URL.Path == "/docs/idempotency" && s.cfg.Publication == PublishLink,
		r.Method == http.MethodGet && r.URL.Path == "/problems/idempotency-key" && s.cfg.Publication == PublishProblemType:
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprintf(w, "<html><body><h1>Idempotency</h1><p>Send an Idempotency-Key with every payment. %s</p></body></html>", retentionText)
	default:
		http.NotFound(w, r)
	}
}

var openAPI = `{
  "openapi": "3.1.0",
  "info": {"title": "Payments", "version": "1"},
  "x-idempotency": {"header": "Idempotency-Key", "max-length": ` + strconv.Itoa(MaxKeyLength) + `, "retention": "PT24H"},
  "paths": {"/v1/payments": {"post": {
    "summary": "Create a payment",
    "description": "` + retentionText + `",
    "parameters": [{"name": "Idempotency-Key", "in": "header", "required": true, "schema": {"type": "string", "maxLength": ` + strconv.Itoa(MaxKeyLength) + `}}]
  }}}
}`

func (s *Server) servePayment(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		s.problem(w, http.StatusBadRequest, "Unreadable body", "")
		return
	}
	values := r.Header.Values("Idempotency-Key")
	switch {
	case len(values) == 0 && s.cfg.Fault == AcceptsMissingKey:
		s.mu.Lock()
		status, resp, location := s.execute(body)
		s.mu.Unlock()
		s.respond(w, status, resp, location, false)
		return
	case len(values) == 0:
		s.problem(w, http.StatusBadRequest, "Idempotency-Key is missing", "")
		return
	case len(values) > 1:
		s.problem(w, http.StatusBadRequest, "Idempotency-Key is malformed", "send exactly one Idempotency-Key field")
		return
	}
	key, err := ParseKey(values[0])
	if err != nil {
		s.problem(w, http.StatusBadRequest, "Idempotency-Key is malformed", err.Error())
		return
	}
	rk := recordKey{scope: r.Header.Get("Authorization"), key: key}
	if s.cfg.Fault == GlobalKeys {
		rk.scope = ""
	}
	fp := sha256.Sum256(body)
	burst := strings.Contains(r.UserAgent(), "check=concurrency")

	s.mu.Lock()
	if rec, ok := s.records[rk]; ok {
		switch {
		case rec.fingerprint != fp && s.cfg.Fault != NoFingerprint:
			s.mu.Unlock()
			s.problem(w, http.StatusUnprocessableEntity, "Idempotency-Key is already used", "the key was used with a different request body")
		case !rec.done:
			if burst {
				s.noteConflict(rk)
			}
			s.mu.Unlock()
			w.Header().Set("Retry-After", "1")
			s.problem(w, http.StatusConflict, "A request is outstanding for this Idempotency-Key", "")
		default:
			status, resp, location := rec.status, rec.body, rec.location
			s.mu.Unlock()
			s.respond(w, status, resp, location, true)
		}
		return
	}
	if s.cfg.Fault != NoConcurrencyGuard {
		s.records[rk] = &record{fingerprint: fp} // claim before executing
	}
	var wait *burstWait
	if burst {
		wait = s.burstWait(rk)
		if s.cfg.Fault == NoConcurrencyGuard {
			wait.executing++
			if wait.executing >= 2 {
				s.releaseLocked(wait)
			}
		}
	}
	s.mu.Unlock()

	if wait != nil {
		select {
		case <-wait.release:
		case <-r.Context().Done():
		}
	}

	s.mu.Lock()
	status, resp, location := s.execute(body)
	s.records[rk] = &record{fingerprint: fp, done: true, status: status, body: resp, location: location}
	s.mu.Unlock()
	s.respond(w, status, resp, location, false)
}

// execute creates a payment; s.mu must be held.
func (s *Server) execute(body []byte) (status int, resp []byte, location string) {
	s.payments++
	id := fmt.Sprintf("pay_%06d", s.payments)
	sum := sha256.Sum256(body)
	resp, _ = json.Marshal(map[string]any{
		"id":          id,
		"object":      "payment",
		"status":      "succeeded",
		"request_sha": fmt.Sprintf("%x", sum[:8]),
	})
	return http.StatusCreated, resp, PaymentsPath + "/" + id
}

func (s *Server) respond(w http.ResponseWriter, status int, body []byte, location string, replayed bool) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Location", location)
	if replayed {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	w.WriteHeader(status)
	w.Write(body)
}

func (s *Server) problem(w http.ResponseWriter, status int, title, detail string) {
	p := map[string]any{"title": title, "status": status}
	if detail != "" {
		p["detail"] = detail
	}
	if s.cfg.Publication == PublishProblemType {
		p["type"] = "/problems/idempotency-key"
	}
	body, _ := json.Marshal(p)
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	w.Write(body)
}

// burstWait returns the wait for rk, creating it; s.mu must be held.
func (s *Server) burstWait(rk recordKey) *burstWait {
	w, ok := s.waits[rk]
	if !ok {
		w = &burstWait{release: make(chan struct{})}
		s.waits[rk] = w
	}
	return w
}

// noteConflict counts a 409 for rk and releases its execution after the
// other Burst-1 duplicates; s.mu must be held.
func (s *Server) noteConflict(rk recordKey) {
	w := s.burstWait(rk)
	w.conflicts++
	if w.conflicts >= s.cfg.Burst-1 {
		s.releaseLocked(w)
	}
}

func (s *Server) releaseLocked(w *burstWait) {
	if !w.released {
		w.released = true
		close(w.release)
	}
}

// Errors of ParseKey.
var (
	ErrEmptyKey     = errors.New("checktest: empty key")
	ErrKeyTooLong   = errors.New("checktest: key longer than " + strconv.Itoa(MaxKeyLength) + " characters")
	ErrMalformedKey = errors.New("checktest: malformed key")
)

// ParseKey returns the key in an Idempotency-Key field value, by the rules
// of an idem server: a quoted sf-string ("abc", printable ASCII with \" and
// \\ escapes, optionally followed by parameters) or a bare key of letters,
// digits and "_-.:~/+=". It rejects empty and over-long keys.
func ParseKey(v string) (string, error) {
	key, err := keyspec.Parse(v)
	var kerr *keyspec.Error
	switch {
	case err == nil:
		return key, nil
	case !errors.As(err, &kerr):
		return "", fmt.Errorf("%w: %v", ErrMalformedKey, err)
	case kerr.Kind == keyspec.Empty:
		return "", ErrEmptyKey
	case kerr.Kind == keyspec.TooLong:
		return "", ErrKeyTooLong
	}
	return "", fmt.Errorf("%w: %s", ErrMalformedKey, kerr.Reason)
}
