package chaos

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/idemkit/idem/idemoutbox"
)

func setupReceiver(t *testing.T, seed uint64) (*receiver, string) {
	t.Helper()
	secret := idemoutbox.NewSecret()
	r, err := startReceiver(secret, seed)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.close)
	return r, secret
}

func webhookTo(t *testing.T, url, secret string) *idemoutbox.Webhook {
	t.Helper()
	wh, err := idemoutbox.NewWebhook(&idemoutbox.WebhookConfig{URL: url, Secret: secret})
	if err != nil {
		t.Fatal(err)
	}
	return wh
}

func paymentEvent(id, payment string) idemoutbox.Event {
	return idemoutbox.Event{
		ID: id, Type: "payment.succeeded", CreatedAt: time.Now(),
		Payload: fmt.Appendf(nil, `{"id":%q,"amount":100,"currency":"usd","customer":"cus_x"}`, payment),
	}
}

func TestReceiver(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("RefusesOnItsScheduleThenAccepts", func(t *testing.T) {
		t.Parallel()
		r, secret := setupReceiver(t, 20261201)
		wh := webhookTo(t, r.url, secret)
		const events = 40
		for i := range events {
			e := paymentEvent(fmt.Sprintf("evt_%d", i), fmt.Sprintf("pay_%d", i))
			failures := 0
			for {
				err := wh.Deliver(ctx, e)
				if err == nil {
					break
				}
				var se *idemoutbox.StatusError
				if !errors.As(err, &se) || se.StatusCode != http.StatusInternalServerError {
					t.Fatalf("delivery of %s: %v, want nil or 500", e.ID, err)
				}
				if failures++; failures > receiverMaxFailures {
					t.Fatalf("%s refused %d times, want at most %d", e.ID, failures, receiverMaxFailures)
				}
			}
		}
		// A redelivery of an accepted event is accepted and counted.
		if err := wh.Deliver(ctx, paymentEvent("evt_0", "pay_0")); err != nil {
			t.Fatal(err)
		}
		s := r.stats()
		if s.Delivered != events || s.Duplicate != 1 || len(s.Invalid) != 0 {
			t.Errorf("stats: %d delivered, %d duplicate ids, %d invalid; want %d, 1, 0", s.Delivered, s.Duplicate, len(s.Invalid), events)
		}
		if s.Refused == 0 {
			t.Errorf("%d events, not one delivery refused: no retry would happen", events)
		}
		if got := s.ByPayment["pay_7"]; len(got) != 1 || got[0].ID != "evt_7" || got[0].Type != "payment.succeeded" {
			t.Errorf("events of pay_7: %+v", got)
		}
	})

	t.Run("RejectsAndCountsABadSignature", func(t *testing.T) {
		t.Parallel()
		r, _ := setupReceiver(t, 1)
		wh := webhookTo(t, r.url, idemoutbox.NewSecret()) // another secret
		var se *idemoutbox.StatusError
		if err := wh.Deliver(ctx, paymentEvent("evt_forged", "pay_1")); !errors.As(err, &se) || se.StatusCode != http.StatusUnauthorized {
			t.Fatalf("forged delivery: %v, want 401", err)
		}
		s := r.stats()
		if len(s.Invalid) != 1 || s.Delivered != 0 || len(s.ByPayment) != 0 {
			t.Errorf("after a forged delivery: %d invalid, %d delivered", len(s.Invalid), s.Delivered)
		}
	})

	t.Run("ScheduleIsTheSeeds", func(t *testing.T) {
		t.Parallel()
		a, b, c := &receiver{seed: 5}, &receiver{seed: 5}, &receiver{seed: 6}
		differ := false
		for i := range 200 {
			id := fmt.Sprintf("evt_%d", i)
			if a.refuse(id, 1) != b.refuse(id, 1) {
				t.Fatalf("seed 5 refused %s once and accepted it once", id)
			}
			differ = differ || a.refuse(id, 1) != c.refuse(id, 1)
			if a.refuse(id, receiverMaxFailures+1) {
				t.Fatalf("%s refused past %d deliveries", id, receiverMaxFailures)
			}
		}
		if !differ {
			t.Error("seeds 5 and 6 drew the same schedule")
		}
	})
}

// TestCheckEvents feeds the event checker each violation it must report.
func TestCheckEvents(t *testing.T) {
	t.Parallel()
	acked := &Op{ID: 1, Client: "alice", Key: "k1"}
	lost := &Op{ID: 2, Client: "alice", Key: "k2"}
	stored := map[string]bool{"pay_1": true, "pay_2": true}
	r := &Report{counts: map[string]int{}, reasons: map[*Op][]string{}, rows: map[*Op]*dbState{}, events: receiverStats{
		ByPayment: map[string][]receivedEvent{
			"pay_1":     {{ID: "evt_1", PaymentID: "pay_1", Count: 2}},
			"pay_ghost": {{ID: "evt_ghost", PaymentID: "pay_ghost", Count: 1}},
		},
		Delivered: 2, Duplicate: 1,
		Invalid: []string{`delivery of "evt_x": no v1 signature matches`},
	}}
	r.checkEvents(map[string]*Op{"pay_1": acked, "pay_2": lost}, stored)
	want := map[string]int{vEventMissing: 1, vEventUnknown: 1, vEventInvalid: 1}
	for kind, n := range want {
		if r.counts[kind] != n {
			t.Errorf("%s: %d, want %d", kind, r.counts[kind], n)
		}
	}
	if len(r.reasons[lost]) != 1 || len(r.reasons[acked]) != 0 {
		t.Errorf("reasons: the payment without an event has %q, the delivered one %q", r.reasons[lost], r.reasons[acked])
	}
	if len(r.strays) != 2 {
		t.Errorf("strays %q, want the unknown event and the invalid delivery", r.strays)
	}
}
