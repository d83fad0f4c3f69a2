package idemoutbox

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// The Standard Webhooks headers.
const (
	HeaderID        = "webhook-id"
	HeaderTimestamp = "webhook-timestamp"
	HeaderSignature = "webhook-signature"
)

// secretPrefix starts a secret's written form.
const secretPrefix = "whsec_"

// secretSize is the number of random bytes of a secret from NewSecret.
const secretSize = 32

// The sizes of a secret's key bytes that [ParseSecret] accepts, as
// Standard Webhooks asks: a shorter key is too easy to guess.
const (
	SecretMinSize = 24
	SecretMaxSize = 64
)

// ToleranceDefault is the default of [VerifyOpts.Tolerance].
const ToleranceDefault = 5 * time.Minute

// Errors of [ParseSecret], [Verify] and [VerifyRequest]. Verification
// errors wrap ErrVerification, so a receiver answers all of them alike.
var (
	ErrInvalidSecret  = errors.New("idemoutbox: a secret is written whsec_ followed by the base64 of 24 to 64 bytes")
	ErrVerification   = errors.New("idemoutbox: webhook verification failed")
	ErrMissingHeader  = fmt.Errorf("%w: missing webhook-id, webhook-timestamp or webhook-signature", ErrVerification)
	ErrBadTimestamp   = fmt.Errorf("%w: webhook-timestamp is not a Unix time in seconds", ErrVerification)
	ErrTimestampRange = fmt.Errorf("%w: webhook-timestamp is outside the tolerance", ErrVerification)
	ErrNoSignature    = fmt.Errorf("%w: no v1 signature matches", ErrVerification)
)

// NewSecret returns a new random secret, written "whsec_" followed by the
// base64 of 32 random bytes.
func NewSecret() string {
	b := make([]byte, secretSize)
	rand.Read(b) // never fails
	return secretPrefix + base64.StdEncoding.EncodeToString(b)
}

// ParseSecret returns the key bytes of a secret written "whsec_" followed
// by the standard base64 of SecretMinSize to SecretMaxSize (24 to 64)
// bytes, as Standard Webhooks asks. Any other secret is refused with an
// error wrapping [ErrInvalidSecret] that says why, never repeating the
// secret: one without the prefix (a bare base64 string is more likely a
// value pasted from elsewhere than a secret), one that is not base64, and
// one of fewer or more bytes. [NewSecret] makes a valid one.
func ParseSecret(s string) ([]byte, error) {
	encoded, ok := strings.CutPrefix(s, secretPrefix)
	if !ok {
		return nil, fmt.Errorf("%w: it does not start with whsec_", ErrInvalidSecret)
	}
	key, err := base64.StdEncoding.DecodeString(encoded)
	switch {
	case err != nil:
		return nil, fmt.Errorf("%w: what follows whsec_ is not standard base64", ErrInvalidSecret)
	case len(key) < SecretMinSize || len(key) > SecretMaxSize:
		return nil, fmt.Errorf("%w: it decodes to %d bytes", ErrInvalidSecret, len(key))
	}
	return key, nil
}

// Sign returns the webhook-signature value of a message: "v1," followed by
// the base64 of HMAC-SHA256(key, id + "." + timestamp + "." + body), with
// timestamp in Unix seconds.
func Sign(key []byte, id string, timestamp time.Time, body []byte) string {
	return "v1," + base64.StdEncoding.EncodeToString(mac(key, id, strconv.FormatInt(timestamp.Unix(), 10), body))
}

func mac(key []byte, id, ts string, body []byte) []byte {
	m := hmac.New(sha256.New, key)
	io.WriteString(m, id)
	io.WriteString(m, ".")
	io.WriteString(m, ts)
	io.WriteString(m, ".")
	m.Write(body)
	return m.Sum(nil)
}

// VerifyOpts are the options of [Verify]; nil means the defaults.
type VerifyOpts struct {
	// Tolerance is how far the timestamp may be from Now, either way; an
	// older message is refused as a replay. Defaults to ToleranceDefault
	// (5 min).
	Tolerance time.Duration
	// Now is the receiver's clock. Defaults to time.Now.
	Now func() time.Time
}

// Verify checks a webhook's headers and raw body against the secret (as
// written, "whsec_..."): the timestamp must be within the tolerance of now,
// and one of the space-separated "v1,..." signatures of webhook-signature
// must match, compared in constant time. Signatures of other versions are
// ignored. Errors wrap [ErrVerification], except [ErrInvalidSecret].
func Verify(secret string, h http.Header, body []byte, opts *VerifyOpts) error {
	key, err := ParseSecret(secret)
	if err != nil {
		return err
	}
	return VerifyKeys([][]byte{key}, h, body, opts)
}

// VerifyKeys is [Verify] with the key bytes of several secrets (as
// [ParseSecret] returns them), as a receiver holds them while a secret is
// rotated: the message is genuine when one of its signatures matches one
// of the keys. Errors wrap [ErrVerification].
func VerifyKeys(keys [][]byte, h http.Header, body []byte, opts *VerifyOpts) error {
	id, ts, sigs := h.Get(HeaderID), h.Get(HeaderTimestamp), h.Get(HeaderSignature)
	if id == "" || ts == "" || sigs == "" {
		return ErrMissingHeader
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return ErrBadTimestamp
	}
	tolerance, now := ToleranceDefault, time.Now()
	if opts != nil {
		if opts.Tolerance > 0 {
			tolerance = opts.Tolerance
		}
		if opts.Now != nil {
			now = opts.Now()
		}
	}
	if d := now.Sub(time.Unix(sec, 0)); d > tolerance || d < -tolerance {
		return ErrTimestampRange
	}
	for _, key := range keys {
		want := mac(key, id, ts, body)
		for _, sig := range strings.Fields(sigs) {
			version, value, ok := strings.Cut(sig, ",")
			if !ok || version != "v1" {
				continue
			}
			got, err := base64.StdEncoding.DecodeString(value)
			if err == nil && hmac.Equal(got, want) {
				return nil
			}
		}
	}
	return ErrNoSignature
}

// VerifyRequestBodyLimit bounds the body that [VerifyRequest] reads.
const VerifyRequestBodyLimit = 1 << 20

// VerifyRequest reads r's body (at most VerifyRequestBodyLimit bytes) and
// verifies it with [Verify]. It returns the body, to be decoded only when
// the error is nil.
func VerifyRequest(secret string, r *http.Request, opts *VerifyOpts) ([]byte, error) {
	body, err := io.ReadAll(io.LimitReader(r.Body, VerifyRequestBodyLimit+1))
	if err != nil {
		return nil, fmt.Errorf("idemoutbox: read webhook body: %w", err)
	}
	if len(body) > VerifyRequestBodyLimit {
		return nil, fmt.Errorf("%w: body over %d bytes", ErrVerification, VerifyRequestBodyLimit)
	}
	if err := Verify(secret, r.Header, body, opts); err != nil {
		return nil, err
	}
	return body, nil
}
