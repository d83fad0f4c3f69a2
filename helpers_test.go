package idem_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem"
)

var quiet = slog.New(slog.DiscardHandler)

type resp struct {
	status int
	header http.Header
	body   []byte
}

const payment = `{"amount":4200,"currency":"usd","customer":"cus_123"}`

// countingMetrics counts results, as a Prometheus adapter would.
type countingMetrics struct {
	mu     sync.Mutex
	counts map[idem.Result]int
	claims int
}

func (c *countingMetrics) Request(_ context.Context, r idem.Result) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.counts[r]++
}

func (c *countingMetrics) Claim(context.Context, time.Duration, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.claims++
}

func (r resp) problem(t *testing.T) idem.Problem {
	t.Helper()
	if ct := r.header.Get("Content-Type"); ct != idem.ProblemContentType {
		t.Fatalf("Content-Type = %q, want %q; body %s", ct, idem.ProblemContentType, r.body)
	}
	var p idem.Problem
	if err := json.Unmarshal(r.body, &p); err != nil {
		t.Fatalf("problem body %s: %v", r.body, err)
	}
	if p.Status != r.status || p.Type != "/problems/"+p.Code || p.Title == "" {
		t.Fatalf("problem %+v does not match status %d", p, r.status)
	}
	return p
}

// resumerOnly is a Config.Metrics that reports only the resumer's passes.
type resumerOnly struct{ idem.ResumerMetrics }

func (resumerOnly) Request(context.Context, idem.Result)        {}
func (resumerOnly) Claim(context.Context, time.Duration, error) {}
func metricsOf(m idem.ResumerMetrics) idem.Metrics {
	if m == nil {
		return nil
	}
	return resumerOnly{m}
}
