package idem

import (
	"encoding/json"
	"fmt"
	"html"
	"net/http"
	"slices"
	"strconv"
	"strings"
)

// ProblemContentType is the media type of RFC 9457 problem documents.
const ProblemContentType = "application/problem+json"

// Problem is an RFC 9457 problem document. Type is a URI reference that
// names the kind of problem; Code is the same name without the prefix, for
// programs that switch on it.
type Problem struct {
	Type   string `json:"type"`             // the base and the code, such as "/problems/idempotency-key-reused"
	Title  string `json:"title"`            // the same for every problem of the kind
	Status int    `json:"status"`           // the HTTP status code
	Detail string `json:"detail,omitempty"` // this occurrence, for a person
	Code   string `json:"code"`             // a ProblemCode, or an application's code

	// Fields lists the top-level fields, as JSON pointers, that differ from
	// the first request with this key (idempotency-key-reused only).
	Fields []string `json:"fields,omitempty"`
	// OriginalRequest is "METHOD /path" of the first request with this key,
	// when the key was first used for a different endpoint.
	OriginalRequest string `json:"original_request,omitempty"`
	// Param names the request parameter that failed validation, for an
	// application's own validation problems.
	Param string `json:"param,omitempty"`
}

// ProblemCode is the stable, machine-readable name of a kind of problem,
// also the last segment of its type URI. The constants below are the codes
// idem answers with; an application names its own in [ProblemKind].
type ProblemCode string

// The problem codes of the contract. [ProblemCode.Kind] describes each.
const (
	// ProblemKeyMissing: 400, the route requires an Idempotency-Key and
	// the request has none.
	ProblemKeyMissing ProblemCode = "idempotency-key-missing"
	// ProblemKeyMalformed: 400, the key is empty, too long, not printable
	// ASCII, or sent in more than one field.
	ProblemKeyMalformed ProblemCode = "idempotency-key-malformed"
	// ProblemKeyReused: 422, the key was first used with another request.
	ProblemKeyReused ProblemCode = "idempotency-key-reused"
	// ProblemKeyInFlight: 409, the first request with the key is still in
	// flight (a record with [idemstore.StatusInFlight], counted as [ResultInFlight]),
	// or another request took the key over.
	ProblemKeyInFlight ProblemCode = "idempotency-key-in-flight"
	// ProblemBodyMalformed: 400, the body or query string does not parse,
	// or the request sends Content-Type in more than one field.
	ProblemBodyMalformed ProblemCode = "request-body-malformed"
	// ProblemBodyTooLarge: 413, the body is over [Config.MaxBodyBytes].
	ProblemBodyTooLarge ProblemCode = "request-body-too-large"
	// ProblemBodyTimeout: 408, the body did not arrive before a read
	// deadline: the server's ReadTimeout or the request's deadline.
	ProblemBodyTimeout ProblemCode = "request-body-timeout"
	// ProblemMediaType: 415, the body is neither JSON nor form data, or is
	// in a charset other than UTF-8.
	ProblemMediaType ProblemCode = "unsupported-media-type"
	// ProblemUnauthenticated: 401, [Config.ClientID] found no client.
	ProblemUnauthenticated ProblemCode = "unauthenticated"
	// ProblemUnavailable: 503, the store failed; the detail says whether
	// the request was processed.
	ProblemUnavailable ProblemCode = "store-unavailable"
	// ProblemOutcomeUnknown: whether the request took effect is unknown,
	// because the answer of what acts on it was lost. The middleware
	// answers it with 503 when the connection to the store failed after
	// the result's commit was sent ([idemstore.ErrOutcomeUnknown]): retrying with
	// the same key is safe and finds out. idemproxy answers it with 502 or
	// 504 when its upstream's answer was lost; what a retry gets then
	// depends on the route's policy, which the detail says. One code, so
	// that a client handles the case once, whoever answers.
	ProblemOutcomeUnknown ProblemCode = "outcome-unknown"
	// ProblemKeyNotFound: 404, from [NewStatusHandler]: the calling client
	// has no key with this value (never used, past retention, or another
	// client's: the answers are identical).
	ProblemKeyNotFound ProblemCode = "idempotency-key-not-found"
	// ProblemOperationUnfinished: 503, a phased operation ([Phases])
	// stopped at a recovery point before it finished, for instance because
	// another system's answer was lost. What it completed is recorded;
	// retrying with the same key resumes it.
	ProblemOperationUnfinished ProblemCode = "operation-unfinished"
)

