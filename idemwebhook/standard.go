package idemwebhook

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/idemkit/idem/idemoutbox"
)

// StandardWebhooks verifies deliveries signed as Standard Webhooks
// (https://www.standardwebhooks.com): the webhook-id, webhook-timestamp and
// webhook-signature headers, with the HMAC-SHA256 scheme "v1" that
// idemoutbox signs with; the two share one implementation
// (idemoutbox.VerifyKeys).
type StandardWebhooks struct {
	keys      [][]byte
	tolerance time.Duration
}

var _ Verifier = (*StandardWebhooks)(nil)

// NewStandardWebhooks returns a verifier for the endpoint's secrets, each
// written "whsec_" followed by the base64 of 24 to 64 bytes
// (idemoutbox.ParseSecret). Several secrets serve a rotation: a delivery
// is genuine when one of its signatures (webhook-signature may carry
// several, space-separated) matches one of them. At least one is
// required.
func NewStandardWebhooks(secrets []string, opts *VerifierOpts) (*StandardWebhooks, error) {
	if len(secrets) == 0 {
		return nil, errors.New("idemwebhook: Standard Webhooks needs at least one secret")
	}
	tolerance, err := opts.tolerance()
	if err != nil {
		return nil, err
	}
	v := &StandardWebhooks{tolerance: tolerance}
	for i, s := range secrets {
		key, err := idemoutbox.ParseSecret(s)
		if err != nil {
			return nil, fmt.Errorf("idemwebhook: secret %d of %d: %w", i+1, len(secrets), err)
		}
		v.keys = append(v.keys, key)
	}
	return v, nil
}

// Verify implements [Verifier]. The event's Type, Time and Object come
// from the payload's "type", "timestamp" and "data.id", as the
// specification's payload structure has them (idemoutbox sends that
// structure); a payload of another shape leaves them empty.
func (v *StandardWebhooks) Verify(h http.Header, body []byte, now time.Time) (Event, error) {
	err := idemoutbox.VerifyKeys(v.keys, h, body, &idemoutbox.VerifyOpts{Tolerance: v.tolerance, Now: func() time.Time { return now }})
	switch {
	case errors.Is(err, idemoutbox.ErrMissingHeader):
		return Event{}, refuse(ErrMalformed, "a webhook-id, webhook-timestamp or webhook-signature header is missing")
	case errors.Is(err, idemoutbox.ErrBadTimestamp):
		return Event{}, refuse(ErrMalformed, "webhook-timestamp is not a Unix time in seconds")
	case errors.Is(err, idemoutbox.ErrTimestampRange):
		sec, _ := strconv.ParseInt(h.Get(idemoutbox.HeaderTimestamp), 10, 64)
		if e := checkTime(time.Unix(sec, 0), now, v.tolerance, "webhook-timestamp"); e != nil {
			return Event{}, e
		}
		return Event{}, refuse(ErrTimestamp, "webhook-timestamp is outside the tolerance of "+v.tolerance.String())
	case errors.Is(err, idemoutbox.ErrNoSignature):
		return Event{}, refuse(ErrSignature, "no v1 signature in webhook-signature matches a secret of this endpoint")
	case err != nil:
		return Event{}, refuse(ErrSignature, "the delivery could not be verified")
	}
	sec, _ := strconv.ParseInt(h.Get(idemoutbox.HeaderTimestamp), 10, 64) // parsed by VerifyKeys
	e := Event{Provider: ProviderStandardWebhooks, ID: h.Get(idemoutbox.HeaderID), SignedAt: time.Unix(sec, 0)}
	var payload struct {
		Type      json.RawMessage `json:"type"`
		Timestamp json.RawMessage `json:"timestamp"`
		Data      struct {
			ID json.RawMessage `json:"id"`
		} `json:"data"`
	}
	if json.Unmarshal(body, &payload) == nil {
		json.Unmarshal(payload.Type, &e.Type)
		var ts string
		if json.Unmarshal(payload.Timestamp, &ts) == nil {
			e.Time, _ = time.Parse(time.RFC3339Nano, ts)
		}
		json.Unmarshal(payload.Data.ID, &e.Object)
	}
	return e, nil
}
