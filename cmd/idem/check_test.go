package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idemkit/idem/internal/check/checktest"
)

// setup serves a reference payments endpoint with fault on loopback and
// returns its payments URL.
func setup(t *testing.T, fault checktest.Fault) string {
	t.Helper()
	ts := httptest.NewServer(checktest.New(&checktest.Config{Fault: fault}))
	t.Cleanup(ts.Close)
	return ts.URL + checktest.PaymentsPath
}

// jsonReport is the part of check's --json output the tests read.
type jsonReport struct {
	URL    string `json:"url"`
	Checks []struct {
		Name     string   `json:"name"`
		Required bool     `json:"required"`
		Result   string   `json:"result"`
		Summary  string   `json:"summary"`
		Evidence []string `json:"evidence"`
	} `json:"checks"`
	Summary struct {
		Pass, Fail, Warn, Skip int
		Passed                 bool
	} `json:"summary"`
}

func TestCheckEndToEndJSON(t *testing.T) {
	t.Parallel()
	url := setup(t, checktest.NoFault)
	code, stdout, stderr := runCLI(t, nil, "check",
		"--url", url,
		"--header", "Authorization: Bearer client-a",
		"--second-client-header", "Authorization: Bearer client-b",
		"--body", `{"amount":100,"currency":"usd","customer":"cus_123"}`,
		"--json")
	if code != exitOK {
		t.Fatalf("exit code = %d, want 0\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
	var report jsonReport
	if err := json.Unmarshal([]byte(stdout), &report); err != nil {
		t.Fatalf("stdout is not a JSON report: %v\n%s", err, stdout)
	}
	if report.URL != url || len(report.Checks) != 9 || !report.Summary.Passed || report.Summary.Pass != 9 {
		t.Errorf("report = %+v, want 9 passing checks for %s", report, url)
	}
	for _, c := range report.Checks {
		if c.Result != "pass" || len(c.Evidence) == 0 {
			t.Errorf("%s = %s with %d evidence lines, want pass with evidence", c.Name, c.Result, len(c.Evidence))
		}
	}
	if stderr != "" {
		t.Errorf("stderr = %q, want nothing", stderr)
	}
}

func TestCheckEndToEndFailure(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		fault checktest.Fault
		row   string
	}{
		{"AcceptsMissingKey", checktest.AcceptsMissingKey, "missing-key          yes       fail"},
		{"NoFingerprint", checktest.NoFingerprint, "mismatch             yes       fail"},
		{"NoConcurrencyGuard", checktest.NoConcurrencyGuard, "concurrency          yes       fail"},
		{"GlobalKeys", checktest.GlobalKeys, "client-scope         yes       fail"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			code, stdout, stderr := runCLI(t, nil, "check",
				"--url", setup(t, tt.fault),
				"--header", "Authorization: Bearer client-a",
				"--second-client-header", "Authorization: Bearer client-b",
				"--body", `{"amount":100,"currency":"usd"}`)
			if code != exitFail {
				t.Errorf("exit code = %d, want 1\nstderr: %s", code, stderr)
			}
			if !strings.Contains(stdout, tt.row) || strings.Count(stdout, "       fail    ") != 1 {
				t.Errorf("table lacks exactly one failing row %q:\n%s", tt.row, stdout)
			}
		})
	}
}

func TestCheckReadsEnvironmentAndFiles(t *testing.T) {
	t.Parallel()
	url := setup(t, checktest.NoFault)
	bodyFile := filepath.Join(t.TempDir(), "body.json")
	if err := os.WriteFile(bodyFile, []byte(`{"amount":100,"currency":"usd"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{
		"IDEM_CHECK_URL":                  url,
		"IDEM_CHECK_HEADER":               "Authorization: Bearer client-a\nX-Tenant: t1",
		"IDEM_CHECK_SECOND_CLIENT_HEADER": "Authorization: Bearer client-b",
		"IDEM_CHECK_BODY":                 "@" + bodyFile,
		"IDEM_CHECK_CONCURRENCY":          "8",
		"IDEM_CHECK_TIMEOUT":              "5s",
	}
	code, stdout, stderr := runCLI(t, env, "check", "--json")
	if code != exitOK {
		t.Fatalf("exit code = %d, want 0\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
	var report jsonReport
	if err := json.Unmarshal([]byte(stdout), &report); err != nil || !report.Summary.Passed {
		t.Errorf("report = %+v (%v), want every required check passed", report, err)
	}

	// A header on the command line replaces the environment's headers, so
	// client B then shares client A's key space and client-scope fails.
	code, stdout, _ = runCLI(t, env, "check", "--second-client-header", "X-Other: b")
	if code != exitFail || !strings.Contains(stdout, "client-scope         yes       fail") {
		t.Errorf("exit code = %d, want 1 with client-scope failing:\n%s", code, stdout)
	}

	bad := map[string]string{"IDEM_CHECK_URL": url, "IDEM_CHECK_CONCURRENCY": "many"}
	code, _, stderr = runCLI(t, bad, "check")
	if code != exitUsage || !strings.Contains(stderr, `IDEM_CHECK_CONCURRENCY="many": want an integer`) {
		t.Errorf("exit code = %d, stderr %q, want 2 naming the bad variable", code, stderr)
	}
}

func TestCheckInterrupted(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	cancel() // as SIGINT would
	var stdout, stderr bytes.Buffer
	c := &cli{stdout: &stdout, stderr: &stderr, lookupEnv: func(string) (string, bool) { return "", false }}
	code := c.run(ctx, []string{"check", "--url", setup(t, checktest.NoFault), "--body", `{"amount":1}`})
	if code != exitFail {
		t.Errorf("exit code = %d, want 1", code)
	}
	if !strings.Contains(stderr.String(), "interrupted") || !strings.Contains(stdout.String(), "not run: context canceled") {
		t.Errorf("want the partial report and a note:\nstdout: %s\nstderr: %s", stdout.String(), stderr.String())
	}
}
