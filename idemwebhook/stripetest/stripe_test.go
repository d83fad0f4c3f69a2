package stripetest

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v82"
	"github.com/stripe/stripe-go/v82/webhook"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/idemwebhook"
)

const (
	oldSecret = "whsec_old0f6c1a2b3c4d5e6f7a8b9c0d1e2f3a4b"
	newSecret = "whsec_new9e8d7c6b5a4f3e2d1c0b9a8f7e6d5c4b"
)

// event is a Stripe event as Stripe sends it, of the API version that
// stripe-go expects, so that ConstructEvent takes it without options.
func event(id string) []byte {
	return fmt.Appendf(nil, `{
  "id": %q,
  "object": "event",
  "api_version": %q,
  "created": 1767225600,
  "data": {"object": {"id": "pi_3Q", "object": "payment_intent", "amount": 4200, "currency": "usd", "status": "succeeded"}},
  "livemode": false,
  "pending_webhooks": 1,
  "request": {"id": "req_1", "idempotency_key": "k1"},
  "type": "payment_intent.succeeded"
}`, id, stripe.APIVersion)
}

// receiver is a Stripe endpoint on a memory store with the given secrets,
// whose handler checks, with stripe-go, every delivery that it is given.
type receiver struct {
	srv  *httptest.Server
	runs atomic.Int32
}

func newReceiver(t *testing.T, secrets ...string) *receiver {
	t.Helper()
	v, err := idemwebhook.NewStripe(secrets, nil)
	if err != nil {
		t.Fatal(err)
	}
	rc, err := idemwebhook.New(idemtest.NewMemoryStore(), &idemwebhook.Config{
		Endpoint: "stripe", Verifier: v,
		Idem: &idem.Config{Retention: 96 * time.Hour, Logger: slog.New(slog.DiscardHandler)},
	})
	if err != nil {
		t.Fatal(err)
	}
	rv := &receiver{}
	rv.srv = httptest.NewServer(rc.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rv.runs.Add(1)
		body, _ := io.ReadAll(r.Body)
		ev, _ := idemwebhook.EventFromContext(r.Context())
		// What the receiver accepted, stripe-go accepts with one of the
		// secrets, and reads as the same event.
		var se stripe.Event
		var errs []error
		for _, s := range secrets {
			e, err := webhook.ConstructEvent(body, r.Header.Get("Stripe-Signature"), s)
			if err == nil {
				se = e
				break
			}
			errs = append(errs, err)
		}
		if se.ID == "" {
			t.Errorf("the receiver accepted a delivery that stripe-go refuses: %v", errors.Join(errs...))
		} else if se.ID != ev.ID || string(se.Type) != ev.Type || se.Created != ev.Time.Unix() {
			t.Errorf("stripe-go reads event %s %s %d, the receiver %+v", se.ID, se.Type, se.Created, ev)
		}
		w.WriteHeader(http.StatusOK)
	})))
	t.Cleanup(rv.srv.Close)
	return rv
}

func (rv *receiver) post(t *testing.T, body []byte, header string) (int, idem.Problem) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, rv.srv.URL, strings.NewReader(string(body)))
	req.Header.Set("Content-Type", "application/json; charset=utf-8")
	req.Header.Set("Stripe-Signature", header)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var p idem.Problem
	if res.Header.Get("Content-Type") == idem.ProblemContentType {
		json.NewDecoder(res.Body).Decode(&p)
	}
	return res.StatusCode, p
}

func sign(body []byte, secret string, at time.Time) *webhook.SignedPayload {
	return webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: body, Secret: secret, Timestamp: at})
}

func TestAccepted(t *testing.T) {
	t.Parallel()
	rv := newReceiver(t, newSecret)
	body := event("evt_accepted")
	signed := sign(body, newSecret, time.Now())
	if _, err := webhook.ConstructEvent(signed.Payload, signed.Header, newSecret); err != nil {
		t.Fatalf("stripe-go refuses its own test payload: %v", err)
	}
	if code, p := rv.post(t, body, signed.Header); code != http.StatusOK {
		t.Fatalf("answered %d %+v, want 200", code, p)
	}
	// Stripe's retry, signed anew a minute later: acknowledged, not run.
	again := sign(body, newSecret, time.Now().Add(time.Minute))
	if code, _ := rv.post(t, body, again.Header); code != http.StatusOK {
		t.Fatalf("the redelivery answered %d, want 200", code)
	}
	if n := rv.runs.Load(); n != 1 {
		t.Fatalf("handler ran %d times, want 1", n)
	}
}

