// Package frametest holds the tests that every web-framework adapter of
// idem (idemgin, idemecho) runs against a small payments service built
// with its framework: the contract, checked by idem check; the handler's
// write in the key's transaction; a streamed response replayed.
//
// The service a [NewService] builds answers, as alice (password pw-a) or
// bob (pw-b) over Basic authentication, which the framework checks before
// idem:
//   - POST /v1/payments with {"amount": int, "currency": string,
//     "fail": bool}: 201 and the payment as JSON, its row written in the
//     key's transaction in atomic mode; with fail, 500 after the write;
//     without amount or currency, the framework's own 400;
//   - POST /v1/exports: three CSV rows, streamed (idem's StreamResponse);
//   - GET /openapi.json, with idem: [OpenAPI], the published retention.
package frametest

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/check"
)

// Service is a running payments service.
type Service struct {
	URL string
	// Payments counts the committed payments.
	Payments func(t *testing.T) int
}

// NewService starts a service with idem's middleware in mode, or, with
// withIdem false, without idem.
type NewService func(t *testing.T, withIdem bool, mode idem.Mode) *Service

// OpenAPI is the service's published idempotency policy, served at the
// well-known /openapi.json, as the draft asks a resource to publish it
// (idem check's retention-published looks there).
var OpenAPI = fmt.Appendf(nil, `{"openapi":"3.1.0","info":{"title":"payments","version":"1",`+
	`"description":"Idempotency keys are retained for %d hours after their first use; a request that reuses an older key runs as new."},`+
	`"x-idempotency":{"header":%q,"retention_seconds":%d,"scope":"per authenticated client"},"paths":{}}`,
	int(idem.RetentionDefault.Hours()), idem.HeaderKey, int(idem.RetentionDefault.Seconds()))

// Basic is the Authorization header of user.
func Basic(user, pass string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pass))
}

// Check runs idem check against the service's payments endpoint: with
// idem, in both modes, every check passes, the advisory ones too; without
// idem, the checks of the contract that a plain service breaks fail.
func Check(t *testing.T, newService NewService) {
	for _, mode := range []idem.Mode{idem.ModeAtomic, idem.ModeTwoPhase} {
		t.Run("idem/"+mode.String(), func(t *testing.T) {
			report := runCheck(t, newService(t, true, mode))
			for _, r := range report.Results {
				if r.Outcome != check.Pass {
					t.Errorf("%s: %s %s", r.Name, r.Outcome, r.Summary)
				}
			}
		})
	}
	t.Run("without-idem", func(t *testing.T) {
		report := runCheck(t, newService(t, false, idem.ModeAtomic))
		for _, name := range []string{check.MissingKey, check.MalformedKey, check.LongKey, check.Replay, check.Mismatch, check.Concurrency, check.ClientScope} {
			if r, _ := report.Result(name); r.Outcome != check.Fail {
				t.Errorf("%s: %s %s; want fail", name, r.Outcome, r.Summary)
			}
		}
		if report.Passed() {
			t.Error("the service without idem passed")
		}
	})
}

// runCheck runs the conformance checker as alice with bob as the second
// client, and logs its table.
func runCheck(t *testing.T, s *Service) check.Report {
	t.Helper()
	report, err := check.Run(context.Background(), check.Config{
		URL:                s.URL + "/v1/payments",
		Header:             http.Header{"Authorization": {Basic("alice", "pw-a")}},
		SecondClientHeader: http.Header{"Authorization": {Basic("bob", "pw-b")}},
		Body:               []byte(`{"amount":100,"currency":"usd"}`),
		Logger:             slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	report.WriteTable(&b)
	t.Logf("idem check %s/v1/payments:\n%s", s.URL, b.String())
	return report
}

// AtomicTransaction checks that the handler's write runs in the key's
// transaction: a 500 after it rolls it back and frees the key; a 201
// commits it with the response, which a retry replays. A body the
// framework refuses gets its own 400, whose body contains invalidWord,
// and makes no payment; a request without credentials gets the
// framework's 401 before idem.
func AtomicTransaction(t *testing.T, newService NewService, invalidWord string) {
	s := newService(t, true, idem.ModeAtomic)
	if resp, body := Post(t, s.URL+"/v1/payments", `"k1"`, `{"amount":5,"currency":"eur","fail":true}`); resp.StatusCode != http.StatusInternalServerError {
		t.Fatalf("failing request: %d %s", resp.StatusCode, body)
	}
	if n := s.Payments(t); n != 0 {
		t.Fatalf("%d payments after the 500; want the write rolled back", n)
	}
	resp, first := Post(t, s.URL+"/v1/payments", `"k2"`, `{"amount":5,"currency":"eur"}`)
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("first: %d %s", resp.StatusCode, first)
	}
	resp, again := Post(t, s.URL+"/v1/payments", `"k2"`, `{"amount":5,"currency":"eur"}`)
	if resp.StatusCode != http.StatusCreated || again != first || resp.Header.Get(idem.HeaderReplayed) != "true" {
		t.Fatalf("retry: %d %s (replayed %q); want the replay of %s", resp.StatusCode, again, resp.Header.Get(idem.HeaderReplayed), first)
	}
	if n := s.Payments(t); n != 1 {
		t.Errorf("%d payments; want 1", n)
	}
	if resp, body := Post(t, s.URL+"/v1/payments", `"k3"`, `{"currency":"eur"}`); resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, invalidWord) {
		t.Errorf("invalid payment: %d %s; want the framework's 400 naming %q", resp.StatusCode, body, invalidWord)
	}
	if n := s.Payments(t); n != 1 {
		t.Errorf("%d payments after the invalid one; want 1", n)
	}
	req, _ := http.NewRequest(http.MethodPost, s.URL+"/v1/payments", strings.NewReader(`{}`))
	req.Header.Set(idem.HeaderKey, `"k4"`)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("no credentials: %d; want 401", resp.StatusCode)
	}
}

// Streaming streams a two-phase response and replays it.
func Streaming(t *testing.T, newService NewService) {
	s := newService(t, true, idem.ModeTwoPhase)
	resp, first := Post(t, s.URL+"/v1/exports", `"e1"`, `{}`)
	if resp.StatusCode != http.StatusOK || first != "row,0\nrow,1\nrow,2\n" || resp.ContentLength != -1 {
		t.Fatalf("streamed: %d (length %d) %q", resp.StatusCode, resp.ContentLength, first)
	}
	resp, again := Post(t, s.URL+"/v1/exports", `"e1"`, `{}`)
	if resp.StatusCode != http.StatusOK || again != first || resp.Header.Get(idem.HeaderReplayed) != "true" {
		t.Fatalf("replay: %d %q", resp.StatusCode, again)
	}
}

// Post sends a JSON POST as alice with the key, and returns the answer
// with its body read.
func Post(t *testing.T, url, key, body string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Authorization", Basic("alice", "pw-a"))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(idem.HeaderKey, key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}
