package main

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http/httptest"
	"path/filepath"
	"testing"

	"github.com/idemkit/idem/cmd/internal/database"
	"github.com/idemkit/idem/cmd/internal/payments"
	"github.com/idemkit/idem/internal/bearer"
	"github.com/idemkit/idem/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// paymentsServer runs the reference payments service in-process on a real
// store and returns its base URL.
func paymentsServer(t *testing.T, storeKind string) string {
	t.Helper()
	url := "sqlite:" + filepath.Join(t.TempDir(), "p.db")
	if storeKind == "postgres" {
		url = pgtest.NewDatabase(t)
	}
	ctx := context.Background()
	db, err := database.Open(ctx, url, &database.Config{Migrate: true, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	repo, err := payments.NewRepo(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	tokens, err := bearer.Parse("sk_test_alice=alice,sk_test_bob=bob")
	if err != nil {
		t.Fatal(err)
	}
	svc, err := payments.NewService(payments.Config{
		Repo: repo, Store: db.Store(), Logger: slog.New(slog.DiscardHandler), Tokens: tokens,
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(svc.Handler())
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestCheckPassesAgainstPaymentsd runs `idem check` against the reference
// payments service on each store: every check passes, none warns.
func TestCheckPassesAgainstPaymentsd(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"sqlite", "postgres"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			base := paymentsServer(t, kind)
			var stdout, stderr bytes.Buffer
			code := Run(context.Background(), []string{"check",
				"--url", base + "/v1/payments",
				"--header", "Authorization: Bearer sk_test_alice",
				"--second-client-header", "Authorization: Bearer sk_test_bob",
				"--body", `{"amount":100,"currency":"usd","customer":"cus_check"}`,
				"--json",
			}, &stdout, &stderr)
			var report struct {
				Checks []struct {
					Name    string `json:"name"`
					Outcome string `json:"result"`
					Summary string `json:"summary"`
				} `json:"checks"`
			}
			if err := json.Unmarshal(stdout.Bytes(), &report); err != nil {
				t.Fatalf("decode report: %v\n%s\n%s", err, stdout.String(), stderr.String())
			}
			for _, r := range report.Checks {
				t.Logf("%-20s %-4s %s", r.Name, r.Outcome, r.Summary)
				if r.Outcome != "pass" {
					t.Errorf("check %s: %s (%s)", r.Name, r.Outcome, r.Summary)
				}
			}
			if code != 0 || len(report.Checks) < 9 {
				t.Fatalf("exit code %d with %d results, want 0 and every check", code, len(report.Checks))
			}
		})
	}
}
