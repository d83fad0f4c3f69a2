// Package bearer authenticates HTTP requests by bearer token (RFC 6750) for
// the reference services: a strict parser of the Authorization field and a
// token table that keeps only SHA-256 digests of the tokens and compares
// them in constant time.
//
// Errors and messages never contain a token: a token is a secret, and a
// value given where a token was expected may be one.
package bearer

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"net/http"
	"strings"
)

// Errors of FromHeader.
var (
	ErrMissing   = errors.New("bearer: no Authorization field")
	ErrMultiple  = errors.New("bearer: more than one Authorization field")
	ErrScheme    = errors.New("bearer: the scheme is not Bearer")
	ErrMalformed = errors.New("bearer: the token is not token68")
)

// FromHeader returns the bearer token of a request's header. It accepts
// exactly one Authorization field of the form "Bearer" 1*SP token68
// (RFC 9110 section 11.4, RFC 6750 section 2.1): the scheme in any case,
// the token of the characters A-Z a-z 0-9 - . _ ~ + / followed by any number
// of "=". Nothing else is trimmed: a token preceded or followed by any
// other space, Unicode or not, is malformed.
func FromHeader(h http.Header) (string, error) {
	fields := h.Values("Authorization")
	switch {
	case len(fields) == 0:
		return "", ErrMissing
	case len(fields) > 1:
		return "", ErrMultiple
	}
	scheme, token, ok := strings.Cut(fields[0], " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", ErrScheme
	}
	token = strings.TrimLeft(token, " ")
	if !IsToken68(token) {
		return "", ErrMalformed
	}
	return token, nil
}

// IsToken68 reports whether s is a non-empty token68 (RFC 9110 section
// 11.2).
func IsToken68(s string) bool {
	body := strings.TrimRight(s, "=")
	if body == "" {
		return false
	}
	for i := 0; i < len(body); i++ {
		c := body[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case c == '-', c == '.', c == '_', c == '~', c == '+', c == '/':
		default:
			return false
		}
	}
	return true
}

// Tokens maps tokens to client ids. It holds the SHA-256 digest of each
// token, never the token.
type Tokens struct {
	entries []entry
}

type entry struct {
	digest [sha256.Size]byte
	client string
}

// Parse reads tokens written as token=client,token=client. An error names
// the pair by its position, never by its text.
func Parse(s string) (*Tokens, error) {
	pairs := strings.Split(s, ",")
	t := &Tokens{}
	for i, pair := range pairs {
		token, client, ok := strings.Cut(strings.TrimSpace(pair), "=")
		switch {
		case !ok || token == "" || client == "":
			return nil, fmt.Errorf("bearer: token pair %d of %d: want token=client", i+1, len(pairs))
		case !IsToken68(token):
			return nil, fmt.Errorf("bearer: token pair %d of %d: the token may hold only A-Z a-z 0-9 - . _ ~ + /", i+1, len(pairs))
		}
		if err := t.add(token, client); err != nil {
			return nil, fmt.Errorf("bearer: token pair %d of %d: %w", i+1, len(pairs), err)
		}
	}
	return t, nil
}

// New returns the tokens of a map from token to client id.
func New(m map[string]string) (*Tokens, error) {
	t := &Tokens{}
	for token, client := range m {
		if !IsToken68(token) || client == "" {
			return nil, fmt.Errorf("bearer: the token of client %q is not token68, or the client is empty", client)
		}
		if err := t.add(token, client); err != nil {
			return nil, err
		}
	}
	if len(t.entries) == 0 {
		return nil, errors.New("bearer: no tokens")
	}
	return t, nil
}

func (t *Tokens) add(token, client string) error {
	d := sha256.Sum256([]byte(token))
	if _, ok := t.lookup(d); ok {
		return errors.New("the token is given twice")
	}
	t.entries = append(t.entries, entry{digest: d, client: client})
	return nil
}

// Clients returns the client ids, in the order they were given.
func (t *Tokens) Clients() []string {
	out := make([]string, len(t.entries))
	for i, e := range t.entries {
		out[i] = e.client
	}
	return out
}

// Client returns the client id of token. It compares the token's digest
// with every known digest in constant time, so the time taken tells
// nothing of how much of a token matched.
func (t *Tokens) Client(token string) (string, bool) {
	return t.lookup(sha256.Sum256([]byte(token)))
}

func (t *Tokens) lookup(d [sha256.Size]byte) (string, bool) {
	var client string
	found := 0
	for _, e := range t.entries {
		eq := subtle.ConstantTimeCompare(d[:], e.digest[:])
		if eq == 1 {
			client = e.client
		}
		found |= eq
	}
	return client, found == 1
}

// Authenticate returns the client id of the request's bearer token.
func (t *Tokens) Authenticate(r *http.Request) (string, bool) {
	token, err := FromHeader(r.Header)
	if err != nil {
		return "", false
	}
	return t.Client(token)
}