// problemKinds describes idem's codes. Titles follow the IETF draft's
// wording where it has one.
var problemKinds = [...]ProblemKind{
	{ProblemKeyMissing, http.StatusBadRequest, "Idempotency-Key is missing",
		"This endpoint requires an Idempotency-Key header. Generate one key per logical operation (a v4 UUID is fine), and send the same key on every retry of that operation."},
	{ProblemKeyMalformed, http.StatusBadRequest, "Idempotency-Key is malformed",
		"The Idempotency-Key must be one sf-string (\"...\") or bare token of 1 to 255 printable ASCII characters, sent in exactly one header field. Fix the client; the request was not processed."},
	{ProblemKeyReused, http.StatusUnprocessableEntity, "Idempotency-Key is already used",
		"The key was first used with a different request. The fields that differ are listed in \"fields\". This is a client bug: use a new key for a new operation, and never change the body of a retry."},
	{ProblemKeyInFlight, http.StatusConflict, "A request is outstanding for this Idempotency-Key",
		"The first request with this key is still being processed. Wait for the number of seconds in Retry-After and retry with the same key and body: you will get its result."},
	{ProblemBodyMalformed, http.StatusBadRequest, "Request body is malformed",
		"The body does not parse as its Content-Type says, a JSON object names a member twice, or the request has more than one Content-Type field. The request was not processed."},
	{ProblemBodyTooLarge, http.StatusRequestEntityTooLarge, "Request body is too large",
		"The body is larger than this endpoint accepts. The request was not processed."},
	{ProblemBodyTimeout, http.StatusRequestTimeout, "Request body timed out",
		"The body did not arrive before the server's read timeout or the request's deadline; the detail says which. The request was not processed: send the whole body promptly and retry with the same key."},
	{ProblemMediaType, http.StatusUnsupportedMediaType, "Unsupported media type",
		"Send application/json or application/x-www-form-urlencoded, in UTF-8 (charset=utf-8, or no charset). The request was not processed."},
	{ProblemUnauthenticated, http.StatusUnauthorized, "Authentication required",
		"Idempotency keys are scoped to the authenticated client, and this request has no client identity. Send valid credentials."},
	{ProblemUnavailable, http.StatusServiceUnavailable, "Idempotency store unavailable",
		"The service cannot reach its idempotency store. The detail says whether the request was processed. Retry with the same key after Retry-After."},
	{ProblemOutcomeUnknown, http.StatusServiceUnavailable, "Outcome unknown",
		"The answer of what acts on the request was lost, so whether the request took effect is unknown. A service answers 503 when the connection to its idempotency store was lost after the result was sent to be committed: retry with the same Idempotency-Key after Retry-After, and the retry returns the result if it took effect, and runs the request if not. A proxy answers 502 or 504 when its upstream's answer was lost: the detail says what a retry with the same key gets. Never retry with a new key: that could do it twice."},
	{ProblemResponseNotRetained, http.StatusOK, "Response not retained",
		"The first request with this key was processed, and its response, streamed to the client, was larger than the service stores for replay, or broke off. The status member and original_status are the original status code, and location its Location header if it had one. The request is not run again: fetch the result another way, such as from the Location."},
	{ProblemKeyNotFound, http.StatusNotFound, "Idempotency-Key not found",
		"You have no idempotency key with this value: it was never used by you, or it is past the retention period and forgotten. Keys of other clients are never shown."},
	{ProblemOperationUnfinished, http.StatusServiceUnavailable, "Operation unfinished",
		"The operation stopped before it finished, for instance because another system did not answer. What it completed is recorded and is not done again. Retry with the same Idempotency-Key after Retry-After, never with a new one: the retry resumes where it stopped."},
}

