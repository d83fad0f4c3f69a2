package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestRunServesTheLedger: paymentsd, whose payments run in two-phase mode,
// serves accounts and transfers atomically, with a stored 402 for
// insufficient funds.
func TestRunServesTheLedger(t *testing.T) {
	t.Parallel()
	db := "sqlite:" + filepath.Join(t.TempDir(), "p.db")
	p := runInProcess(t, "-addr", "127.0.0.1:0", "-admin-addr", "off", "-db", db, "-tokens", "sk_a=alice")
	stdout := p.stdout
	base := waitListening(t, stdout.lines, "paymentsd")
	client := &http.Client{Timeout: 20 * time.Second}
	send := func(method, path, key, body string) (int, map[string]any, http.Header) {
		t.Helper()
		req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer sk_a")
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
		}
		res, err := client.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		var v map[string]any
		if err := json.Unmarshal(b, &v); err != nil {
			t.Fatalf("%s %s: %d %s", method, path, res.StatusCode, b)
		}
		return res.StatusCode, v, res.Header
	}
	var ids []string
	for i, balance := range []int{1000, 0} {
		status, a, _ := send(http.MethodPost, "/v1/accounts", fmt.Sprintf("acct-%d", i), fmt.Sprintf(`{"currency":"usd","balance":%d}`, balance))
		if status != http.StatusCreated {
			t.Fatalf("open account: %d %v", status, a)
		}
		ids = append(ids, a["id"].(string))
	}
	transfer := fmt.Sprintf(`{"from":%q,"to":%q,"amount":400}`, ids[0], ids[1])
	if status, tr, _ := send(http.MethodPost, "/v1/transfers", "tr-1", transfer); status != http.StatusCreated || tr["amount"] != 400.0 {
		t.Fatalf("transfer: %d %v", status, tr)
	}
	if status, _, h := send(http.MethodPost, "/v1/transfers", "tr-1", transfer); status != http.StatusCreated || h.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("transfer retried: %d, replayed %q", status, h.Get("Idempotent-Replayed"))
	}
	over := fmt.Sprintf(`{"from":%q,"to":%q,"amount":601}`, ids[0], ids[1])
	if status, p, _ := send(http.MethodPost, "/v1/transfers", "tr-2", over); status != http.StatusPaymentRequired || p["code"] != "insufficient-funds" {
		t.Fatalf("overdraft: %d %v", status, p)
	}
	for i, want := range []float64{600, 400} {
		if status, a, _ := send(http.MethodGet, "/v1/accounts/"+ids[i], "", ""); status != http.StatusOK || a["balance"] != want {
			t.Fatalf("account %d: %d %v, want balance %v", i, status, a, want)
		}
	}
	if err := p.stop(t); err != nil {
		t.Fatalf("Run returned %v after cancel, want nil", err)
	}
}
