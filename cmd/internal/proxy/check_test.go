package proxy

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"testing"

	"github.com/idemkit/idem/internal/check"
)

// runCheck runs idem check against a POST endpoint as two bearer clients.
func runCheck(t *testing.T, endpoint string) check.Report {
	t.Helper()
	report, err := check.Run(context.Background(), check.Config{
		URL:                endpoint,
		Header:             http.Header{"Authorization": {"Bearer sk_test_a"}},
		SecondClientHeader: http.Header{"Authorization": {"Bearer sk_test_b"}},
		Body:               []byte(`{"amount":100,"currency":"usd"}`),
		Logger:             slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	var table bytes.Buffer
	report.WriteTable(&table)
	t.Logf("idem check %s:\n%s", endpoint, table.String())
	return report
}

// TestCheckPassesThroughProxy runs idem check against an upstream with no
// idempotency at all: through the proxy every required check passes, on
// both stores, and the upstream executed each key once; without the proxy
// the same upstream fails.
func TestCheckPassesThroughProxy(t *testing.T) {
	t.Parallel()
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			up := newUpstream(t, false)
			base := setup(t, kind, up, nil)
			report := runCheck(t, base+"/v1/charges")
			for _, r := range report.Results {
				if r.Outcome != check.Pass {
					t.Errorf("check %s: %s (%s)", r.Name, r.Outcome, r.Summary)
				}
			}
			if !report.Passed() {
				t.Fatal("idem check failed through the proxy")
			}
			most, keys := up.maxChargesPerClientKey()
			if most != 1 || keys < 5 {
				t.Fatalf("upstream charged up to %d times for one client's key, over %d keys; want exactly once each", most, keys)
			}
			t.Logf("upstream: %d keys, each charged once", keys)
		})
	}
	t.Run("WithoutProxy", func(t *testing.T) {
		t.Parallel()
		up := newUpstream(t, false)
		report := runCheck(t, up.URL+"/v1/charges")
		if report.Passed() {
			t.Fatal("idem check passed against an upstream with no idempotency")
		}
		for _, name := range []string{check.MissingKey, check.Replay, check.Concurrency} {
			if r, ok := report.Result(name); !ok || r.Outcome != check.Fail {
				t.Errorf("check %s: %v, want fail", name, r.Outcome)
			}
		}
	})
}
