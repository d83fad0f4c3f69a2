package check_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/check"
	"github.com/idemkit/idem/internal/check/checktest"
)

// setup serves h on loopback and returns the payments URL.
func setup(t *testing.T, h http.Handler) string {
	t.Helper()
	ts := httptest.NewServer(h)
	t.Cleanup(ts.Close)
	return ts.URL + checktest.PaymentsPath
}

// config returns a Config for url with two clients and a JSON payment body.
func config(url string) check.Config {
	return check.Config{
		URL:                url,
		Header:             http.Header{"Authorization": {"Bearer client-a"}},
		SecondClientHeader: http.Header{"Authorization": {"Bearer client-b"}},
		Body:               []byte(`{"amount":100,"currency":"usd","customer":"cus_123"}`),
		Timeout:            5 * time.Second,
		RunTimeout:         30 * time.Second,
	}
}

func run(t *testing.T, cfg check.Config) check.Report {
	t.Helper()
	report, err := check.Run(t.Context(), cfg)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	return report
}

func table(t *testing.T, r check.Report) string {
	t.Helper()
	var b bytes.Buffer
	if err := r.WriteTable(&b); err != nil {
		t.Fatalf("WriteTable: %v", err)
	}
	return b.String()
}

func text(res check.Result) string {
	return res.Summary + "\n" + strings.Join(res.Evidence, "\n")
}

func failing(r check.Report) []string {
	var names []string
	for _, res := range r.Results {
		if res.Outcome == check.Fail {
			names = append(names, res.Name)
		}
	}
	return names
}

func TestRunReferenceServerPasses(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		modify func(*check.Config)
	}{
		{"QuotedKeys", func(*check.Config) {}},
		{"BareKeys", func(c *check.Config) { c.BareKeys = true }},
		{"FormBody", func(c *check.Config) { c.Body = []byte("amount=100&currency=usd&customer=cus_123") }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := checktest.New(nil)
			cfg := config(setup(t, srv))
			tt.modify(&cfg)
			report := run(t, cfg)
			t.Logf("\n%s", table(t, report))

			if !report.Passed() {
				t.Errorf("Passed() = false, want true")
			}
			want := []string{check.MissingKey, check.MalformedKey, check.LongKey, check.FirstRequest, check.Replay,
				check.Mismatch, check.Concurrency, check.ClientScope, check.RetentionPublished}
			if len(report.Results) != len(want) {
				t.Fatalf("got %d results, want %d", len(report.Results), len(want))
			}
			for i, res := range report.Results {
				if res.Name != want[i] {
					t.Errorf("result %d is %q, want %q", i, res.Name, want[i])
				}
				if res.Outcome != check.Pass {
					t.Errorf("%s = %s, want pass:\n%s", res.Name, res.Outcome, text(res))
				}
			}
			// One payment each: the key of exactly 255 characters, the first
			// request, the burst, and client-scope's A, B, A and B.
			if got := srv.Payments(); got != 7 {
				t.Errorf("server executed %d payments, want 7", got)
			}
		})
	}
}

func TestRunDetectsBrokenServer(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		fault    checktest.Fault
		check    string
		evidence []string
	}{
		{"AcceptsMissingKey", checktest.AcceptsMissingKey, check.MissingKey,
			[]string{"accepted with 201, want 400: the key is not required", "no Idempotency-Key → 201 Created"}},
		{"NoFingerprint", checktest.NoFingerprint, check.Mismatch,
			[]string{"replayed the first response, want 422: requests are not fingerprinted", `"amount" 100 → 101`}},
		{"NoConcurrencyGuard", checktest.NoConcurrencyGuard, check.Concurrency,
			[]string{"the operation executed", "distinct 2xx bodies for one key", "2xx body #2"}},
		{"GlobalKeys", checktest.GlobalKeys, check.ClientScope,
			[]string{"client B received client A's stored response: keys are not scoped per client"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			report := run(t, config(setup(t, checktest.New(&checktest.Config{Fault: tt.fault}))))
			out := table(t, report)

			if got := failing(report); len(got) != 1 || got[0] != tt.check {
				t.Errorf("failing checks = %v, want exactly [%s]\n%s", got, tt.check, out)
			}
			res, _ := report.Result(tt.check)
			for _, want := range tt.evidence {
				if !strings.Contains(text(res), want) {
					t.Errorf("%s evidence lacks %q:\n%s", tt.check, want, text(res))
				}
			}
			if report.Passed() {
				t.Errorf("Passed() = true, want false")
			}
			if !strings.Contains(out, "FAIL: a required check did not pass") {
				t.Errorf("table lacks the failing verdict:\n%s", out)
			}
		})
	}
}

