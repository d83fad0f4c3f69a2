package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
)

// Report is the machine-readable form of a run, as `idem bench --json`
// prints it.
type Report struct {
	// Order lists the variants in the order they ran in the first round;
	// even rounds run all but the first in reverse (see roundOrder).
	Order []string `json:"order"`
	// Variants maps each variant's name to its figures.
	Variants map[string]VariantReport `json:"variants"`
	// ConflictP50 and ConflictP99 are the 409 latencies of the conflict
	// variant, in milliseconds; absent when it did not run.
	ConflictP50 *float64 `json:"conflict_p50_ms,omitempty"`
	ConflictP99 *float64 `json:"conflict_p99_ms,omitempty"`
	// Prefill describes the prefilled key table that Variants were
	// measured on (idem bench --prefill); absent without it.
	Prefill *PrefillReport `json:"prefill,omitempty"`
	// Empty maps each variant's name to its figures on an empty key table
	// in the same run, rounds interleaved; absent without --prefill.
	Empty map[string]VariantReport `json:"empty,omitempty"`
	// Purging maps each variant's name to its figures on the prefilled
	// key table while the purge ran, in the same run; absent without
	// --prefill-purge.
	Purging map[string]VariantReport `json:"purging,omitempty"`
}

// PrefillReport is the prefilled key table of a Report.
type PrefillReport struct {
	Keys    int64   `json:"keys"`    // completed keys within retention
	Backlog int64   `json:"backlog"` // expired keys for the purge
	FillS   float64 `json:"fill_s"`  // seconds to fill and vacuum
	// Bytes per key (keys and backlog) of the key table's heap, its
	// indexes and its TOAST table, before the run.
	TableBytesPerKey float64 `json:"table_bytes_per_key"`
	IndexBytesPerKey float64 `json:"index_bytes_per_key"`
	ToastBytesPerKey float64 `json:"toast_bytes_per_key"`
	// PurgeRows is how many keys the purge deleted while the purging side
	// was measured (--prefill-purge), in PurgeS seconds, at PurgeRowsPerS;
	// 0 without it. PurgeS is less than the purging side's time when the
	// backlog ran out.
	PurgeRows     int64   `json:"purge_rows"`
	PurgeS        float64 `json:"purge_s"`
	PurgeRowsPerS float64 `json:"purge_rows_per_s"`
	// PurgeBatch and PurgeShare are the purge's batch size and the most
	// of its time it spent in its batches (--purge-batch, --purge-share,
	// or the store's defaults); 0 without --prefill-purge.
	PurgeBatch int     `json:"purge_batch,omitempty"`
	PurgeShare float64 `json:"purge_share,omitempty"`
	// Ratios maps each variant to its figures on the prefilled table over
	// the empty one's: throughput and p99.
	Ratios map[string]PrefillRatio `json:"ratios"`
	// PurgingRatios are the same for the prefilled table while the purge
	// ran; absent without --prefill-purge.
	PurgingRatios map[string]PrefillRatio `json:"purging_ratios,omitempty"`
}

// PrefillRatio compares a variant on the prefilled and the empty table.
type PrefillRatio struct {
	RPS float64 `json:"rps"` // prefilled over empty; 1 is no cost of size
	P99 float64 `json:"p99"` // prefilled over empty
}

// NewOutcomeReport returns the Report of a RunAll.
func NewOutcomeReport(out *Outcome) Report {
	rep := NewReport(out.Results)
	p := out.Prefill
	if p == nil {
		return rep
	}
	empty := NewReport(p.Empty)
	rep.Empty = empty.Variants
	n := float64(p.Keys + p.Backlog)
	round := func(f float64) float64 { return math.Round(f*1000) / 1000 }
	pr := &PrefillReport{
		Keys: p.Keys, Backlog: p.Backlog, FillS: round(p.Fill.Seconds()),
		TableBytesPerKey: round(float64(p.Size.Table) / n), IndexBytesPerKey: round(float64(p.Size.Indexes) / n),
		ToastBytesPerKey: round(float64(p.Size.Toast) / n),
		PurgeRows:        p.PurgeRows, PurgeBatch: p.PurgeBatch, PurgeShare: p.PurgeShare,
	}
	if p.PurgeTime > 0 {
		pr.PurgeS = round(p.PurgeTime.Seconds())
		pr.PurgeRowsPerS = round(float64(p.PurgeRows) / p.PurgeTime.Seconds())
	}
	ratios := func(side map[string]VariantReport) map[string]PrefillRatio {
		out := map[string]PrefillRatio{}
		for v, full := range side {
			e := empty.Variants[v]
			var r PrefillRatio
			if e.RPS > 0 {
				r.RPS = round(full.RPS / e.RPS)
			}
			if e.P99 > 0 {
				r.P99 = round(full.P99 / e.P99)
			}
			out[v] = r
		}
		return out
	}
	pr.Ratios = ratios(rep.Variants)
	if p.Purging != nil {
		rep.Purging = NewReport(p.Purging).Variants
		pr.PurgingRatios = ratios(rep.Purging)
	}
	rep.Prefill = pr
	return rep
}

// WriteOutcomeJSON writes the Report of a RunAll as one indented JSON
// object.
func WriteOutcomeJSON(w io.Writer, out *Outcome) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(NewOutcomeReport(out))
}

// WriteOutcome writes a RunAll as tables: the results, and with a prefill
// the results on the empty table and the ratios of the two.
func WriteOutcome(w io.Writer, out *Outcome) {
	WriteTable(w, out.Results)
	if out.Prefill == nil {
		return
	}
	rep := NewOutcomeReport(out)
	p := rep.Prefill
	fmt.Fprintf(w, "\nthe same on an empty key table, in the same rounds:\n")
	WriteTable(w, out.Prefill.Empty)
	if out.Prefill.Purging != nil {
		fmt.Fprintf(w, "\nthe same on the prefilled key table while the purge ran, in the same rounds:\n")
		WriteTable(w, out.Prefill.Purging)
	}
	fmt.Fprintf(w, "\nprefilled with %d keys (and %d expired) in %.0f s: bytes per key: table %.0f, indexes %.0f, TOAST %.0f\n",
		p.Keys, p.Backlog, p.FillS, p.TableBytesPerKey, p.IndexBytesPerKey, p.ToastBytesPerKey)
	if out.Prefill.Purging != nil {
		var measured float64
		for _, r := range out.Prefill.Purging {
			measured += r.Elapsed.Seconds()
		}
		fmt.Fprintf(w, "purge while the purging side ran (batches of %d, share %.2f): %d keys in %.1f s of its %.1f s, %.0f keys/s\n",
			p.PurgeBatch, p.PurgeShare, p.PurgeRows, p.PurgeS, measured, p.PurgeRowsPerS)
	}
	fmt.Fprintf(w, "%-14s %12s %12s", "over empty", "req/s", "p99")
	if p.PurgingRatios != nil {
		fmt.Fprintf(w, " %14s %12s", "purging req/s", "p99")
	}
	fmt.Fprintln(w)
	for _, v := range rep.Order {
		r := p.Ratios[v]
		fmt.Fprintf(w, "%-14s %11.2fx %11.2fx", v, r.RPS, r.P99)
		if p.PurgingRatios != nil {
			q := p.PurgingRatios[v]
			fmt.Fprintf(w, " %13.2fx %11.2fx", q.RPS, q.P99)
		}
		fmt.Fprintln(w)
	}
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
