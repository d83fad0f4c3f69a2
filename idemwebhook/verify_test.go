package idemwebhook_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/idemoutbox"
	"github.com/idemkit/idem/idemwebhook"
)

// The Standard Webhooks reference libraries' test vector (libraries/go,
// TestWebhookSign, and the same in every language's tests).
const (
	vectorSecret    = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	vectorID        = "msg_p5jXN8AQM9LWM0D4loKWxJek"
	vectorTimestamp = 1614265330
	vectorBody      = `{"test": 2432232314}`
	vectorSignature = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
	// A signature of the vector with another key, from the reference
	// libraries' tests of invalid and multiple signatures.
	vectorOtherSignature = "v1,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc="
)

func vectorHeader(sig string) http.Header {
	h := http.Header{}
	h.Set(idemoutbox.HeaderID, vectorID)
	h.Set(idemoutbox.HeaderTimestamp, strconv.Itoa(vectorTimestamp))
	h.Set(idemoutbox.HeaderSignature, sig)
	return h
}

func mustStandard(t *testing.T, secrets ...string) *idemwebhook.StandardWebhooks {
	t.Helper()
	v, err := idemwebhook.NewStandardWebhooks(secrets, nil)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestStandardWebhooksVector(t *testing.T) {
	t.Parallel()
	at := time.Unix(vectorTimestamp, 0)
	other := idemoutbox.NewSecret()
	tests := []struct {
		name    string
		secrets []string
		header  http.Header
		body    string
		now     time.Time
		want    error
	}{
		{"Accepted", []string{vectorSecret}, vectorHeader(vectorSignature), vectorBody, at, nil},
		{"AcceptedWithinTolerance", []string{vectorSecret}, vectorHeader(vectorSignature), vectorBody, at.Add(5 * time.Minute), nil},
		{"RotatedSecretSecond", []string{other, vectorSecret}, vectorHeader(vectorSignature), vectorBody, at, nil},
		{"SeveralSignatures", []string{vectorSecret}, vectorHeader(vectorOtherSignature + " v2,abc " + vectorSignature), vectorBody, at, nil},
		{"OtherSecretOnly", []string{other}, vectorHeader(vectorSignature), vectorBody, at, idemwebhook.ErrSignature},
		{"TamperedBody", []string{vectorSecret}, vectorHeader(vectorSignature), `{"test": 2432232315}`, at, idemwebhook.ErrSignature},
		{"WrongSignature", []string{vectorSecret}, vectorHeader(vectorOtherSignature), vectorBody, at, idemwebhook.ErrSignature},
		{"OtherVersionOnly", []string{vectorSecret}, vectorHeader("v2," + strings.TrimPrefix(vectorSignature, "v1,")), vectorBody, at, idemwebhook.ErrSignature},
		{"Expired", []string{vectorSecret}, vectorHeader(vectorSignature), vectorBody, at.Add(5*time.Minute + time.Second), idemwebhook.ErrTimestamp},
		{"FromTheFuture", []string{vectorSecret}, vectorHeader(vectorSignature), vectorBody, at.Add(-5*time.Minute - time.Second), idemwebhook.ErrTimestamp},
		{"MissingID", []string{vectorSecret}, without(vectorHeader(vectorSignature), idemoutbox.HeaderID), vectorBody, at, idemwebhook.ErrMalformed},
		{"MissingSignature", []string{vectorSecret}, without(vectorHeader(vectorSignature), idemoutbox.HeaderSignature), vectorBody, at, idemwebhook.ErrMalformed},
		{"BadTimestamp", []string{vectorSecret}, with(vectorHeader(vectorSignature), idemoutbox.HeaderTimestamp, "yesterday"), vectorBody, at, idemwebhook.ErrMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ev, err := mustStandard(t, tt.secrets...).Verify(tt.header, []byte(tt.body), tt.now)
			if tt.want == nil {
				if err != nil {
					t.Fatalf("Verify: %v", err)
				}
				if ev.ID != vectorID || !ev.SignedAt.Equal(at) || ev.Provider != idemwebhook.ProviderStandardWebhooks {
					t.Fatalf("event = %+v", ev)
				}
				return
			}
			var ve *idemwebhook.VerifyError
			if !errors.Is(err, tt.want) || !errors.As(err, &ve) || ve.Reason == "" {
				t.Fatalf("Verify = %v, want a VerifyError wrapping %v", err, tt.want)
			}
			if strings.Contains(ve.Reason, "MfKQ9r8") || strings.Contains(ve.Reason, "g0hM9") {
				t.Fatalf("the reason %q repeats a secret or a signature", ve.Reason)
			}
		})
	}
}

