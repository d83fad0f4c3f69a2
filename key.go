package idem

import (
	"errors"
	"fmt"
	"net/http"
)

// HeaderKey is the request header that carries the idempotency key.
const HeaderKey = "Idempotency-Key"

// HeaderReplayed is the response header set to "true" on a replayed response.
const HeaderReplayed = "Idempotent-Replayed"

// MaxKeyLength is the longest key accepted, in characters (Stripe's limit).
const MaxKeyLength = 255

// Errors returned by parseKey. Each is reported to clients as a 400 problem.
var (
	errKeyEmpty     = errors.New("idem: idempotency key is empty")
	errKeyTooLong   = errors.New("idem: idempotency key is longer than 255 characters")
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
	values := h.Values(HeaderKey)
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
// to [MaxKeyLength] printable ASCII characters.
func parseKey(field string) (string, error) {
	s := trimSP(field)
	if s == "" {
		return "", &invalidKeyError{Err: errKeyEmpty, Reason: "the Idempotency-Key field is empty"}
	}
	if s[0] != '"' {
		return parseBareKey(s)
	}
	key, rest, err := parseSFString(s, MaxKeyLength)
	if err != nil {
		return "", err
	}
	if err := parseSFParams(rest); err != nil {
		return "", err
	}
	if key == "" {
		return "", &invalidKeyError{Err: errKeyEmpty, Reason: "the Idempotency-Key string is empty"}
	}
	if len(key) > MaxKeyLength {
		return "", tooLong(len(key))
	}
	return key, nil
}

func tooLong(n int) error {
	return &invalidKeyError{Err: errKeyTooLong, Reason: fmt.Sprintf("the key has %d characters; the limit is %d", n, MaxKeyLength)}
}

func malformed(reason string) error {
	return &invalidKeyError{Err: errKeyMalformed, Reason: reason}
}

func trimSP(s string) string {
	for len(s) > 0 && (s[0] == ' ' || s[0] == '\t') {
		s = s[1:]
	}
	for len(s) > 0 && (s[len(s)-1] == ' ' || s[len(s)-1] == '\t') {
		s = s[:len(s)-1]
	}
	return s
}

func isBareKeyChar(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	switch c {
	case '_', '-', '.', ':', '~', '/', '+', '=':
		return true
	}
	return false
}

func parseBareKey(s string) (string, error) {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !isBareKeyChar(c) {
			if c < 0x20 || c > 0x7e {
				return "", malformed(fmt.Sprintf("byte 0x%02x at position %d is not printable ASCII", c, i))
			}
			return "", malformed(fmt.Sprintf("character %q at position %d is not allowed in an unquoted key; quote the key as an sf-string", c, i))
		}
	}
	if len(s) > MaxKeyLength {
		return "", tooLong(len(s))
	}
	return s, nil
}

// parseSFString parses an RFC 9651 sf-string at the start of s and returns
// its value and the rest of s. A value longer than limit is an error.
func parseSFString(s string, limit int) (string, string, error) {
	buf := make([]byte, 0, len(s))
	for i := 1; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\\':
			i++
			if i == len(s) {
				return "", "", malformed("the key ends inside an escape sequence")
			}
			if s[i] != '"' && s[i] != '\\' {
				return "", "", malformed(fmt.Sprintf("invalid escape \\%c in the key string", s[i]))
			}
			buf = append(buf, s[i])
		case c == '"':
			return string(buf), s[i+1:], nil
		case c < 0x20 || c > 0x7e:
			return "", "", malformed(fmt.Sprintf("byte 0x%02x at position %d is not printable ASCII", c, i))
		default:
			buf = append(buf, c)
		}
		if len(buf) > limit {
			return "", "", tooLong(len(buf))
		}
	}
	return "", "", malformed("the key string has no closing quote")
}

// parseSFParams parses the parameters of an sf-item (";key=value" ...) and
// discards them. Anything else after the string is an error.
func parseSFParams(s string) error {
	for len(s) > 0 {
		if s[0] != ';' {
			return malformed("unexpected characters after the key string; send exactly one quoted string")
		}
		s = trimLeadingSP(s[1:])
		n := 0
		for n < len(s) && isParamKeyChar(s[n], n == 0) {
			n++
		}
		if n == 0 {
			return malformed("a parameter after the key has no valid name")
		}
		s = s[n:]
		if len(s) == 0 || s[0] != '=' {
			continue // a parameter without a value is the boolean true
		}
		rest, err := skipBareItem(s[1:])
		if err != nil {
			return err
		}
		s = rest
	}
	return nil
}

func trimLeadingSP(s string) string {
	for len(s) > 0 && s[0] == ' ' {
		s = s[1:]
	}
	return s
}

func isParamKeyChar(c byte, first bool) bool {
	if 'a' <= c && c <= 'z' || c == '*' {
		return true
	}
	return !first && ('0' <= c && c <= '9' || c == '_' || c == '-' || c == '.')
}

// skipBareItem skips one RFC 9651 bare item: a string, token, number,
// boolean, byte sequence, date or display string.
func skipBareItem(s string) (string, error) {
	if s == "" {
		return "", malformed("a parameter after the key has an empty value")
	}
	switch c := s[0]; {
	case c == '"':
		_, rest, err := parseSFString(s, len(s))
		return rest, err
	case c == '%': // display string: %"..." with %xx escapes
		if len(s) < 2 || s[1] != '"' {
			return "", malformed("invalid display string parameter")
		}
		for i := 2; i < len(s); i++ {
			switch {
			case s[i] == '"':
				return s[i+1:], nil
			case s[i] < 0x20 || s[i] > 0x7e:
				return "", malformed("invalid display string parameter")
			}
		}
		return "", malformed("unterminated display string parameter")
	case c == '@': // date: @ and an integer
		rest, err := skipBareItem(s[1:])
		if err != nil || len(s) < 2 || (s[1] != '-' && (s[1] < '0' || s[1] > '9')) {
			return "", malformed("invalid date parameter")
		}
		return rest, nil
	case c == '?':
		if len(s) < 2 || (s[1] != '0' && s[1] != '1') {
			return "", malformed("a boolean parameter must be ?0 or ?1")
		}
		return s[2:], nil
	case c == ':':
		for i := 1; i < len(s); i++ {
			if s[i] == ':' {
				return s[i+1:], nil
			}
			if !isBase64Char(s[i]) {
				return "", malformed("invalid byte sequence parameter")
			}
		}
		return "", malformed("unterminated byte sequence parameter")
	case c == '-' || '0' <= c && c <= '9':
		i := 1
		for i < len(s) && ('0' <= s[i] && s[i] <= '9' || s[i] == '.') {
			i++
		}
		return s[i:], nil
	case 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || c == '*':
		i := 1
		for i < len(s) && isTokenChar(s[i]) {
			i++
		}
		return s[i:], nil
	default:
		return "", malformed("invalid parameter value after the key")
	}
}

func isBase64Char(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '+' || c == '/' || c == '='
}

// isTokenChar reports whether c is a tchar, ":" or "/" (RFC 9651 sf-token).
func isTokenChar(c byte) bool {
	if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' {
		return true
	}
	switch c {
	case '!', '#', '$', '%', '&', '\'', '*', '+', '-', '.', '^', '_', '`', '|', '~', ':', '/':
		return true
	}
	return false
}
