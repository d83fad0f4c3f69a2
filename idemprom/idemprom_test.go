package idemprom_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemprom"
	"github.com/idemkit/idem/idemtest"
)

func TestCountsMiddlewareResults(t *testing.T) {
	t.Parallel()
	m := idemprom.New(&idemprom.Config{ConstLabels: prometheus.Labels{"service": "test"}})
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(m)

	mw, err := idem.New(idemtest.NewMemoryStore(), &idem.Config{
		Metrics:  m,
		ClientID: func(*http.Request) (string, bool) { return "alice", true },
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, `{"id":"pay_1"}`)
	})))
	defer srv.Close()
	send := func(key, body string) {
		req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
	}
	send("k1", `{"amount":1}`)
	send("k1", `{"amount":1}`)
	send("k1", `{"amount":2}`)
	send("", `{"amount":1}`)

	for result, want := range map[idem.Result]float64{
		idem.ResultExecuted: 1, idem.ResultReplayed: 1, idem.ResultMismatch: 1, idem.ResultRejected: 1, idem.ResultInFlight: 0,
	} {
		if got := requestsTotal(t, reg, string(result)); got != want {
			t.Errorf("idem_requests_total{result=%q} = %v, want %v", result, got, want)
		}
	}
	if n := testutil.CollectAndCount(m, "idem_claim_duration_seconds"); n != 1 {
		t.Errorf("%d claim histogram series, want 1 (outcome ok)", n)
	}
	if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %v", problems, err)
	}
}

// requestsTotal reads idem_requests_total for one result from reg.
func requestsTotal(t *testing.T, reg *prometheus.Registry, result string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "idem_requests_total" {
			continue
		}
		for _, metric := range f.GetMetric() {
			for _, l := range metric.GetLabel() {
				if l.GetName() == "result" && l.GetValue() == result {
					return metric.GetCounter().GetValue()
				}
			}
		}
	}
	t.Fatalf("no idem_requests_total series for result %q", result)
	return 0
}

func TestClaimOutcomes(t *testing.T) {
	t.Parallel()
	m := idemprom.New(nil)
	reg := prometheus.NewRegistry()
	reg.MustRegister(m)
	m.Claim(context.Background(), time.Millisecond, nil)
	m.Claim(context.Background(), time.Millisecond, errors.New("down"))
	// A claim abandoned by a client that went away is not a store error.
	m.Claim(context.Background(), time.Millisecond, context.Canceled)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]uint64{}
	for _, f := range families {
		if f.GetName() != "idem_claim_duration_seconds" {
			continue
		}
		for _, metric := range f.GetMetric() {
			counts[metric.GetLabel()[0].GetValue()] = metric.GetHistogram().GetSampleCount()
		}
	}
	if counts["ok"] != 2 || counts["error"] != 1 {
		t.Errorf("claims by outcome = %v, want ok 2 and error 1", counts)
	}
}

// TestEveryResultHasASeries: each of idem's Results is a series from the
// start, at zero, and is named in the help text.
func TestEveryResultHasASeries(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(idemprom.New(nil))
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "idem_requests_total" {
			continue
		}
		if got, want := len(f.GetMetric()), len(idem.Results()); got != want {
			t.Errorf("%d result series, want %d", got, want)
		}
		for _, r := range idem.Results() {
			if !strings.Contains(f.GetHelp(), string(r)) {
				t.Errorf("help %q does not name %q", f.GetHelp(), r)
			}
			if got := requestsTotal(t, reg, string(r)); got != 0 {
				t.Errorf("result %q starts at %v, want 0", r, got)
			}
		}
		return
	}
	t.Fatal("no idem_requests_total")
}
