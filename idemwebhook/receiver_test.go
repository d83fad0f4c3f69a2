package idemwebhook_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemoutbox"
	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/idemwebhook"
)

var quiet = slog.New(slog.DiscardHandler)

// rig is a receiver of Standard Webhooks on a memory store, in front of a
// handler that counts its runs per event id.
type rig struct {
	secret string
	key    []byte
	store  *idemtest.MemoryStore
	h      http.Handler
	runs   sync.Map // event id -> *atomic.Int32
	logs   *bytes.Buffer
	logMu  *sync.Mutex
}

func setup(t *testing.T, handler func(w http.ResponseWriter, r *http.Request)) *rig {
	t.Helper()
	rg := &rig{secret: idemoutbox.NewSecret(), store: idemtest.NewMemoryStore(), logs: &bytes.Buffer{}, logMu: &sync.Mutex{}}
	rg.key, _ = idemoutbox.ParseSecret(rg.secret)
	v, err := idemwebhook.NewStandardWebhooks([]string{rg.secret}, nil)
	if err != nil {
		t.Fatal(err)
	}
	logger := slog.New(slog.NewJSONHandler(lockedWriter{rg.logMu, rg.logs}, nil))
	rc, err := idemwebhook.New(rg.store, &idemwebhook.Config{Endpoint: "processor", Verifier: v, Idem: &idem.Config{Logger: quiet}, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	rg.h = rc.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ev, ok := idemwebhook.EventFromContext(r.Context())
		if !ok {
			t.Error("the handler's context has no event")
		}
		n, _ := rg.runs.LoadOrStore(ev.ID, new(atomic.Int32))
		n.(*atomic.Int32).Add(1)
		handler(w, r)
	}))
	return rg
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

func (rg *rig) runsOf(id string) int {
	n, ok := rg.runs.Load(id)
	if !ok {
		return 0
	}
	return int(n.(*atomic.Int32).Load())
}

func (rg *rig) request(id, body string) *http.Request {
	now := time.Now()
	req := httptest.NewRequest(http.MethodPost, "/webhooks/processor", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(idemoutbox.HeaderID, id)
	req.Header.Set(idemoutbox.HeaderTimestamp, strconv.FormatInt(now.Unix(), 10))
	req.Header.Set(idemoutbox.HeaderSignature, idemoutbox.Sign(rg.key, id, now, []byte(body)))
	return req
}

func (rg *rig) deliver(id, body string) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	rg.h.ServeHTTP(rec, rg.request(id, body))
	return rec
}

func problemOf(t *testing.T, rec *httptest.ResponseRecorder) idem.Problem {
	t.Helper()
	if ct := rec.Header().Get("Content-Type"); ct != idem.ProblemContentType {
		t.Fatalf("Content-Type %q, want a problem; body %s", ct, rec.Body)
	}
	var p idem.Problem
	if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil {
		t.Fatal(err)
	}
	return p
}

const paymentEvent = `{"type":"payment.succeeded","timestamp":"2026-03-01T10:00:00Z","data":{"id":"pay_1","amount":4200}}`

func TestReceiverRunsAnEventOnce(t *testing.T) {
	t.Parallel()
	rg := setup(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		io.WriteString(w, `{"received":true}`)
	})
	first := rg.deliver("msg_1", paymentEvent)
	again := rg.deliver("msg_1", paymentEvent) // signed anew, as a provider's retry is
	if first.Code != 200 || again.Code != 200 || again.Body.String() != `{"received":true}` {
		t.Fatalf("answers %d %q, %d %q", first.Code, first.Body, again.Code, again.Body)
	}
	if again.Header().Get(idem.HeaderReplayed) != "true" {
		t.Error("the redelivery was not answered as a replay")
	}
	if n := rg.runsOf("msg_1"); n != 1 {
		t.Fatalf("handler ran %d times, want 1", n)
	}
	rec, ok := rg.store.Get(idemstore.Scope{ClientID: idemwebhook.ClientIDPrefix + "processor", Key: "msg_1"})
	if !ok || rec.Status != idemstore.StatusCompleted {
		t.Fatalf("the event id is not recorded as processed: %+v", rec)
	}
}

