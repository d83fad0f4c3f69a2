package check

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// Outcome is the verdict of one check.
type Outcome string

// The outcomes a check can have.
const (
	// Pass means the endpoint behaved as the contract requires.
	Pass Outcome = "pass"
	// Fail means the endpoint broke the contract.
	Fail Outcome = "fail"
	// Warn means the contract is met but something advisable is missing.
	Warn Outcome = "warn"
	// Skip means the check did not run; Summary says why.
	Skip Outcome = "skip"
)

// Result is what one check found.
type Result struct {
	// Name is one of the check names, such as Replay.
	Name string `json:"name"`
	// Required reports whether the endpoint must pass this check to conform.
	Required bool `json:"required"`
	// Outcome is the verdict.
	Outcome Outcome `json:"result"`
	// Summary is the verdict in one line.
	Summary string `json:"summary"`
	// Evidence lists what was sent and seen: statuses, headers, body excerpts, counts.
	Evidence []string `json:"evidence,omitempty"`
}

// ok reports whether the result lets the endpoint conform: required checks
// must pass (a warning is a pass with a remark), others never count.
func (r Result) ok() bool {
	return !r.Required || r.Outcome == Pass || r.Outcome == Warn
}

func (r *Result) addf(format string, args ...any) {
	r.Evidence = append(r.Evidence, fmt.Sprintf(format, args...))
}

func newResult(o Outcome, format string, args ...any) Result {
	return Result{Outcome: o, Summary: fmt.Sprintf(format, args...)}
}

func skip(format string, args ...any) Result { return newResult(Skip, format, args...) }

// Report is the outcome of one Run.
type Report struct {
	// URL is the endpoint that was checked.
	URL string
	// Method is the method of the probes.
	Method string
	// StartedAt is when the run began.
	StartedAt time.Time
	// Duration is how long the run took.
	Duration time.Duration
	// Results holds one Result per check, in the order they ran.
	Results []Result
}

// Summary counts a Report's outcomes.
type Summary struct {
	Pass int `json:"pass"` // checks that passed
	Fail int `json:"fail"` // checks that failed
	Warn int `json:"warn"` // checks that passed with a remark
	Skip int `json:"skip"` // checks that did not run
	// Passed reports whether every required check passed (or passed with a warning).
	Passed bool `json:"passed"`
}

// Summary counts the outcomes of the report's checks.
func (r Report) Summary() Summary {
	s := Summary{Passed: r.Passed()}
	for _, res := range r.Results {
		switch res.Outcome {
		case Pass:
			s.Pass++
		case Fail:
			s.Fail++
		case Warn:
			s.Warn++
		case Skip:
			s.Skip++
		}
	}
	return s
}

// Passed reports whether every required check passed, possibly with a warning.
// A required check that was skipped, for instance because the run ran out of
// time, does not pass.
func (r Report) Passed() bool {
	for _, res := range r.Results {
		if !res.ok() {
			return false
		}
	}
	return len(r.Results) > 0
}

// Result returns the result of the named check.
func (r Report) Result(name string) (Result, bool) {
	for _, res := range r.Results {
		if res.Name == name {
			return res, true
		}
	}
	return Result{}, false
}

// WriteTable writes the report as a table for people: one row per check with
// its result and evidence, then a summary line.
func (r Report) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "idem check: %s %s\n\n", r.Method, r.URL)
	fmt.Fprintln(tw, "CHECK\tREQUIRED\tRESULT\tEVIDENCE")
	for _, res := range r.Results {
		required := "no"
		if res.Required {
			required = "yes"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", res.Name, required, res.Outcome, tableCell(res.Summary))
		for _, line := range res.Evidence {
			fmt.Fprintf(tw, "\t\t\t  %s\n", tableCell(line))
		}
	}
	s := r.Summary()
	verdict := "PASS: every required check passed"
	if !s.Passed {
		verdict = "FAIL: a required check did not pass"
	}
	fmt.Fprintf(tw, "\n%d checks: %d pass, %d warn, %d fail, %d skip in %s. %s\n",
		len(r.Results), s.Pass, s.Warn, s.Fail, s.Skip, r.Duration.Round(time.Millisecond), verdict)
	return tw.Flush()
}

// tableCell keeps a value on one line and free of the tabs that delimit cells.
func tableCell(s string) string {
	return strings.NewReplacer("\t", `\t`, "\n", `\n`, "\r", `\r`).Replace(s)
}

// jsonReport is the shape WriteJSON produces.
type jsonReport struct {
	URL             string   `json:"url"`
	Method          string   `json:"method"`
	StartedAt       string   `json:"started_at"`
	DurationSeconds float64  `json:"duration_seconds"`
	Checks          []Result `json:"checks"`
	Summary         Summary  `json:"summary"`
}

// MarshalJSON encodes the report as an object with the url, method,
// started_at, duration_seconds, the checks array and a summary.
func (r Report) MarshalJSON() ([]byte, error) {
	checks := r.Results
	if checks == nil {
		checks = []Result{}
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false) // evidence quotes bodies; keep <, > and & readable
	err := enc.Encode(jsonReport{
		URL:             r.URL,
		Method:          r.Method,
		StartedAt:       r.StartedAt.UTC().Format(time.RFC3339Nano),
		DurationSeconds: r.Duration.Seconds(),
		Checks:          checks,
		Summary:         r.Summary(),
	})
	return bytes.TrimSpace(buf.Bytes()), err
}

// WriteJSON writes the report as indented JSON for machines (see MarshalJSON).
func (r Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(r); err != nil {
		return fmt.Errorf("check: write json report: %w", err)
	}
	return nil
}
