package idemwebhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// HeaderStripeSignature is the header of Stripe's signature.
const HeaderStripeSignature = "Stripe-Signature"

// stripeSecretPrefix starts every Stripe endpoint secret.
const stripeSecretPrefix = "whsec_"

// Stripe verifies deliveries of Stripe events: the Stripe-Signature header,
// "t=<Unix seconds>,v1=<hex>[,v1=<hex>...]", where each v1 is the
// HMAC-SHA256, keyed with the endpoint's secret as written, of t, ".", and
// the raw body. Signatures of other schemes (v0) are ignored. The event id
// is the body's "id".
type Stripe struct {
	secrets   [][]byte
	tolerance time.Duration
}

var _ Verifier = (*Stripe)(nil)

// NewStripe returns a verifier for the endpoint's signing secrets, as the
// Stripe dashboard or CLI shows them ("whsec_..."). Several secrets serve a
// rotation: when Stripe rolls a secret it signs with the old and the new
// one for a while, and a delivery is genuine when one v1 signature matches
// one secret. At least one is required.
func NewStripe(secrets []string, opts *VerifierOpts) (*Stripe, error) {
	if len(secrets) == 0 {
		return nil, errors.New("idemwebhook: Stripe needs at least one signing secret")
	}
	tolerance, err := opts.tolerance()
	if err != nil {
		return nil, err
	}
	v := &Stripe{tolerance: tolerance}
	for i, s := range secrets {
		if !strings.HasPrefix(s, stripeSecretPrefix) || len(s) == len(stripeSecretPrefix) {
			// An API key (sk_...) pasted here would never verify anything.
			return nil, fmt.Errorf("idemwebhook: Stripe secret %d of %d is not an endpoint signing secret: it does not start with whsec_", i+1, len(secrets))
		}
		v.secrets = append(v.secrets, []byte(s))
	}
	return v, nil
}

// excludeFields are left out of the fingerprint of a Stripe event:
// pending_webhooks counts the endpoints that have yet to take the event, a
// number that may change between deliveries of one event.
func (v *Stripe) excludeFields() []string { return []string{"/pending_webhooks"} }

// Verify implements [Verifier]. The timestamp is checked both ways: a t
// further ahead of the receiver's clock than the tolerance is refused too.
func (v *Stripe) Verify(h http.Header, body []byte, now time.Time) (Event, error) {
	fields := h.Values(HeaderStripeSignature)
	if len(fields) == 0 {
		return Event{}, refuse(ErrMalformed, "the Stripe-Signature header is missing")
	}
	var (
		t    int64
		hasT bool
		sigs [][]byte
	)
	for _, field := range fields {
		for item := range strings.SplitSeq(field, ",") {
			k, val, ok := strings.Cut(strings.TrimSpace(item), "=")
			if !ok {
				return Event{}, refuse(ErrMalformed, "Stripe-Signature has an item that is not key=value")
			}
			switch k {
			case "t":
				n, err := strconv.ParseInt(val, 10, 64)
				if err != nil || hasT {
					return Event{}, refuse(ErrMalformed, "Stripe-Signature's t is not one Unix time in seconds")
				}
				t, hasT = n, true
			case "v1":
				if sig, err := hex.DecodeString(val); err == nil && len(sig) == sha256.Size {
					sigs = append(sigs, sig)
				}
			}
		}
	}
	if !hasT {
		return Event{}, refuse(ErrMalformed, "Stripe-Signature has no t")
	}
	if len(sigs) == 0 {
		return Event{}, refuse(ErrSignature, "Stripe-Signature has no v1 signature")
	}
	signed := time.Unix(t, 0)
	if e := checkTime(signed, now, v.tolerance, "Stripe-Signature's t"); e != nil {
		return Event{}, e
	}
	if !v.matches(t, body, sigs) {
		return Event{}, refuse(ErrSignature, "no v1 signature in Stripe-Signature matches a signing secret of this endpoint")
	}
	var event struct {
		ID      string `json:"id"`
		Type    string `json:"type"`
		Created int64  `json:"created"`
		Data    struct {
			Object struct {
				ID json.RawMessage `json:"id"`
			} `json:"object"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &event); err != nil {
		return Event{}, refuse(ErrMalformed, "the body is not a Stripe event: it does not decode as one")
	}
	if event.ID == "" {
		return Event{}, refuse(ErrMalformed, "the body is not a Stripe event: it has no id")
	}
	e := Event{Provider: ProviderStripe, ID: event.ID, Type: event.Type, SignedAt: signed}
	if event.Created > 0 {
		e.Time = time.Unix(event.Created, 0)
	}
	json.Unmarshal(event.Data.Object.ID, &e.Object)
	return e, nil
}

// matches reports whether one of sigs is the signature of t and body with
// one of the secrets, compared in constant time.
func (v *Stripe) matches(t int64, body []byte, sigs [][]byte) bool {
	ts := strconv.FormatInt(t, 10)
	for _, secret := range v.secrets {
		m := hmac.New(sha256.New, secret)
		m.Write([]byte(ts))
		m.Write([]byte("."))
		m.Write(body)
		want := m.Sum(nil)
		for _, sig := range sigs {
			if hmac.Equal(sig, want) {
				return true
			}
		}
	}
	return false
}