func TestRunDetectsMissingReplayHeader(t *testing.T) {
	t.Parallel()
	srv := checktest.New(nil)
	url := setup(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		srv.ServeHTTP(dropHeader{w, "Idempotent-Replayed"}, r)
	}))
	report := run(t, config(url))

	res, _ := report.Result(check.Replay)
	if res.Outcome != check.Warn || !strings.Contains(text(res), "Idempotent-Replayed: absent") {
		t.Errorf("replay = %s, want warn about the absent header:\n%s", res.Outcome, text(res))
	}
	if !report.Passed() {
		t.Errorf("Passed() = false, want true: a warning is not a failure\n%s", table(t, report))
	}
}

// dropHeader removes one response header before it is written.
type dropHeader struct {
	http.ResponseWriter
	name string
}

func (d dropHeader) WriteHeader(status int) {
	d.Header().Del(d.name)
	d.ResponseWriter.WriteHeader(status)
}

func TestRunFindsPublishedRetention(t *testing.T) {
	t.Parallel()
	spec := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/yaml")
		io.WriteString(w, "openapi: 3.1.0\nx-idempotency-retention: P1D\ninfo:\n  description: Keys expire after 1 day.\n")
	}))
	t.Cleanup(spec.Close)

	tests := []struct {
		name     string
		publish  checktest.Publication
		specURL  string
		outcome  check.Outcome
		evidence []string
	}{
		{"OpenAPI", checktest.PublishOpenAPI, "", check.Pass,
			[]string{"/openapi.json (well-known location): extension", `"retention": "PT24H"`}},
		{"LinkHeader", checktest.PublishLink, "", check.Pass,
			[]string{`/docs/idempotency (Link rel="help" in a 400 response to missing-key)`, "retained for 24 hours", "/openapi.json (well-known location) → 404 Not Found"}},
		{"ProblemType", checktest.PublishProblemType, "", check.Pass,
			[]string{"/problems/idempotency-key (problem type in a 400 response to missing-key)", "retained for 24 hours"}},
		{"ConfiguredSpec", checktest.PublishNothing, spec.URL + "/spec.yaml", check.Pass,
			[]string{"/spec.yaml (the configured spec URL): extension", "expire after 1 day"}},
		{"Nothing", checktest.PublishNothing, "", check.Warn,
			[]string{"no published retention policy found", "tried http://", "/.well-known/openapi.json (well-known location) → 404 Not Found"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := config(setup(t, checktest.New(&checktest.Config{Publication: tt.publish})))
			cfg.SpecURL = tt.specURL
			report := run(t, cfg)

			res, _ := report.Result(check.RetentionPublished)
			if res.Outcome != tt.outcome {
				t.Errorf("retention-published = %s, want %s:\n%s", res.Outcome, tt.outcome, text(res))
			}
			for _, want := range tt.evidence {
				if !strings.Contains(text(res), want) {
					t.Errorf("evidence lacks %q:\n%s", want, text(res))
				}
			}
			if res.Required || !report.Passed() {
				t.Errorf("retention-published must be advisory: required=%v passed=%v", res.Required, report.Passed())
			}
		})
	}
}

func TestRunSkipsClientScopeWithoutSecondClient(t *testing.T) {
	t.Parallel()
	cfg := config(setup(t, checktest.New(nil)))
	cfg.SecondClientHeader = nil
	report := run(t, cfg)

	res, _ := report.Result(check.ClientScope)
	if res.Outcome != check.Skip || res.Required {
		t.Errorf("client-scope = %s (required %v), want an optional skip", res.Outcome, res.Required)
	}
	if !report.Passed() {
		t.Errorf("Passed() = false, want true:\n%s", table(t, report))
	}
}

func TestRunCannotDeriveMismatchBody(t *testing.T) {
	t.Parallel()
	cfg := config(setup(t, checktest.New(nil)))
	cfg.Body = []byte(`[100, "usd"]`)
	report := run(t, cfg)

	res, _ := report.Result(check.Mismatch)
	if res.Outcome != check.Skip || !strings.Contains(res.Summary, "not a JSON object") {
		t.Errorf("mismatch = %s %q, want a skip naming the reason", res.Outcome, res.Summary)
	}
	if report.Passed() {
		t.Errorf("Passed() = true, want false: a required check did not run")
	}

	cfg.MismatchBody = []byte(`[101, "usd"]`)
	report = run(t, cfg)
	if res, _ := report.Result(check.Mismatch); res.Outcome != check.Pass {
		t.Errorf("mismatch with MismatchBody = %s, want pass:\n%s", res.Outcome, text(res))
	}
}

