package chaos

import (
	"strings"
	"testing"
	"time"
)

// TestReport renders a run with a violation and checks what the page
// holds: the timeline with one line per answer and a mark per fault, the
// latency chart, the invariants with the failing one marked, and the
// offending key's history.
func TestReport(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 12, 2, 7, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return start.Add(time.Duration(s * float64(time.Second))) }
	ok := &Op{ID: 1, Client: "alice", Key: "k1", Body: `{"amount":100}`}
	ok.record(&Attempt{Op: 1, Sent: at(0.1), Answered: at(0.12), Status: 201})
	ok.record(&Attempt{Op: 1, Sent: at(1.2), Answered: at(1.21), Status: 201, Replayed: true})
	bad := &Op{ID: 2, Client: "bob", Key: "k2", Body: `{"amount":200}`}
	bad.record(&Attempt{Op: 2, Instance: 1, Phase: "traffic", Sent: at(2.5), Error: "connection reset"})
	bad.record(&Attempt{Op: 2, Instance: 2, Phase: "settle", Sent: at(6), Answered: at(6.4), Status: 409, Problem: "idempotency-key-in-flight"})
	yes := false
	sum := &Summary{Seed: 7, Instances: 3, Clients: 2, Seconds: 8, Operations: 2, Lost: 1, Violations: 2, BankTotalOK: &yes, Transfers: 3}
	var b strings.Builder
	err := writeReport(&b, reportData{
		Summary: sum, Start: start, Traffic: 5 * time.Second, Ops: []*Op{ok, bad},
		Faults: []faultMark{
			{At: 2 * time.Second, Kind: Kill, Instance: 1},
			{At: 3 * time.Second, Kind: DBRestart, Hold: time.Second},
		},
		Reasons:  map[*Op][]string{bad: {"lost: answered 409 but a payment exists"}},
		Invalids: []string{"the balances sum to 1 at the end, want 2"},
	})
	if err != nil {
		t.Fatal(err)
	}
	page := b.String()
	for _, want := range []string{
		"<!DOCTYPE html>", "FAIL: 2 violations",
		`id="timeline"`, `data-answer="201"`, `data-answer="replay"`, `data-answer="no answer"`, `data-answer="409"`,
		`class="fault kill"`, "kill at 2s, instance 1", `class="fault db-restart"`, "db-restart at 3s, 1s",
		`id="latency"`, `id="invariants"`, `<td class="bad">1</td>`, "false (0 samples, 3 transfers",
		`<h3 class="violation">bob/k2</h3>`, "lost: answered 409 but a payment exists", "connection reset", "409 idempotency-key-in-flight",
		"the balances sum to 1 at the end",
	} {
		if !strings.Contains(page, want) {
			t.Errorf("the report lacks %q", want)
		}
	}
	if strings.Contains(page, "<script") || strings.Contains(page, "http://") || strings.Contains(page, "https://") {
		t.Error("the report is not self-contained")
	}
}
