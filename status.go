package idem

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/internal/keyspec"
)

// Key states reported by the handler of [NewStatusHandler].
const (
	KeyStateInFlight  = "in_flight"
	KeyStateCompleted = "completed"
)

// KeyStatus is the JSON body of the 200 answer of the handler that
// [NewStatusHandler] returns.
type KeyStatus struct {
	Key string `json:"key"`
	// State is [KeyStateInFlight] or [KeyStateCompleted].
	State string `json:"state"`
	// Method and Path are the first request's, "POST" and "/v1/payments".
	Method string `json:"method"`
	Path   string `json:"path"`
	// Created is when the key was first used; Expires is Created plus the
	// retention: after it the key is forgotten and may be used again.
	Created time.Time `json:"created"`
	Expires time.Time `json:"expires"`
	// ResponseStatus is the stored response's status code (completed only).
	ResponseStatus int `json:"response_status,omitempty"`
	// Link is the stored response's Location (completed only, when it had
	// one): the resource the request created.
	Link string `json:"link,omitempty"`
}

// keyNotFoundDetail is the one detail of every 404: it says nothing that
// would tell another client's key from an unknown one.
const keyNotFoundDetail = "You have no idempotency key with this value: it was never used by you, or it expired."

// NewStatusHandler returns a handler that tells a client what became of one
// of its keys, for GET /v1/idempotency-keys/{key}. It reads the key with
// the pattern's "key" wildcard, or else the last segment of the path, as
// the key itself (escape "/" in a key as %2F) or as the sf-string that the
// Idempotency-Key field carries (%22order-1%22 names the key order-1). It
// answers:
//
//   - 200 with a [KeyStatus] for a key of the calling client;
//   - 404 ([ProblemKeyNotFound]) for a key that is unknown, past retention,
//     or another client's, byte for byte the same in every case;
//   - 400 for a malformed key, 401 without a client, 503 when the store
//     fails.
//
// It only reads: it never runs the operation nor replays its response.
func NewStatusHandler(store idemstore.KeyReader, cfg *Config) (http.Handler, error) {
	if store == nil {
		return nil, errors.New("idem: a KeyReader is required")
	}
	c, err := build(cfg)
	if err != nil {
		return nil, err
	}
	if c.ClientID == nil {
		return nil, errors.New("idem: Config.ClientID is required: keys are scoped by client")
	}
	return &statusHandler{store: store, cfg: c}, nil
}

type statusHandler struct {
	store idemstore.KeyReader
	cfg   *Config
}

func (h *statusHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	client, ok := h.cfg.ClientID(r)
	if !ok || client == "" {
		h.problem(w, ProblemUnauthenticated, "The request carries no client identity.", 0)
		return
	}
	key, err := statusKey(r)
	if err != nil {
		h.problem(w, ProblemKeyMalformed, "The key in the path is not a valid Idempotency-Key: "+reasonOf(err, "the key could not be parsed")+".", 0)
		return
	}
	noteScope(r.Context(), idemstore.Scope{ClientID: client, Key: key})
	ctx, cancel := context.WithTimeout(r.Context(), h.cfg.StoreTimeout)
	defer cancel()
	rec, err := h.store.GetKey(ctx, idemstore.Scope{ClientID: client, Key: key})
	switch {
	case errors.Is(err, idemstore.ErrKeyNotFound):
		h.problem(w, ProblemKeyNotFound, keyNotFoundDetail, 0)
		return
	case err != nil:
		if r.Context().Err() == nil {
			h.cfg.Logger.ErrorContext(r.Context(), "idem: key status lookup failed", "client_id", client, "key_digest", keyspec.Digest(key), "err", err)
		}
		h.problem(w, ProblemUnavailable, "The idempotency store did not answer; retry after Retry-After.", unavailableRetryAfter)
		return
	case idemstore.Expired(rec.CreatedAt, h.cfg.Now(), h.cfg.Retention):
		h.problem(w, ProblemKeyNotFound, keyNotFoundDetail, 0)
		return
	}
	st := KeyStatus{
		Key: key, State: KeyStateInFlight, Method: rec.Method, Path: rec.Path,
		Created: rec.CreatedAt.UTC(), Expires: rec.CreatedAt.Add(h.cfg.Retention).UTC(),
	}
	if rec.Status == idemstore.StatusCompleted && rec.Response != nil {
		st.State = KeyStateCompleted
		st.ResponseStatus = rec.Response.StatusCode
		st.Link = rec.Response.Header.Get("Location")
	}
	body, err := json.Marshal(st)
	if err != nil { // strings, ints and times only
		panic(fmt.Sprintf("idem: marshal key status: %v", err))
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)+1))
	w.WriteHeader(http.StatusOK)
	w.Write(append(body, '\n'))
}

// statusKey returns the key that the request's path names (see
// keyFromPath): the pattern's "key" wildcard, or else the last segment of
// the path, split where the client wrote "/", so that a key with "/" sent
// as %2F is one segment under a prefix pattern too.
func statusKey(r *http.Request) (string, error) {
	segment := r.PathValue("key")
	if segment == "" {
		escaped := r.URL.EscapedPath()
		var err error
		if segment, err = url.PathUnescape(escaped[strings.LastIndexByte(escaped, '/')+1:]); err != nil {
			return "", &invalidKeyError{Err: errKeyMalformed, Reason: "the last segment of the path has a malformed percent-escape"}
		}
	}
	return keyFromPath(segment)
}

func (h *statusHandler) problem(w http.ResponseWriter, code ProblemCode, detail string, retryAfter int) {
	WriteProblem(w, code.Kind().New(h.cfg.ProblemTypeBase, detail), retryAfter)
}