func with(h http.Header, k, v string) http.Header { h.Set(k, v); return h }
func without(h http.Header, k string) http.Header { h.Del(k); return h }

// TestStandardWebhooksOutbox: what idemoutbox's Webhook sends is accepted,
// with the event's fields read from its body.
func TestStandardWebhooksOutbox(t *testing.T) {
	t.Parallel()
	old, current := idemoutbox.NewSecret(), idemoutbox.NewSecret()
	created := time.Date(2026, 3, 1, 10, 0, 7, 123456000, time.UTC)
	e := idemoutbox.Event{ID: "evt_abc", Type: "payment.succeeded", Payload: []byte(`{"id":"pay_1","amount":4200}`), CreatedAt: created}
	body, err := idemoutbox.Body(e)
	if err != nil {
		t.Fatal(err)
	}
	key, _ := idemoutbox.ParseSecret(current)
	sent := time.Now()
	h := http.Header{}
	h.Set(idemoutbox.HeaderID, e.ID)
	h.Set(idemoutbox.HeaderTimestamp, strconv.FormatInt(sent.Unix(), 10))
	h.Set(idemoutbox.HeaderSignature, idemoutbox.Sign(key, e.ID, sent, body))
	ev, err := mustStandard(t, old, current).Verify(h, body, sent)
	if err != nil {
		t.Fatalf("Verify: %v", err)
	}
	want := idemwebhook.Event{Provider: idemwebhook.ProviderStandardWebhooks, ID: "evt_abc", Type: "payment.succeeded", Time: created, SignedAt: time.Unix(sent.Unix(), 0), Object: "pay_1"}
	if !ev.Time.Equal(want.Time) || ev.ID != want.ID || ev.Type != want.Type || ev.Object != want.Object || !ev.SignedAt.Equal(want.SignedAt) {
		t.Fatalf("event = %+v, want %+v", ev, want)
	}
	if _, err := mustStandard(t, old).Verify(h, body, sent); !errors.Is(err, idemwebhook.ErrSignature) {
		t.Fatalf("Verify with the old secret alone = %v, want ErrSignature", err)
	}
}

