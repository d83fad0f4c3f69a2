package chaos

import (
	"fmt"
	"html/template"
	"io"
	"math"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
)

// faultMark is a fault as it was applied: when, which, and to what.
type faultMark struct {
	At       time.Duration // since the start of traffic
	Kind     FaultKind
	Instance int
	Hold     time.Duration // how long a pause, an outage or a toxic lasted
	Link     Link          // for Network
	Toxic    Toxic         // for Network
}

// faultLog holds the faults of a run as they were applied.
type faultLog struct {
	mu    sync.Mutex
	marks []faultMark
}

func (l *faultLog) add(m faultMark) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.marks = append(l.marks, m)
}

func (l *faultLog) all() []faultMark {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.marks)
}

// Answer classes of the report's timeline, in the order of its legend.
var answerClasses = []struct{ name, color string }{
	{"201", "#2b8a3e"},
	{"replay", "#74b816"},
	{"409", "#f59f00"},
	{"422", "#845ef7"},
	{"402", "#1c7ed6"},
	{"503", "#e03131"},
	{"no answer", "#495057"},
}

// faultColors are the colours of the fault marks, by kind.
var faultColors = [...]string{Kill: "#c92a2a", Pause: "#e67700", DBRestart: "#364fc7", CommitCut: "#868e96", ClockSkew: "#0ca678", Network: "#9c36b5", Failover: "#000000", DiskFull: "#5c940d"}

func answerClass(a *Attempt) string {
	switch {
	case a.Status == 0:
		return "no answer"
	case a.ok() && a.Replayed:
		return "replay"
	case a.ok():
		return "201"
	case a.Status >= 500:
		return "503"
	}
	return fmt.Sprint(a.Status)
}

// reportData is what the report shows; it is built from a finished run.
type reportData struct {
	Summary  *Summary
	Start    time.Time     // of traffic
	Traffic  time.Duration // its length
	Ops      []*Op
	Faults   []faultMark
	Reasons  map[*Op][]string
	Invalids []string // the strays
}