func TestReceiverConcurrentDuplicateIsRetryable(t *testing.T) {
	t.Parallel()
	entered, release := make(chan struct{}), make(chan struct{})
	rg := setup(t, func(w http.ResponseWriter, r *http.Request) {
		close(entered)
		<-release
		w.WriteHeader(http.StatusNoContent)
	})
	done := make(chan *httptest.ResponseRecorder)
	go func() { done <- rg.deliver("msg_1", paymentEvent) }()
	<-entered
	dup := rg.deliver("msg_1", paymentEvent)
	if dup.Code != http.StatusConflict || dup.Header().Get("Retry-After") == "" {
		t.Fatalf("concurrent duplicate answered %d (Retry-After %q), want 409 with Retry-After", dup.Code, dup.Header().Get("Retry-After"))
	}
	if p := problemOf(t, dup); p.Code != string(idem.ProblemKeyInFlight) {
		t.Fatalf("problem %s", p.Code)
	}
	close(release)
	if first := <-done; first.Code != http.StatusNoContent {
		t.Fatalf("first delivery answered %d", first.Code)
	}
	if again := rg.deliver("msg_1", paymentEvent); again.Code != http.StatusNoContent {
		t.Fatalf("the provider's retry answered %d, want the replayed 204", again.Code)
	}
	if n := rg.runsOf("msg_1"); n != 1 {
		t.Fatalf("handler ran %d times, want 1", n)
	}
}

