package idemoutbox_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/idemoutbox"
)

func TestWebhookDeliver(t *testing.T) {
	t.Parallel()
	secret := idemoutbox.NewSecret()
	sent := time.Date(2026, 5, 6, 7, 8, 9, 0, time.UTC)
	event := idemoutbox.Event{
		ID: "evt_abc", Type: "payment.succeeded", Payload: json.RawMessage(`{"amount": 100}`),
		CreatedAt: time.Date(2026, 5, 6, 7, 8, 0, 0, time.UTC),
	}
	tests := []struct {
		name    string
		status  int
		wantErr bool
	}{
		{"OK", http.StatusOK, false},
		{"NoContent", http.StatusNoContent, false},
		{"Accepted", http.StatusAccepted, false},
		{"Redirect", http.StatusFound, true},
		{"ClientError", http.StatusBadRequest, true},
		{"ServerError", http.StatusInternalServerError, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var got *http.Request
			var body []byte
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				var err error
				body, err = idemoutbox.VerifyRequest(secret, r, &idemoutbox.VerifyOpts{Now: func() time.Time { return sent }})
				if err != nil {
					t.Errorf("VerifyRequest: %v", err)
				}
				got = r
				if tt.status == http.StatusFound {
					w.Header().Set("Location", "/elsewhere")
				}
				w.WriteHeader(tt.status)
			}))
			defer srv.Close()
			wh, err := idemoutbox.NewWebhook(&idemoutbox.WebhookConfig{URL: srv.URL, Secret: secret, Now: func() time.Time { return sent }})
			if err != nil {
				t.Fatal(err)
			}
			err = wh.Deliver(context.Background(), event)
			if (err != nil) != tt.wantErr {
				t.Fatalf("Deliver = %v, want error %v", err, tt.wantErr)
			}
			var se *idemoutbox.StatusError
			if tt.wantErr && (!errors.As(err, &se) || se.StatusCode != tt.status) {
				t.Fatalf("Deliver = %v, want a StatusError with %d", err, tt.status)
			}
			if got.Method != http.MethodPost || got.Header.Get("Content-Type") != "application/json" ||
				got.Header.Get(idemoutbox.HeaderID) != event.ID || got.Header.Get(idemoutbox.HeaderTimestamp) != strconv.FormatInt(sent.Unix(), 10) {
				t.Fatalf("request %s with headers %v", got.Method, got.Header)
			}
			want := `{"type":"payment.succeeded","timestamp":"2026-05-06T07:08:00Z","data":{"amount": 100}}`
			if string(body) != want {
				t.Fatalf("body %s, want %s", body, want)
			}
		})
	}
}

func TestWebhookTimeout(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(release)
	wh, err := idemoutbox.NewWebhook(&idemoutbox.WebhookConfig{URL: srv.URL, Secret: idemoutbox.NewSecret(), Timeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := wh.Deliver(context.Background(), idemoutbox.Event{ID: "evt_1", Type: "t", Payload: json.RawMessage(`{}`)}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Deliver to a receiver that never answers = %v, want a deadline error", err)
	}
}

func TestNewWebhookRejects(t *testing.T) {
	t.Parallel()
	for name, cfg := range map[string]*idemoutbox.WebhookConfig{
		"Nil":              nil,
		"NoSecret":         {URL: "http://x"},
		"BadSecret":        {URL: "http://x", Secret: "whsec_???"},
		"ShortSecret":      {URL: "http://x", Secret: "whsec_AA=="},
		"UnprefixedSecret": {URL: "http://x", Secret: strings.TrimPrefix(idemoutbox.NewSecret(), "whsec_")},
		"NegativeTimeout":  {URL: "http://x", Secret: idemoutbox.NewSecret(), Timeout: -1},
	} {
		if _, err := idemoutbox.NewWebhook(cfg); err == nil {
			t.Errorf("%s: NewWebhook succeeded", name)
		}
	}
}

func TestExponentialBackoff(t *testing.T) {
	t.Parallel()
	policy := idemoutbox.ExponentialBackoff(100*time.Millisecond, time.Second)
	for attempt, full := range map[int]time.Duration{
		1: 100 * time.Millisecond, 2: 200 * time.Millisecond, 4: 800 * time.Millisecond, 5: time.Second, 60: time.Second, 0: time.Second,
	} {
		for range 50 {
			if d := policy(attempt); d < full/2 || d > full {
				t.Fatalf("attempt %d: %s, want within [%s, %s]", attempt, d, full/2, full)
			}
		}
	}
}

func TestDefaultBackoff(t *testing.T) {
	t.Parallel()
	for attempt := 1; attempt <= 40; attempt++ {
		full := idemoutbox.BackoffMax
		if attempt <= 20 {
			full = min(idemoutbox.BackoffBase<<(attempt-1), idemoutbox.BackoffMax)
		}
		for range 50 {
			if d := idemoutbox.DefaultBackoff(attempt); d < full/2 || d > full {
				t.Fatalf("DefaultBackoff(%d) = %s, want within [%s, %s]", attempt, d, full/2, full)
			}
		}
	}
}