// Kind describes one of idem's problem codes: its status, title and the
// explanation served at its type URI. For a code that is not idem's it
// returns a kind with only the code set.
func (c ProblemCode) Kind() ProblemKind {
	for _, k := range problemKinds {
		if k.Code == c {
			return k
		}
	}
	return ProblemKind{Code: c}
}

// Problems returns every kind of problem idem answers with, in a new slice.
func Problems() []ProblemKind {
	return slices.Clone(problemKinds[:])
}

// ProblemKind describes one kind of problem: idem's own (see
// [ProblemCode.Kind]) or an application's, which it writes with
// [ProblemKind.New] and [WriteProblem] and serves with [ProblemsHandler].
type ProblemKind struct {
	Code   ProblemCode // stable and machine-readable; the last segment of the type URI
	Status int         // the HTTP status code
	Title  string      // short, the same for every occurrence
	// About explains, for the page served at the type URI, when the problem
	// happens and what a client should do.
	About string
}

// ProblemTypeBaseDefault is the default prefix of problem type URIs.
const ProblemTypeBaseDefault = "/problems/"

// New returns a problem of this kind with a detail message. base prefixes
// the type URI, as [Config.ProblemTypeBase] does.
func (k ProblemKind) New(base, detail string) *Problem {
	return &Problem{Type: base + string(k.Code), Title: k.Title, Status: k.Status, Detail: detail, Code: string(k.Code)}
}

// WriteProblem writes p as application/problem+json. retryAfter > 0 adds a
// Retry-After header, in seconds.
func WriteProblem(w http.ResponseWriter, p *Problem, retryAfter int) {
	body, err := json.Marshal(p)
	if err != nil { // a Problem has only strings and ints
		panic(fmt.Sprintf("idem: marshal problem: %v", err))
	}
	h := w.Header()
	h.Set("Content-Type", ProblemContentType)
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Length", strconv.Itoa(len(body)+1))
	if retryAfter > 0 {
		h.Set("Retry-After", strconv.Itoa(retryAfter))
	}
	w.WriteHeader(p.Status)
	w.Write(append(body, '\n'))
}

// ProblemsHandler serves a short page for each problem type under its type
// URI, so that the relative URIs in problem documents resolve: idem's own
// kinds and the application's extra ones. Mount it at the type base, for
// example mux.Handle("GET /problems/", idem.ProblemsHandler()).
func ProblemsHandler(extra ...ProblemKind) http.Handler {
	kinds := append(Problems(), extra...)
	byCode := make(map[ProblemCode]ProblemKind, len(kinds))
	for _, k := range kinds {
		byCode[k.Code] = k
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		code := r.URL.Path[strings.LastIndexByte(r.URL.Path, '/')+1:]
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		if code == "" {
			var b strings.Builder
			b.WriteString("<!doctype html><title>Problem types</title><h1>Problem types</h1><ul>")
			for _, k := range kinds {
				fmt.Fprintf(&b, "<li><a href=\"%s\">%s</a>: %d %s</li>", k.Code, k.Code, k.Status, html.EscapeString(k.Title))
			}
			b.WriteString("</ul>")
			w.Write([]byte(b.String()))
			return
		}
		k, ok := byCode[ProblemCode(code)]
		if !ok {
			http.NotFound(w, r)
			return
		}
		fmt.Fprintf(w, "<!doctype html><title>%s</title><h1>%s</h1><p>Status: %d. Code: <code>%s</code>.</p><p>%s</p>",
			html.EscapeString(k.Title), html.EscapeString(k.Title), k.Status, k.Code, html.EscapeString(k.About))
	})
}