func TestReceiverReleasesOnHandlerFailure(t *testing.T) {
	t.Parallel()
	var fail atomic.Bool
	fail.Store(true)
	rg := setup(t, func(w http.ResponseWriter, r *http.Request) {
		if fail.Load() {
			http.Error(w, "database down", http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	if rec := rg.deliver("msg_1", paymentEvent); rec.Code != http.StatusInternalServerError {
		t.Fatalf("failing handler answered %d, want its 500", rec.Code)
	}
	fail.Store(false)
	if rec := rg.deliver("msg_1", paymentEvent); rec.Code != http.StatusNoContent || rec.Header().Get(idem.HeaderReplayed) != "" {
		t.Fatalf("the retry answered %d (replayed %q), want a fresh 204", rec.Code, rec.Header().Get(idem.HeaderReplayed))
	}
	if n := rg.runsOf("msg_1"); n != 2 {
		t.Fatalf("handler ran %d times, want 2 (the failure and the retry)", n)
	}
}

func TestReceiverRefusesAnotherPayloadUnderOneID(t *testing.T) {
	t.Parallel()
	rg := setup(t, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	rg.deliver("msg_1", paymentEvent)
	forged := strings.Replace(paymentEvent, "4200", "999999", 1)
	rec := rg.deliver("msg_1", forged)
	if rec.Code != http.StatusUnprocessableEntity {
		t.Fatalf("answered %d, want 422", rec.Code)
	}
	p := problemOf(t, rec)
	if p.Code != string(idem.ProblemKeyReused) || len(p.Fields) != 1 || p.Fields[0] != "/data" {
		t.Fatalf("problem %+v, want idempotency-key-reused naming /data", p)
	}
	if n := rg.runsOf("msg_1"); n != 1 {
		t.Fatalf("handler ran %d times, want 1", n)
	}
	rg.logMu.Lock()
	logs := rg.logs.String()
	rg.logMu.Unlock()
	if !strings.Contains(logs, `"msg":"idemwebhook: an event id was delivered again with a different payload; refused"`) ||
		!strings.Contains(logs, `"fields":["/data"]`) || !strings.Contains(logs, `"event_id":"msg_1"`) {
		t.Fatalf("the mismatch was not logged with its fields: %s", logs)
	}
}

func TestReceiverRefusesBeforeAnyEffect(t *testing.T) {
	t.Parallel()
	rg := setup(t, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	tamper := func(mutate func(r *http.Request)) *http.Request {
		r := rg.request("msg_1", paymentEvent)
		mutate(r)
		return r
	}
	tests := []struct {
		name   string
		req    *http.Request
		status int
		code   idem.ProblemCode
	}{
		{"Tampered", tamper(func(r *http.Request) {
			r.Body = io.NopCloser(strings.NewReader(strings.Replace(paymentEvent, "4200", "4201", 1)))
		}), 401, idemwebhook.ProblemSignature},
		{"Old", tamper(func(r *http.Request) {
			old := time.Now().Add(-6 * time.Minute)
			r.Header.Set(idemoutbox.HeaderTimestamp, strconv.FormatInt(old.Unix(), 10))
			r.Header.Set(idemoutbox.HeaderSignature, idemoutbox.Sign(rg.key, "msg_1", old, []byte(paymentEvent)))
		}), 401, idemwebhook.ProblemTimestamp},
		{"NoSignature", tamper(func(r *http.Request) { r.Header.Del(idemoutbox.HeaderSignature) }), 400, idemwebhook.ProblemMalformed},
		{"Get", tamper(func(r *http.Request) { r.Method = http.MethodGet }), 405, idemwebhook.ProblemMethod},
		{"TooLarge", tamper(func(r *http.Request) {
			r.Body = io.NopCloser(strings.NewReader(strings.Repeat(" ", idem.MaxBodyBytesDefault+1)))
		}), 413, idem.ProblemBodyTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			rg.h.ServeHTTP(rec, tt.req)
			if rec.Code != tt.status {
				t.Fatalf("answered %d, want %d: %s", rec.Code, tt.status, rec.Body)
			}
			p := problemOf(t, rec)
			if p.Code != string(tt.code) || p.Detail == "" {
				t.Fatalf("problem %+v, want %s with a detail", p, tt.code)
			}
		})
	}
	if n := rg.runsOf("msg_1"); n != 0 || rg.store.Len() != 0 {
		t.Fatalf("handler ran %d times and %d keys were stored, want none", n, rg.store.Len())
	}
}

func TestNewRefusesConfig(t *testing.T) {
	t.Parallel()
	v, _ := idemwebhook.NewStandardWebhooks([]string{vectorSecret}, nil)
	store := idemtest.NewMemoryStore()
	for _, cfg := range []*idemwebhook.Config{
		nil,
		{Verifier: v},
		{Endpoint: "x"},
		{Endpoint: "bad\nendpoint", Verifier: v},
		{Endpoint: "x", Verifier: v, Idem: &idem.Config{ClientID: func(*http.Request) (string, bool) { return "a", true }}},
		{Endpoint: "x", Verifier: v, Idem: &idem.Config{Retention: time.Second}},
		{Endpoint: "x", Verifier: v, Idem: &idem.Config{Outcome: idem.StoreServerErrorsPolicy}},
	} {
		if _, err := idemwebhook.New(store, cfg); err == nil {
			t.Errorf("New(%+v) succeeded", cfg)
		}
	}
}

func TestNewestNeedsAnEvent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	if _, err := idemwebhook.Newest(ctx, nil, "pay_1"); err != idemwebhook.ErrNoEvent {
		t.Errorf("without an event: %v", err)
	}
	ctx = idemwebhook.ContextWithEvent(ctx, idemwebhook.Event{ID: "evt_1"})
	if _, err := idemwebhook.Newest(ctx, nil, "pay_1"); err != idemwebhook.ErrNoTime {
		t.Errorf("without a time: %v", err)
	}
	ctx = idemwebhook.ContextWithEvent(ctx, idemwebhook.Event{ID: "evt_1", Time: time.Now()})
	if _, err := idemwebhook.Newest(ctx, nil, ""); err != idemwebhook.ErrNoObject {
		t.Errorf("without an object: %v", err)
	}
}

// TestReceiverTakesOutboxDeliveries: what idemoutbox's Webhook delivers,
// as paymentsd's relay sends its events, is received once; its event's
// time and object come from the outbox's body.
func TestReceiverTakesOutboxDeliveries(t *testing.T) {
	t.Parallel()
	var got []idemwebhook.Event
	var mu sync.Mutex
	rg := setup(t, func(w http.ResponseWriter, r *http.Request) {
		ev, _ := idemwebhook.EventFromContext(r.Context())
		mu.Lock()
		got = append(got, ev)
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	})
	srv := httptest.NewServer(rg.h)
	defer srv.Close()
	wh, err := idemoutbox.NewWebhook(&idemoutbox.WebhookConfig{URL: srv.URL, Secret: rg.secret})
	if err != nil {
		t.Fatal(err)
	}
	created := time.Date(2026, 3, 1, 10, 0, 0, 123456000, time.UTC)
	e := idemoutbox.Event{ID: "evt_out_1", Type: "payment.succeeded", Payload: []byte(`{"id":"pay_7","status":"succeeded"}`), CreatedAt: created}
	for range 3 { // the relay's at-least-once
		if err := wh.Deliver(t.Context(), e); err != nil {
			t.Fatalf("Deliver: %v", err)
		}
	}
	if len(got) != 1 || got[0].ID != e.ID || got[0].Type != e.Type || got[0].Object != "pay_7" || !got[0].Time.Equal(created) || got[0].Endpoint != "processor" {
		t.Fatalf("handler saw %+v, want one run of %s", got, e.ID)
	}
	other, err := idemoutbox.NewWebhook(&idemoutbox.WebhookConfig{URL: srv.URL, Secret: idemoutbox.NewSecret()})
	if err != nil {
		t.Fatal(err)
	}
	var se *idemoutbox.StatusError
	if err := other.Deliver(t.Context(), e); !errors.As(err, &se) || se.StatusCode != http.StatusUnauthorized {
		t.Fatalf("a delivery signed with another secret: %v, want 401", err)
	}
}
