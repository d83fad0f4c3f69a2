package idemclient

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"

	"github.com/idemkit/idem/internal/keyspec"
)

// ErrInvalidKey is returned when a key passed with [WithKey] cannot be sent:
// it is empty, longer than 255 characters, or not printable ASCII. With
// [Config.BareKey] a key must also be made of letters, digits and
// "_-.:~/+=" only, the characters a server following the draft accepts
// unquoted; idemclient refuses any other key rather than quote it behind
// the caller's back. These are the rules of the idem server, so a key
// idemclient sends is never rejected as malformed there.
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
// ("..." with \" and \\ escaped), or the bare key when bare is set. A key
// that cannot be sent bare is refused, never quoted instead.
func formatKey(key string, bare bool) (string, error) {
	field, err := keyspec.Format(key, bare)
	if err != nil {
		return "", fmt.Errorf("%w: %s", ErrInvalidKey, err)
	}
	return field, nil
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