func TestTampered(t *testing.T) {
	t.Parallel()
	rv := newReceiver(t, newSecret)
	body := event("evt_tampered")
	signed := sign(body, newSecret, time.Now())
	tampered := []byte(strings.Replace(string(body), `"amount": 4200`, `"amount": 1`, 1))
	if _, err := webhook.ConstructEvent(tampered, signed.Header, newSecret); !errors.Is(err, webhook.ErrNoValidSignature) {
		t.Fatalf("stripe-go: %v, want ErrNoValidSignature", err)
	}
	if code, p := rv.post(t, tampered, signed.Header); code != http.StatusUnauthorized || p.Code != string(idemwebhook.ProblemSignature) {
		t.Fatalf("answered %d %+v, want 401 %s", code, p, idemwebhook.ProblemSignature)
	}
	if n := rv.runs.Load(); n != 0 {
		t.Fatalf("handler ran %d times, want 0", n)
	}
}

func TestExpired(t *testing.T) {
	t.Parallel()
	rv := newReceiver(t, newSecret)
	body := event("evt_expired")
	signed := sign(body, newSecret, time.Now().Add(-webhook.DefaultTolerance-time.Minute))
	if _, err := webhook.ConstructEvent(signed.Payload, signed.Header, newSecret); !errors.Is(err, webhook.ErrTooOld) {
		t.Fatalf("stripe-go: %v, want ErrTooOld", err)
	}
	code, p := rv.post(t, body, signed.Header)
	if code != http.StatusUnauthorized || p.Code != string(idemwebhook.ProblemTimestamp) || !strings.Contains(p.Detail, "old") {
		t.Fatalf("answered %d %+v, want 401 %s saying how old", code, p, idemwebhook.ProblemTimestamp)
	}
	if n := rv.runs.Load(); n != 0 {
		t.Fatalf("handler ran %d times, want 0", n)
	}
}

// TestRotatedSecret: while Stripe rolls an endpoint's secret, it signs
// with the old and the new one; a receiver that holds either accepts, and
// one that holds both accepts a delivery signed with either.
func TestRotatedSecret(t *testing.T) {
	t.Parallel()
	now := time.Now()
	body := event("evt_rotated")
	byOld, byNew := sign(body, oldSecret, now), sign(body, newSecret, now)
	both := byOld.Header + ",v1=" + fmt.Sprintf("%x", byNew.Signature)
	for _, s := range []string{oldSecret, newSecret} {
		if _, err := webhook.ConstructEvent(body, both, s); err != nil {
			t.Fatalf("stripe-go refuses the doubly signed delivery with one secret: %v", err)
		}
	}
	if _, err := webhook.ConstructEvent(body, byOld.Header, newSecret); !errors.Is(err, webhook.ErrNoValidSignature) {
		t.Fatalf("stripe-go: %v, want ErrNoValidSignature", err)
	}
	tests := []struct {
		name    string
		secrets []string
		header  string
		want    int
	}{
		{"NewSecretBothSignatures", []string{newSecret}, both, http.StatusOK},
		{"OldSecretBothSignatures", []string{oldSecret}, both, http.StatusOK},
		{"BothSecretsOldSignature", []string{newSecret, oldSecret}, byOld.Header, http.StatusOK},
		{"BothSecretsNewSignature", []string{oldSecret, newSecret}, byNew.Header, http.StatusOK},
		{"NewSecretOldSignature", []string{newSecret}, byOld.Header, http.StatusUnauthorized},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rv := newReceiver(t, tt.secrets...)
			if code, p := rv.post(t, body, tt.header); code != tt.want {
				t.Fatalf("answered %d %+v, want %d", code, p, tt.want)
			}
		})
	}
}
