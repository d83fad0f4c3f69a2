package processor

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idemkit/idem/idemsqlite"
	"github.com/idemkit/idem/internal/bearer"
)

func setup(t *testing.T, failRate float64) string {
	t.Helper()
	logger := slog.New(slog.DiscardHandler)
	store, err := idemsqlite.Open(filepath.Join(t.TempDir(), "proc.db"), &idemsqlite.Config{Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	if err := store.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	tokens, err := bearer.Parse("sk_a=alice,sk_b=bob")
	if err != nil {
		t.Fatal(err)
	}
	h, err := NewHandler(context.Background(), Config{Store: store, Tokens: tokens, FailRate: failRate, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL
}

func call(t *testing.T, method, url, token, key string) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(`{"amount":100,"currency":"usd","customer":"c"}`))
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, b
}

func count(t *testing.T, base, token, key string) int {
	t.Helper()
	status, body := call(t, http.MethodGet, base+"/v1/charges/count?key="+key, token, "")
	var c map[string]int
	if status != http.StatusOK || json.Unmarshal(body, &c) != nil {
		t.Fatalf("count: %d %s", status, body)
	}
	return c["charges"]
}

func TestChargesOncePerKeyAndCountsPerClient(t *testing.T) {
	t.Parallel()
	base := setup(t, 0)
	for range 3 {
		if status, body := call(t, http.MethodPost, base+"/v1/charges", "sk_a", "k1"); status != http.StatusCreated {
			t.Fatalf("charge: %d %s", status, body)
		}
	}
	if status, _ := call(t, http.MethodPost, base+"/v1/charges", "sk_b", "k1"); status != http.StatusCreated {
		t.Fatalf("bob's charge: %d", status)
	}
	if a, b, all := count(t, base, "sk_a", "k1"), count(t, base, "sk_b", "k1"), count(t, base, "sk_a", ""); a != 1 || b != 1 || all != 1 {
		t.Errorf("charges: alice %d, bob %d, alice in all %d; want 1 each", a, b, all)
	}
	if status, _ := call(t, http.MethodGet, base+"/v1/charges/count", "", ""); status != http.StatusUnauthorized {
		t.Errorf("count without a token: %d, want 401", status)
	}
}

func TestSimulatedFailureChargesNothing(t *testing.T) {
	t.Parallel()
	base := setup(t, 1)
	status, body := call(t, http.MethodPost, base+"/v1/charges", "sk_a", "k1")
	if status != http.StatusServiceUnavailable || !strings.Contains(string(body), "nothing was charged") {
		t.Fatalf("charge: %d %s, want 503", status, body)
	}
	if n := count(t, base, "sk_a", ""); n != 0 {
		t.Errorf("%d charges, want 0", n)
	}
}