// writeReport writes a self-contained HTML page of the run: attempts per
// second by answer on a timeline with every fault marked, latency
// percentiles over time, the invariants' table, and each violation's key
// history.
func writeReport(w io.Writer, d reportData) error {
	const width, height, left, top = 1000.0, 260.0, 50.0, 10.0
	// The timeline covers the traffic and what came after it (settling,
	// verification), in seconds.
	var end time.Duration
	perSecond := map[string]map[int]int{}
	type lat struct {
		bucket int
		d      time.Duration
	}
	var lats []lat
	for _, op := range d.Ops {
		attempts, _ := op.snapshot()
		for _, a := range attempts {
			at := a.Sent.Sub(d.Start)
			if at < 0 || a.Phase == "verify" {
				continue // setup, before the traffic; the final replays of every acknowledged operation
			}
			end = max(end, at)
			c := answerClass(a)
			if perSecond[c] == nil {
				perSecond[c] = map[int]int{}
			}
			perSecond[c][int(at/time.Second)]++
			if a.Status != 0 {
				lats = append(lats, lat{int(at / (5 * time.Second)), a.Answered.Sub(a.Sent)})
			}
		}
	}
	seconds := max(1, int(end/time.Second)+1)
	maxCount := 1
	for _, m := range perSecond {
		for _, n := range m {
			maxCount = max(maxCount, n)
		}
	}
	x := func(sec float64) float64 { return left + min(sec/float64(seconds), 1)*width }
	y := func(v, top, h, vmax float64) float64 { return top + h - v/vmax*h }
	type series struct {
		Name, Color, Points string
	}
	var answers []series
	for _, c := range answerClasses {
		m := perSecond[c.name]
		if m == nil {
			continue
		}
		var b strings.Builder
		for s := range seconds {
			fmt.Fprintf(&b, "%.1f,%.1f ", x(float64(s)+0.5), y(float64(m[s]), top, height, float64(maxCount)))
		}
		answers = append(answers, series{c.name, c.color, b.String()})
	}
	type mark struct {
		X                  float64
		Color, Label, Kind string
	}
	var marks []mark
	for _, f := range d.Faults {
		label := fmt.Sprintf("%s at %s", f.Kind, f.At.Round(100*time.Millisecond))
		if f.Kind == Kill || f.Kind == Pause || f.Kind == ClockSkew {
			label += fmt.Sprintf(", instance %d", f.Instance)
		}
		if f.Kind == Network {
			who := "instance"
			if f.Link == LinkUpstream {
				who = "idemproxy"
			}
			label += fmt.Sprintf(", %s on %s %d's %s link", f.Toxic, who, f.Instance, f.Link)
		}
		if f.Hold > 0 {
			label += fmt.Sprintf(", %s", f.Hold.Round(100*time.Millisecond))
		}
		marks = append(marks, mark{x(f.At.Seconds()), faultColors[f.Kind], label, f.Kind.String()})
	}
	// Latency: p50 and p99 of each 5 s, in milliseconds.
	byBucket := map[int][]time.Duration{}
	for _, l := range lats {
		byBucket[l.bucket] = append(byBucket[l.bucket], l.d)
	}
	buckets := make([]int, 0, len(byBucket))
	for b := range byBucket {
		buckets = append(buckets, b)
	}
	sort.Ints(buckets)
	var p50, p99 strings.Builder
	maxMS := 10.0
	type pct struct{ p50, p99 float64 }
	pcts := map[int]pct{}
	for _, b := range buckets {
		ds := byBucket[b]
		slices.Sort(ds)
		q := func(f float64) float64 {
			return float64(ds[min(len(ds)-1, int(f*float64(len(ds))))]) / float64(time.Millisecond)
		}
		pcts[b] = pct{q(0.50), q(0.99)}
		maxMS = max(maxMS, pcts[b].p99)
	}
	// A log scale from 0.1 ms to the slowest p99, so that p50 and p99
	// both show.
	const latTop, latHeight, latMin = 10.0, 160.0, 0.1
	logY := func(ms float64) float64 {
		return y(math.Log10(max(ms, latMin)/latMin), latTop, latHeight, math.Log10(maxMS/latMin))
	}
	for _, b := range buckets {
		sx := x(float64(b*5) + 2.5)
		fmt.Fprintf(&p50, "%.1f,%.1f ", sx, logY(pcts[b].p50))
		fmt.Fprintf(&p99, "%.1f,%.1f ", sx, logY(pcts[b].p99))
	}
	type tick struct {
		Y     float64
		Label string
	}
	var ticks []tick
	for _, ms := range []float64{1, 10, 100, 1000, 10000} {
		if ms <= maxMS {
			ticks = append(ticks, tick{logY(ms), fmt.Sprintf("%g ms", ms)})
		}
	}
	// The invariants.
	s := d.Summary
	type row struct {
		Name  string
		Value string
		OK    bool
	}
	bank := row{"bank total constant", "not checked (no transfers)", true}
	if s.BankTotalOK != nil {
		bank = row{"bank total constant", fmt.Sprintf("%t (%d samples, %d transfers, %d applied, %d insufficient funds)", *s.BankTotalOK, s.BankSamples, s.Transfers, s.TransfersApplied, s.InsufficientFunds), *s.BankTotalOK}
		if s.BankSumOK != nil && *s.BankSumOK && !*s.BankTotalOK {
			bank.Value = fmt.Sprintf("the total, but %d accounts wrong: %s (%d samples, %d transfers, %d applied, %d insufficient funds, %d of them moved money)",
				len(s.OffendingAccounts), strings.Join(s.OffendingAccounts, "; "), s.BankSamples, s.Transfers, s.TransfersApplied, s.InsufficientFunds, s.InsufficientFundsMoved)
		}
	}
	rows := []row{
		{"lost", fmt.Sprint(s.Lost), s.Lost == 0},
		{"duplicated", fmt.Sprint(s.Duplicated), s.Duplicated == 0},
		{"mismatched replays", fmt.Sprint(s.MismatchedReplays), s.MismatchedReplays == 0},
		{"cross-tenant answers", fmt.Sprint(s.CrossTenant), s.CrossTenant == 0},
		{"keys left started", fmt.Sprint(s.StuckKeys), s.StuckKeys == 0},
		{"unexpected 5xx", fmt.Sprint(s.Unexpected5xx), s.Unexpected5xx == 0},
		{"unanswered", fmt.Sprint(s.Unanswered), s.Unanswered == 0},
		{"changed bodies accepted", fmt.Sprint(s.ReuseAccepted), s.ReuseAccepted == 0},
		{"unknown payments", fmt.Sprint(s.UnknownPayments), s.UnknownPayments == 0},
		{"events missing", fmt.Sprint(s.EventsMissing), s.EventsMissing == 0},
		{"events unknown", fmt.Sprint(s.EventsUnknown), s.EventsUnknown == 0},
		{"events with an invalid signature", fmt.Sprint(s.EventsInvalidSignature), s.EventsInvalidSignature == 0},
		bank,
	}
	// The offending keys' histories, at most maxListedKeys.
	type attemptRow struct {
		Sent, Instance, Phase, Answer string
	}
	type history struct {
		Key     string
		Reasons []string
		Body    string
		Rows    []attemptRow
	}
	var histories []history
	ops := make([]*Op, 0, len(d.Reasons))
	for op := range d.Reasons {
		ops = append(ops, op)
	}
	sort.Slice(ops, func(i, j int) bool { return ops[i].ID < ops[j].ID })
	for _, op := range ops[:min(len(ops), maxListedKeys)] {
		attempts, _ := op.snapshot()
		h := history{Key: op.Client + "/" + op.Key, Reasons: d.Reasons[op], Body: op.Body}
		for _, a := range attempts {
			h.Rows = append(h.Rows, attemptRow{
				Sent: a.Sent.Sub(d.Start).Round(time.Millisecond).String(), Instance: fmt.Sprint(a.Instance), Phase: a.Phase,
				Answer: strings.TrimSpace(answerLabel(a) + " " + a.Error),
			})
		}
		histories = append(histories, h)
	}
	return reportTemplate.Execute(w, map[string]any{
		"S": s, "DB": storeName(s.Store), "Verdict": verdictOf(s), "Answers": answers, "Marks": marks, "Rows": rows,
		"Histories": histories, "Strays": d.Invalids[:min(len(d.Invalids), 50)],
		"Width": width + left + 20, "Height": height + top + 30, "Left": left, "Right": left + width, "Bottom": top + height,
		"MaxCount": maxCount, "Seconds": seconds, "TrafficEnd": x(d.Traffic.Seconds()),
		"P50": p50.String(), "P99": p99.String(), "MaxMS": fmt.Sprintf("%.0f", maxMS), "LatBottom": latTop + latHeight, "Ticks": ticks,
		"FaultKinds": []mark{{0, faultColors[Kill], "", "kill"}, {0, faultColors[Pause], "", "pause"}, {0, faultColors[DBRestart], "", "db-restart"}, {0, faultColors[CommitCut], "", "commit-cut"}, {0, faultColors[ClockSkew], "", "clock-skew"}, {0, faultColors[Network], "", "network"}, {0, faultColors[Failover], "", "failover"}, {0, faultColors[DiskFull], "", "disk-full"}},
	})
}