func TestNewStandardWebhooksRefusesBadSecrets(t *testing.T) {
	t.Parallel()
	for _, secrets := range [][]string{nil, {"MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}, {vectorSecret, "whsec_short"}} {
		if _, err := idemwebhook.NewStandardWebhooks(secrets, nil); err == nil {
			t.Errorf("NewStandardWebhooks(%d secrets) succeeded", len(secrets))
		}
	}
	if _, err := idemwebhook.NewStandardWebhooks([]string{vectorSecret}, &idemwebhook.VerifierOpts{Tolerance: -time.Second}); err == nil {
		t.Error("a negative tolerance was accepted")
	}
}

// stripeSign computes a Stripe-Signature as Stripe documents it,
// independently of the package.
func stripeSign(secret string, t time.Time, body string) string {
	m := hmac.New(sha256.New, []byte(secret))
	fmt.Fprintf(m, "%d.%s", t.Unix(), body)
	return hex.EncodeToString(m.Sum(nil))
}

const stripeSecret = "whsec_test_4eC39HqLyjWDarjtT1zdp7dc"

func stripeEvent(id string, created int64) string {
	return fmt.Sprintf(`{"id":%q,"object":"event","api_version":"2025-06-30.basil","created":%d,"data":{"object":{"id":"pi_123","object":"payment_intent","status":"succeeded"}},"livemode":false,"pending_webhooks":1,"type":"payment_intent.succeeded"}`, id, created)
}

func TestStripe(t *testing.T) {
	t.Parallel()
	now := time.Unix(1767225600, 0)
	body := stripeEvent("evt_1", 1767225590)
	sig := stripeSign(stripeSecret, now, body)
	other := "whsec_other_0000000000000000"
	header := func(v string) http.Header {
		h := http.Header{}
		h.Set(idemwebhook.HeaderStripeSignature, v)
		return h
	}
	ts := strconv.FormatInt(now.Unix(), 10)
	tests := []struct {
		name    string
		secrets []string
		header  http.Header
		body    string
		now     time.Time
		want    error
	}{
		{"Accepted", []string{stripeSecret}, header("t=" + ts + ",v1=" + sig), body, now, nil},
		{"AcceptedWithV0AndSeveralV1", []string{stripeSecret}, header("t=" + ts + ",v1=" + strings.Repeat("00", 32) + ",v0=abc,v1=" + sig), body, now, nil},
		{"RotatedSecret", []string{other, stripeSecret}, header("t=" + ts + ",v1=" + sig), body, now, nil},
		{"OtherSecret", []string{other}, header("t=" + ts + ",v1=" + sig), body, now, idemwebhook.ErrSignature},
		{"Tampered", []string{stripeSecret}, header("t=" + ts + ",v1=" + sig), strings.Replace(body, "succeeded", "failed", 1), now, idemwebhook.ErrSignature},
		{"TimestampChanged", []string{stripeSecret}, header("t=" + strconv.FormatInt(now.Unix()+1, 10) + ",v1=" + sig), body, now, idemwebhook.ErrSignature},
		{"Expired", []string{stripeSecret}, header("t=" + ts + ",v1=" + sig), body, now.Add(5*time.Minute + time.Second), idemwebhook.ErrTimestamp},
		{"Missing", []string{stripeSecret}, http.Header{}, body, now, idemwebhook.ErrMalformed},
		{"NoT", []string{stripeSecret}, header("v1=" + sig), body, now, idemwebhook.ErrMalformed},
		{"NoV1", []string{stripeSecret}, header("t=" + ts + ",v0=" + sig), body, now, idemwebhook.ErrSignature},
		{"Garbage", []string{stripeSecret}, header("nonsense"), body, now, idemwebhook.ErrMalformed},
		{"NoEventID", []string{stripeSecret}, header("t=" + ts + ",v1=" + stripeSign(stripeSecret, now, `{"type":"x"}`)), `{"type":"x"}`, now, idemwebhook.ErrMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			v, err := idemwebhook.NewStripe(tt.secrets, nil)
			if err != nil {
				t.Fatal(err)
			}
			ev, err := v.Verify(tt.header, []byte(tt.body), tt.now)
			if tt.want == nil {
				if err != nil {
					t.Fatalf("Verify: %v", err)
				}
				want := idemwebhook.Event{Provider: idemwebhook.ProviderStripe, ID: "evt_1", Type: "payment_intent.succeeded", Time: time.Unix(1767225590, 0), SignedAt: now, Object: "pi_123"}
				if ev != want {
					t.Fatalf("event = %+v, want %+v", ev, want)
				}
				return
			}
			if !errors.Is(err, tt.want) {
				t.Fatalf("Verify = %v, want %v", err, tt.want)
			}
		})
	}
	if _, err := idemwebhook.NewStripe([]string{"sk_test_123"}, nil); err == nil {
		t.Error("an API key was accepted as a signing secret")
	}
}
