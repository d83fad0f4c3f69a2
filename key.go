package idem

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/idemkit/idem/internal/keyspec"
)

// HeaderKey is the request header that carries the idempotency key.
const HeaderKey = "Idempotency-Key"

// HeaderReplayed is the response header set to "true" on a replayed response.
const HeaderReplayed = "Idempotent-Replayed"

// HeaderOriginalTrace is the response header of a replay and of a 409 that
// carries the trace id (32 hex digits) of the request that ran the key, or
// holds it, when [Config.ExposeOriginalTrace] is set.
const HeaderOriginalTrace = "Idempotent-Original-Trace"

// MaxKeyLength is the longest key accepted, in characters (Stripe's limit).
// The length of a quoted key is counted after unescaping.
const MaxKeyLength = keyspec.MaxLength

// Errors returned by parseKey. Each is reported to clients as a 400 problem.
var (
	errKeyEmpty     = errors.New("idem: idempotency key is empty")
	errKeyTooLong   = errors.New("idem: idempotency key is longer than " + strconv.Itoa(MaxKeyLength) + " characters")
	errKeyMalformed = errors.New("idem: idempotency key is malformed")
	errKeyRepeated  = errors.New("idem: more than one Idempotency-Key field")
)

// invalidKeyError describes why a key could not be parsed.
type invalidKeyError struct {
	Err    error  // one of errKeyEmpty, errKeyTooLong, errKeyMalformed, errKeyRepeated
	Reason string // a short explanation safe to show to the client
}

func (e *invalidKeyError) Error() string { return e.Err.Error() + ": " + e.Reason }

// Unwrap returns the sentinel error.
func (e *invalidKeyError) Unwrap() error { return e.Err }

// keyFromHeader returns the key of a request, and false when the request has
// no Idempotency-Key field. Two or more fields are an error, as is any
// field that parseKey rejects.
func keyFromHeader(h http.Header) (string, bool, error) {
	values := h[HeaderKey] // canonical: no lookup of its canonical form
	switch len(values) {
	case 0:
		return "", false, nil
	case 1:
		key, err := parseKey(values[0])
		return key, true, err
	default:
		return "", true, &invalidKeyError{Err: errKeyRepeated, Reason: fmt.Sprintf("the request has %d Idempotency-Key fields; send exactly one", len(values))}
	}
}

// parseKey parses the value of one Idempotency-Key field.
//
// The draft standard defines the field as an RFC 9651 Structured Field Item
// whose value is an sf-string, so the key is quoted on the wire:
//
//	Idempotency-Key: "8e03978e-40d5-43e8-bc93-6894a57f9324"
//
// Parameters after the string (";name=value") are parsed and ignored. Many
// real clients, Stripe's SDKs among them, send a bare token instead; a bare
// key of letters, digits and "_-.:~/+=" is accepted too. The key must be 1
// to [MaxKeyLength] printable ASCII characters. The rules are those of
// internal/keyspec, which idemclient formats keys by, so every field it
// sends is accepted here.
func parseKey(field string) (string, error) {
	key, err := keyspec.Parse(field)
	if err != nil {
		return "", keyError(err)
	}
	return key, nil
}

// keyFromPath returns the key that a segment of a URL path names, decoded:
// the key itself ("order-1", "a/b" sent as a%2Fb), or the sf-string that an
// Idempotency-Key field carries ("\"order-1\"", sent as %22order-1%22),
// parsed as parseKey parses the field. A segment that starts with '"' is
// an sf-string, as a field that does is, so a key that itself starts with
// '"' is named by its sf-string. The key in a path may hold any character
// of a key, not only those of a bare field.
func keyFromPath(segment string) (string, error) {
	if strings.HasPrefix(segment, `"`) {
		return parseKey(segment)
	}
	if err := keyspec.Check(segment); err != nil {
		return "", keyError(err)
	}
	return segment, nil
}

// keyError turns a keyspec error into the error clients are shown.
func keyError(err error) error {
	var kerr *keyspec.Error
	if !errors.As(err, &kerr) {
		return &invalidKeyError{Err: errKeyMalformed, Reason: "the key could not be parsed"}
	}
	sentinel := errKeyMalformed
	switch kerr.Kind {
	case keyspec.Empty:
		sentinel = errKeyEmpty
	case keyspec.TooLong:
		sentinel = errKeyTooLong
	}
	return &invalidKeyError{Err: sentinel, Reason: kerr.Reason}
}