func verdictOf(s *Summary) string {
	if s.Violations > 0 {
		return fmt.Sprintf("FAIL: %d violations", s.Violations)
	}
	return "PASS: no violation"
}

// writeReportFile writes the report of a finished run to path.
func (h *harness) writeReportFile(path string, sum *Summary, r *Report) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("chaos: report: %w", err)
	}
	err = writeReport(f, reportData{
		Summary: sum, Start: h.start, Traffic: h.cfg.Duration, Ops: h.history.Ops(), Faults: h.faultLog.all(),
		Reasons: r.reasons, Invalids: r.strays,
	})
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("chaos: report: %w", err)
	}
	return nil
}

var reportTemplate = template.Must(template.New("report").Parse(`<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>idem chaos, seed {{.S.Seed}}</title>
<style>
body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#212529}
h1{font-size:20px} h2{font-size:16px;margin-top:28px}
table{border-collapse:collapse} td,th{border:1px solid #dee2e6;padding:3px 8px;text-align:left}
.ok{color:#2b8a3e} .bad{color:#c92a2a;font-weight:bold}
.legend span{display:inline-block;margin-right:14px} .sw{display:inline-block;width:12px;height:12px;margin-right:4px;vertical-align:-1px}
svg text{font:11px system-ui,sans-serif;fill:#495057}
pre{white-space:pre-wrap;background:#f8f9fa;padding:6px}
</style></head><body>
<h1>idem chaos: seed {{.S.Seed}}, {{.S.Instances}} instances, {{.S.Clients}} clients, {{.S.Seconds}} s: <span class="{{if .S.Violations}}bad{{else}}ok{{end}}">{{.Verdict}}</span></h1>
<p>{{.S.Operations}} operations, {{.S.Attempts}} attempts, {{.S.Acknowledged}} acknowledged, {{.S.Declines}} declined payments.
Faults: {{.S.Kills}} kills, {{.S.Pauses}} pauses, {{.S.DBRestarts}} {{.DB}} restarts, {{.S.CommitCuts}} commit cuts, {{.S.ClockSkews}} clock skews, {{.S.NetworkFaults}} network faults, {{.S.Failovers}} failovers, {{.S.DiskFull}} full disks.</p>

<h2>Attempts per second, by answer, with the faults (the final replays of every acknowledged operation left out)</h2>
<div class="legend">{{range .Answers}}<span><i class="sw" style="background:{{.Color}}"></i>{{.Name}}</span>{{end}}
{{range .FaultKinds}}<span><i class="sw" style="background:{{.Color}};opacity:.5"></i>{{.Kind}}</span>{{end}}</div>
<svg id="timeline" width="{{.Width}}" height="{{.Height}}" role="img" aria-label="attempts per second by answer, faults marked">
<line x1="{{.Left}}" y1="{{.Bottom}}" x2="{{.Right}}" y2="{{.Bottom}}" stroke="#adb5bd"/>
<line x1="{{.Left}}" y1="10" x2="{{.Left}}" y2="{{.Bottom}}" stroke="#adb5bd"/>
<text x="4" y="20">{{.MaxCount}}/s</text><text x="4" y="{{.Bottom}}">0</text>
<text x="{{.Right}}" y="{{.Bottom}}" dy="16" text-anchor="end">{{.Seconds}} s</text>
<line x1="{{.TrafficEnd}}" y1="10" x2="{{.TrafficEnd}}" y2="{{.Bottom}}" stroke="#212529" stroke-dasharray="4 3"/>
<text x="{{.TrafficEnd}}" y="22" dx="-4" text-anchor="end">faults stop; settling after</text>
{{range .Marks}}<line class="fault {{.Kind}}" x1="{{.X}}" y1="10" x2="{{.X}}" y2="{{$.Bottom}}" stroke="{{.Color}}" stroke-opacity=".45"><title>{{.Label}}</title></line>
{{end}}{{range .Answers}}<polyline class="answer" data-answer="{{.Name}}" fill="none" stroke="{{.Color}}" stroke-width="1.5" points="{{.Points}}"><title>{{.Name}}</title></polyline>
{{end}}</svg>

<h2>Latency of answered attempts, p50 and p99 per 5 s (log scale)</h2>
<svg id="latency" width="{{.Width}}" height="200" role="img" aria-label="latency percentiles over time">
<line x1="{{.Left}}" y1="{{.LatBottom}}" x2="{{.Right}}" y2="{{.LatBottom}}" stroke="#adb5bd"/>
<text x="4" y="20">{{.MaxMS}} ms</text><text x="4" y="{{.LatBottom}}">0.1 ms</text>
{{range .Ticks}}<line x1="{{$.Left}}" y1="{{.Y}}" x2="{{$.Right}}" y2="{{.Y}}" stroke="#e9ecef"/><text x="4" y="{{.Y}}">{{.Label}}</text>
{{end}}
<polyline fill="none" stroke="#1c7ed6" stroke-width="1.5" points="{{.P50}}"><title>p50</title></polyline>
<polyline fill="none" stroke="#c92a2a" stroke-width="1.5" points="{{.P99}}"><title>p99</title></polyline>
<text x="{{.Right}}" y="20" text-anchor="end"><tspan fill="#1c7ed6">p50</tspan> <tspan fill="#c92a2a">p99</tspan></text>
</svg>

<h2>Invariants</h2>
<table id="invariants"><tr><th>invariant</th><th>violations</th></tr>
{{range .Rows}}<tr><td>{{.Name}}</td><td class="{{if .OK}}ok{{else}}bad{{end}}">{{.Value}}</td></tr>
{{end}}</table>

<h2>Violations</h2>
{{if not .Histories}}{{if not .Strays}}<p class="ok">None.</p>{{end}}{{end}}
{{range .Histories}}<h3 class="violation">{{.Key}}</h3><ul>{{range .Reasons}}<li class="bad">{{.}}</li>{{end}}</ul>
<pre>{{.Body}}</pre>
<table><tr><th>sent</th><th>instance</th><th>phase</th><th>answer</th></tr>
{{range .Rows}}<tr><td>{{.Sent}}</td><td>{{.Instance}}</td><td>{{.Phase}}</td><td>{{.Answer}}</td></tr>
{{end}}</table>{{end}}
{{if .Strays}}<h3>Without one key</h3><ul>{{range .Strays}}<li class="bad">{{.}}</li>{{end}}</ul>{{end}}
</body></html>
`))
