package idem

import (
	"net/http"

	"github.com/idemkit/idem/internal/keyspec"
)

// Outcome says what the middleware does with a handler's response.
type Outcome int

const (
	// OutcomeStore stores the response; retries replay it.
	OutcomeStore Outcome = iota
	// OutcomeRelease stores nothing and frees the key: the handler's writes
	// roll back and a retry with the same key runs the handler again.
	OutcomeRelease
)

// OutcomePolicy decides, from the status code, whether a handler's response
// is stored or the key released. [DefaultOutcomePolicy] and
// [StoreServerErrorsPolicy] are the two built in.
type OutcomePolicy func(status int) Outcome

// notProcessed holds the statuses by which a handler says it did not
// process the request: validation (400, 413, 415), authentication and
// authorisation (401, 403), a missing resource (404), a request that
// timed out before it was read whole (408) and rate limiting (429). Both built-in policies release the key on them, so a corrected
// retry with the same key runs the handler.
var notProcessed = map[int]bool{
	http.StatusBadRequest:            true,
	http.StatusUnauthorized:          true,
	http.StatusForbidden:             true,
	http.StatusNotFound:              true,
	http.StatusRequestTimeout:        true,
	http.StatusRequestEntityTooLarge: true,
	http.StatusUnsupportedMediaType:  true,
	http.StatusTooManyRequests:       true,
}

// NotProcessed reports whether status is one by which a handler says it did
// not process the request (400, 401, 403, 404, 408, 413, 415 and 429), for
// policies of one's own.
func NotProcessed(status int) bool { return notProcessed[status] }

// DefaultOutcomePolicy stores every response except the not-processed 4xx
// statuses and 5xx. A 5xx releases the key: the business writes roll back
// and the client may retry with the same key. This suits handlers whose
// work is safe to repeat, which the atomic mode and derived downstream keys
// make true.
func DefaultOutcomePolicy(status int) Outcome {
	if NotProcessed(status) || status >= 500 {
		return OutcomeRelease
	}
	return OutcomeStore
}

// StoreServerErrorsPolicy is Stripe's v1 behaviour: a 5xx is stored and
// replayed like any other result, so a client that retries gets the same
// 5xx. The not-processed 4xx statuses are still released.
func StoreServerErrorsPolicy(status int) Outcome {
	if NotProcessed(status) {
		return OutcomeRelease
	}
	return OutcomeStore
}

// RequirePolicy decides whether a request must carry an Idempotency-Key.
type RequirePolicy func(r *http.Request) bool

// RequireNonIdempotent requires a key on POST and PATCH, the methods that
// are not idempotent by definition.
func RequireNonIdempotent(r *http.Request) bool { return keyspec.NonIdempotent(r.Method) }

// RequireNone requires no key: a request with a key is still handled
// idempotently, a request without one passes through.
func RequireNone(*http.Request) bool { return false }

// applies reports whether the middleware handles a method at all. GET, HEAD,
// OPTIONS, PUT, DELETE and TRACE are idempotent by definition and pass
// through untouched.
func applies(method string) bool {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodPut, http.MethodDelete, http.MethodTrace:
		return false
	}
	return true
}
