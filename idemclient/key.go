package idemclient

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
)

// maxKeyLength is the longest key idemclient formats, in characters: the
// limit of Stripe and of most servers that follow the draft.
const maxKeyLength = 255

// ErrInvalidKey is returned when a key passed with [WithKey] cannot be sent:
// it is empty, longer than 255 characters, not printable ASCII, or, with
// [Config.BareKey], holds a space, quote, comma, semicolon or backslash.
var ErrInvalidKey = errors.New("idemclient: invalid idempotency key")

// NewKey returns a new random idempotency key: 26 characters of the RFC 4648
// base32 alphabet (A-Z, 2-7) carrying 130 bits from crypto/rand. idemclient
// calls it once per logical operation; call it yourself to store the key
// before the first attempt and pass it with [WithKey].
func NewKey() string { return rand.Text() }

type keyContextKey struct{}

// WithKey returns a copy of ctx that makes idemclient send key as the
// Idempotency-Key of a POST or PATCH request made with it, instead of a new
// random key. An Idempotency-Key header already on the request takes
// precedence. Never attach one key to two different requests: the server
// answers the second with 422.
func WithKey(ctx context.Context, key string) context.Context {
	return context.WithValue(ctx, keyContextKey{}, key)
}

// KeyFromContext returns the key attached to ctx by [WithKey].
func KeyFromContext(ctx context.Context) (string, bool) {
	key, ok := ctx.Value(keyContextKey{}).(string)
	return key, ok
}

// keyField returns the Idempotency-Key field value for a request made with
// ctx: the key from WithKey, or else a new one.
func (t *transport) keyField(ctx context.Context) (string, error) {
	key, ok := KeyFromContext(ctx)
	if !ok {
		key = NewKey()
	}
	return formatKey(key, t.cfg.BareKey)
}

// formatKey returns the field value that carries key: an RFC 9651 sf-string
// ("..." with \" and \\ escaped), or the bare key when bare is set.
func formatKey(key string, bare bool) (string, error) {
	if key == "" {
		return "", fmt.Errorf("%w: the key is empty", ErrInvalidKey)
	}
	if len(key) > maxKeyLength {
		return "", fmt.Errorf("%w: the key has %d characters; the limit is %d", ErrInvalidKey, len(key), maxKeyLength)
	}
	for i := 0; i < len(key); i++ {
		c := key[i]
		if c < 0x20 || c > 0x7e {
			return "", fmt.Errorf("%w: byte 0x%02x at position %d is not printable ASCII", ErrInvalidKey, c, i)
		}
		if bare && (c == ' ' || c == '"' || c == ',' || c == ';' || c == '\\') {
			return "", fmt.Errorf("%w: character %q at position %d cannot be sent unquoted", ErrInvalidKey, c, i)
		}
	}
	if bare {
		return key, nil
	}
	var b strings.Builder
	b.Grow(len(key) + 2)
	b.WriteByte('"')
	for i := 0; i < len(key); i++ {
		if key[i] == '"' || key[i] == '\\' {
			b.WriteByte('\\')
		}
		b.WriteByte(key[i])
	}
	b.WriteByte('"')
	return b.String(), nil
}

// parseKey returns the key carried by an Idempotency-Key field value: the
// content of a leading sf-string, or the trimmed value when it is not
// quoted. It is lenient: it reports keys in errors and never fails.
func parseKey(field string) string {
	s := strings.Trim(field, " \t")
	if !strings.HasPrefix(s, `"`) {
		return s
	}
	var b strings.Builder
	for i := 1; i < len(s); i++ {
		switch c := s[i]; c {
		case '"':
			return b.String()
		case '\\':
			if i+1 < len(s) {
				i++
				b.WriteByte(s[i])
			}
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}
