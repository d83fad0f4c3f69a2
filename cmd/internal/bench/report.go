package bench

import (
	"encoding/json"
	"io"
	"math"
)

// Report is the machine-readable form of a run, as `idem bench --json`
// prints it.
type Report struct {
	// Order lists the variants in the order they ran.
	Order []string `json:"order"`
	// Variants maps each variant's name to its figures.
	Variants map[string]VariantReport `json:"variants"`
	// ConflictP50 and ConflictP99 are the 409 latencies of the conflict
	// variant, in milliseconds; absent when it did not run.
	ConflictP50 *float64 `json:"conflict_p50_ms,omitempty"`
	ConflictP99 *float64 `json:"conflict_p99_ms,omitempty"`
}

// VariantReport is one variant's figures in a Report.
type VariantReport struct {
	Requests int64 `json:"requests"`
	Errors   int64 `json:"errors"`
	// FirstError is what the first failed request got; absent when none did.
	FirstError string  `json:"first_error,omitempty"`
	RPS        float64 `json:"rps"`      // requests per second
	Ratio      float64 `json:"ratio"`    // RPS divided by bare's
	RatioTx    float64 `json:"ratio_tx"` // RPS divided by bare-tx's; 0 when it did not run
	P50        float64 `json:"p50_ms"`
	P99        float64 `json:"p99_ms"`
	AppUS      float64 `json:"app_us"` // CPU of this process per request, microseconds
	DBUS       float64 `json:"db_us"`  // CPU of local PostgreSQL processes per request
}

// NewReport returns the Report of results.
func NewReport(results []Result) Report {
	rep := Report{Variants: map[string]VariantReport{}}
	round := func(f float64, places int) float64 {
		p := math.Pow(10, float64(places))
		return math.Round(f*p) / p
	}
	for _, r := range results {
		rep.Order = append(rep.Order, r.Variant)
		rep.Variants[r.Variant] = VariantReport{
			Requests: r.Requests, Errors: r.Errors, FirstError: r.FirstError,
			RPS: round(r.PerSecond, 1), Ratio: round(r.Ratio, 3), RatioTx: round(r.RatioTx, 3),
			P50: round(ms(r.P50), 3), P99: round(ms(r.P99), 3),
			AppUS: round(us(r.CPU), 1), DBUS: round(us(r.DBCPU), 1),
		}
		if r.Variant == Conflict {
			p50, p99 := round(ms(r.P50), 3), round(ms(r.P99), 3)
			rep.ConflictP50, rep.ConflictP99 = &p50, &p99
		}
	}
	return rep
}

// WriteJSON writes the Report of results as one indented JSON object.
func WriteJSON(w io.Writer, results []Result) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(NewReport(results))
}
