package idemtest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem/idemoutbox"
)

// receiver is a webhook endpoint that verifies every request and counts
// deliveries by event id. answer, if set, picks the status of each
// delivery (its attempt number counts from 1); nil answers 204.
type receiver struct {
	secret string
	answer func(id string, attempt int) int
	// arrived, if set, is sent each delivery's id before it is answered.
	arrived chan string

	mu       sync.Mutex
	attempts map[string]int // deliveries per id, answered or not
	ok       map[string]int // 2xx answers per id
	inflight map[string]bool
	overlaps int // deliveries of an id while another of it was in flight
	invalid  []string
}

func newReceiver(t *testing.T, answer func(id string, attempt int) int) (*receiver, *httptest.Server) {
	r := &receiver{
		secret: idemoutbox.NewSecret(), answer: answer,
		attempts: map[string]int{}, ok: map[string]int{}, inflight: map[string]bool{},
	}
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	return r, srv
}

func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, err := idemoutbox.VerifyRequest(r.secret, req, nil)
	id := req.Header.Get(idemoutbox.HeaderID)
	r.mu.Lock()
	if err != nil {
		r.invalid = append(r.invalid, fmt.Sprintf("%s: %v", id, err))
		r.mu.Unlock()
		http.Error(w, "bad signature", http.StatusUnauthorized)
		return
	}
	var msg struct {
		Type string          `json:"type"`
		Data json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(body, &msg); err != nil || msg.Type == "" || len(msg.Data) == 0 {
		r.invalid = append(r.invalid, fmt.Sprintf("%s: body %s", id, body))
	}
	if r.inflight[id] {
		r.overlaps++
	}
	r.inflight[id] = true
	r.attempts[id]++
	attempt := r.attempts[id]
	r.mu.Unlock()

	if r.arrived != nil {
		r.arrived <- id
	}
	status := http.StatusNoContent
	if r.answer != nil {
		status = r.answer(id, attempt)
	}

	r.mu.Lock()
	delete(r.inflight, id)
	if status >= 200 && status < 300 {
		r.ok[id]++
	}
	r.mu.Unlock()
	w.WriteHeader(status)
}

func (r *receiver) snapshot() (attempts, ok map[string]int, overlaps int, invalid []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	attempts, ok = map[string]int{}, map[string]int{}
	for k, v := range r.attempts {
		attempts[k] = v
	}
	for k, v := range r.ok {
		ok[k] = v
	}
	return attempts, ok, r.overlaps, append([]string(nil), r.invalid...)
}

func (r *receiver) delivered() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.ok)
}

// countingMetrics counts a relay's delivery results.
type countingMetrics struct {
	mu      sync.Mutex
	results map[idemoutbox.Result]int
	backlog idemoutbox.Stats
	reports []int64 // pending, per Backlog call
}

func (m *countingMetrics) Delivery(_ context.Context, r idemoutbox.Result) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.results == nil {
		m.results = map[idemoutbox.Result]int{}
	}
	m.results[r]++
}

func (m *countingMetrics) Backlog(_ context.Context, pending int64, _ time.Duration, dead int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.backlog = idemoutbox.Stats{Pending: pending, Dead: dead}
	m.reports = append(m.reports, pending)
}

func (m *countingMetrics) count(r idemoutbox.Result) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.results[r]
}

func newRelay(t *testing.T, s OutboxStore, r *receiver, srv *httptest.Server, cfg idemoutbox.RelayConfig) *idemoutbox.Relay {
	t.Helper()
	wh, err := idemoutbox.NewWebhook(&idemoutbox.WebhookConfig{URL: srv.URL, Secret: r.secret, Timeout: outboxTimeout})
	if err != nil {
		t.Fatalf("NewWebhook: %v", err)
	}
	if cfg.Logger == nil {
		cfg.Logger = quietLog
	}
	relay, err := idemoutbox.NewRelay(s, wh, &cfg)
	if err != nil {
		t.Fatalf("NewRelay: %v", err)
	}
	return relay
}

// drain runs DeliverOnce until a batch takes nothing.
func drain(t *testing.T, relay *idemoutbox.Relay) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), outboxTimeout)
	defer cancel()
	total := 0
	for {
		n, err := relay.DeliverOnce(ctx)
		if err != nil {
			t.Fatalf("DeliverOnce: %v", err)
		}
		if n == 0 {
			return total
		}
		total += n
	}
}

func checkReceived(t *testing.T, r *receiver, ids []string, wantAttempts int) {
	t.Helper()
	attempts, ok, overlaps, invalid := r.snapshot()
	if len(invalid) > 0 {
		t.Fatalf("%d deliveries failed verification, first: %s", len(invalid), invalid[0])
	}
	if overlaps != 0 {
		t.Fatalf("%d deliveries overlapped another of the same event", overlaps)
	}
	if len(attempts) != len(ids) {
		t.Fatalf("receiver saw %d distinct events, want %d", len(attempts), len(ids))
	}
	for _, id := range ids {
		if attempts[id] != wantAttempts || ok[id] != 1 {
			t.Fatalf("event %s: %d deliveries, %d accepted; want %d and 1", id, attempts[id], ok[id], wantAttempts)
		}
	}
}

// waitBriefly yields between polls of a condition that other goroutines
// make true; the deadline of the poll, not this pause, bounds the test.
func waitBriefly() {
	t := time.NewTimer(5 * time.Millisecond)
	<-t.C
}
