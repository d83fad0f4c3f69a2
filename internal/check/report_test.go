package check

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func TestReportPassed(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		results []Result
		want    bool
	}{
		{"AllPass", []Result{{Required: true, Outcome: Pass}, {Required: true, Outcome: Pass}}, true},
		{"WarningIsAPass", []Result{{Required: true, Outcome: Warn}}, true},
		{"RequiredFailure", []Result{{Required: true, Outcome: Pass}, {Required: true, Outcome: Fail}}, false},
		{"RequiredSkip", []Result{{Required: true, Outcome: Skip}}, false},
		{"AdvisoryFailureDoesNotCount", []Result{{Required: true, Outcome: Pass}, {Outcome: Fail}, {Outcome: Skip}}, true},
		{"NothingRan", nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := (Report{Results: tt.results}).Passed(); got != tt.want {
				t.Errorf("Passed() = %v, want %v", got, tt.want)
			}
		})
	}
}

func sampleReport() Report {
	return Report{
		URL:       "http://127.0.0.1:8080/v1/payments",
		Method:    "POST",
		StartedAt: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
		Duration:  1500 * time.Millisecond,
		Results: []Result{
			{Name: MissingKey, Required: true, Outcome: Pass, Summary: "rejected with 400", Evidence: []string{"no key → 400 <problem>", "tab\there"}},
			{Name: Replay, Required: true, Outcome: Fail, Summary: "bodies differ"},
			{Name: RetentionPublished, Outcome: Warn, Summary: "nothing published"},
		},
	}
}

func TestReportWriteJSON(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	if err := sampleReport().WriteJSON(&b); err != nil {
		t.Fatal(err)
	}
	var got struct {
		URL             string   `json:"url"`
		StartedAt       string   `json:"started_at"`
		DurationSeconds float64  `json:"duration_seconds"`
		Checks          []Result `json:"checks"`
		Summary         Summary  `json:"summary"`
	}
	if err := json.Unmarshal(b.Bytes(), &got); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, b.String())
	}
	want := Summary{Pass: 1, Fail: 1, Warn: 1, Passed: false}
	if got.Summary != want {
		t.Errorf("summary = %+v, want %+v", got.Summary, want)
	}
	if len(got.Checks) != 3 || got.Checks[1].Name != Replay || got.Checks[1].Outcome != Fail || !got.Checks[0].Required {
		t.Errorf("checks = %+v", got.Checks)
	}
	if got.StartedAt != "2026-01-02T03:04:05Z" || got.DurationSeconds != 1.5 {
		t.Errorf("started_at %q, duration %v", got.StartedAt, got.DurationSeconds)
	}
	if !strings.Contains(b.String(), "<problem>") {
		t.Errorf("evidence is HTML-escaped:\n%s", b.String())
	}
}

func TestReportWriteTable(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	if err := sampleReport().WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"idem check: POST http://127.0.0.1:8080/v1/payments",
		"CHECK",
		"missing-key          yes       pass    rejected with 400",
		"no key → 400 <problem>",
		`tab\there`,
		"replay               yes       fail    bodies differ",
		"retention-published  no        warn",
		"3 checks: 1 pass, 1 warn, 1 fail, 0 skip in 1.5s. FAIL",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}
