package proxy

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"hash"
	"net/http"
	"strings"
	"sync"

	"github.com/idemkit/idem/internal/bearer"
)

// SecretMinBytes is the shortest secret CredentialIdentity accepts.
const SecretMinBytes = 16

// Identity returns the client of a request, by which keys are scoped, and
// false when the request has none. It is idem.Config's ClientID.
type Identity func(r *http.Request) (string, bool)

// CredentialIdentity identifies a client by its credentials: the bearer
// token of "Authorization: Bearer ..." (parsed strictly, as
// bearer.FromHeader does), or the user and password of
// "Authorization: Basic ...". A request with two Authorization fields has
// no identity. The credential is never stored or logged: the
// client id is an HMAC-SHA256 of it under secret, so that a database dump
// does not reveal tokens and a proxy without the secret cannot forge ids.
//
// The proxy does not verify credentials; the upstream does. Because a replay
// is answered without asking the upstream, the id covers the whole
// credential (for Basic, the password too): a caller who knows only a user
// name and a key never gets that user's stored response.
func CredentialIdentity(secret []byte) (Identity, error) {
	if len(secret) < SecretMinBytes {
		return nil, errors.New("proxy: the identity secret must be at least 16 bytes")
	}
	secret = append([]byte(nil), secret...)
	// HMACs keyed with secret, each reset for its next use: a reset one
	// starts from its keyed state, without hashing the key again.
	macs := &sync.Pool{New: func() any { return hmac.New(sha256.New, secret) }}
	return func(r *http.Request) (string, bool) {
		if len(r.Header.Values("Authorization")) != 1 {
			return "", false // none, or two that the upstream might read differently
		}
		if token, err := bearer.FromHeader(r.Header); err == nil {
			return "bearer:" + mac(macs, "bearer", token), true
		}
		if user, pass, ok := r.BasicAuth(); ok && user != "" {
			return "basic:" + mac(macs, "basic", user, pass), true
		}
		return "", false
	}, nil
}

// mac is a hex HMAC-SHA256 of parts, with an HMAC of macs, each part
// preceded by its length so that different splits never collide, cut to
// 128 bits.
func mac(macs *sync.Pool, parts ...string) string {
	h := macs.Get().(hash.Hash)
	defer macs.Put(h)
	h.Reset()
	for _, p := range parts {
		var n [4]byte
		n[0], n[1], n[2], n[3] = byte(len(p)>>24), byte(len(p)>>16), byte(len(p)>>8), byte(len(p))
		h.Write(n[:])
		h.Write([]byte(p))
	}
	var sum [sha256.Size]byte
	return hex.EncodeToString(h.Sum(sum[:0])[:16])
}

// HeaderIdentity identifies a client by a header that a trusted gateway in
// front of the proxy sets, such as X-Client-Id. The gateway must remove the
// header from the requests it receives: anyone who can set it can read
// another client's stored responses.
func HeaderIdentity(name string) Identity {
	name = http.CanonicalHeaderKey(name)
	return func(r *http.Request) (string, bool) {
		v := r.Header.Values(name)
		if len(v) != 1 || strings.TrimSpace(v[0]) == "" {
			return "", false
		}
		return "header:" + strings.TrimSpace(v[0]), true
	}
}