func TestRunUnreachableEndpoint(t *testing.T) {
	t.Parallel()
	ts := httptest.NewServer(http.NotFoundHandler())
	url := ts.URL + checktest.PaymentsPath
	ts.Close()

	report := run(t, config(url))
	res, _ := report.Result(check.FirstRequest)
	if res.Outcome != check.Fail || !strings.Contains(text(res), "request failed") {
		t.Errorf("first-request = %s, want fail with the request error:\n%s", res.Outcome, text(res))
	}
	for _, name := range []string{check.Replay, check.Mismatch} {
		if res, _ := report.Result(name); res.Outcome != check.Skip {
			t.Errorf("%s = %s, want skip after a failed first-request", name, res.Outcome)
		}
	}
	if report.Passed() {
		t.Error("Passed() = true, want false")
	}
}

func TestRunIsBounded(t *testing.T) {
	t.Parallel()
	url := setup(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body) // after the body, a closed connection cancels the context
		<-r.Context().Done()        // never answers
	}))
	cfg := config(url)
	cfg.Timeout = 50 * time.Millisecond
	cfg.RunTimeout = 300 * time.Millisecond

	report := run(t, cfg)
	if report.Duration > 10*time.Second {
		t.Errorf("run took %s, want it bounded by RunTimeout", report.Duration)
	}
	res, _ := report.Result(check.MissingKey)
	if res.Outcome != check.Fail || !strings.Contains(text(res), "no complete response within 50ms") {
		t.Errorf("missing-key = %s, want fail naming the timeout:\n%s", res.Outcome, text(res))
	}
	last := report.Results[len(report.Results)-1]
	if last.Outcome != check.Skip || !strings.Contains(last.Summary, "deadline exceeded") {
		t.Errorf("%s = %s %q, want skipped after the run deadline", last.Name, last.Outcome, last.Summary)
	}
	if report.Passed() {
		t.Error("Passed() = true, want false")
	}
}

func TestRunRejectsInvalidConfig(t *testing.T) {
	t.Parallel()
	valid := config("http://127.0.0.1:1/v1/payments")
	tests := []struct {
		name   string
		modify func(*check.Config)
	}{
		{"MissingURL", func(c *check.Config) { c.URL = "" }},
		{"RelativeURL", func(c *check.Config) { c.URL = "/v1/payments" }},
		{"NonHTTPURL", func(c *check.Config) { c.URL = "ftp://example.com/x" }},
		{"BadMethod", func(c *check.Config) { c.Method = "PO ST" }},
		{"KeyInHeader", func(c *check.Config) { c.Header.Set("Idempotency-Key", "abc") }},
		{"KeyInSecondClientHeader", func(c *check.Config) { c.SecondClientHeader.Set("Idempotency-Key", "abc") }},
		{"MismatchBodyEqualsBody", func(c *check.Config) { c.MismatchBody = c.Body }},
		{"MismatchStatusOutOfRange", func(c *check.Config) { c.MismatchStatus = 42 }},
		{"ConcurrencyOne", func(c *check.Config) { c.Concurrency = 1 }},
		{"ConcurrencyTooHigh", func(c *check.Config) { c.Concurrency = 10000 }},
		{"NegativeMaxKeyLength", func(c *check.Config) { c.MaxKeyLength = -1 }},
		{"BadContentType", func(c *check.Config) { c.ContentType = "json;;" }},
		{"BadSpecURL", func(c *check.Config) { c.SpecURL = "openapi.json" }},
		{"NegativeTimeout", func(c *check.Config) { c.Timeout = -time.Second }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := valid
			cfg.Header = valid.Header.Clone()
			cfg.SecondClientHeader = valid.SecondClientHeader.Clone()
			tt.modify(&cfg)
			_, err := check.Run(context.Background(), cfg)
			if !errors.Is(err, check.ErrInvalidConfig) {
				t.Errorf("Run error = %v, want ErrInvalidConfig", err)
			}
		})
	}
}

func TestRunKeepsCredentialsOnTheEndpointOrigin(t *testing.T) {
	t.Parallel()
	seen := make(chan string, 1)
	docs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case seen <- r.Header.Get("Authorization"):
		default:
		}
		io.WriteString(w, "Idempotency keys expire after 24 hours.")
	}))
	t.Cleanup(docs.Close)
	srv := checktest.New(&checktest.Config{Publication: checktest.PublishNothing})
	url := setup(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Add("Link", "<"+docs.URL+`/idempotency>; rel="describedby"`)
		srv.ServeHTTP(w, r)
	}))
	report := run(t, config(url))

	if res, _ := report.Result(check.RetentionPublished); res.Outcome != check.Pass {
		t.Fatalf("retention-published = %s, want pass via the Link:\n%s", res.Outcome, text(res))
	}
	if auth := <-seen; auth != "" {
		t.Errorf("the documentation host received Authorization %q, want none", auth)
	}
}
