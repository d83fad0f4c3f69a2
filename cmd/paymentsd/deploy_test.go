package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// The dashboard and the alerts that ship in deploy/ name only metrics that
// paymentsd exports: a renamed metric would leave a panel empty and an
// alert silent, which nobody notices until it is needed.

var (
	dashboardPath = filepath.Join("..", "..", "deploy", "grafana", "idem.json")
	alertsPath    = filepath.Join("..", "..", "deploy", "prometheus", "alerts.yml")

	// metricNameRE matches the idem metric names in a text.
	metricNameRE = regexp.MustCompile(`\bidem_[a-z0-9_]*[a-z0-9]\b`)
	// typeLineRE matches a "# TYPE name type" line of the text format.
	typeLineRE = regexp.MustCompile(`(?m)^# TYPE (\S+) (\S+)$`)
)

// exportedMetrics returns every series name that a scrape of /metrics
// can hold: the families, and for histograms and summaries the _bucket,
// _sum and _count series.
func exportedMetrics(exposition string) map[string]bool {
	names := map[string]bool{}
	for _, m := range typeLineRE.FindAllStringSubmatch(exposition, -1) {
		names[m[1]] = true
		if m[2] == "histogram" || m[2] == "summary" {
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				names[m[1]+suffix] = true
			}
		}
	}
	return names
}

// unknownMetrics returns the idem metric names in text that exported
// lacks, sorted, each once.
func unknownMetrics(text string, exported map[string]bool) []string {
	var unknown []string
	for _, name := range metricNameRE.FindAllString(text, -1) {
		if !exported[name] && !slices.Contains(unknown, name) {
			unknown = append(unknown, name)
		}
	}
	slices.Sort(unknown)
	return unknown
}

// dashboardExprs returns the query of every panel target of a Grafana
// dashboard.
func dashboardExprs(t *testing.T, raw []byte) []string {
	t.Helper()
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("%s is not valid JSON: %v", dashboardPath, err)
	}
	var exprs []string
	for _, p := range dash.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("dashboard panel %q has no query", p.Title)
		}
		for _, target := range p.Targets {
			if !metricNameRE.MatchString(target.Expr) {
				t.Errorf("dashboard panel %q: query %q names no idem metric", p.Title, target.Expr)
			}
			exprs = append(exprs, target.Expr)
		}
	}
	return exprs
}

// scrapePaymentsd runs paymentsd in-process and returns its /metrics.
func scrapePaymentsd(t *testing.T) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	stdout, stderr := newLineWriter(), newLineWriter()
	db := "sqlite:" + filepath.Join(t.TempDir(), "p.db")
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, []string{"-addr", "127.0.0.1:0", "-admin-addr", "127.0.0.1:0", "-db", db, "-tokens", "sk_a=alice"}, stdout, stderr)
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	base := waitListening(t, stdout.lines, "paymentsd")
	admin := waitLine(t, stdout.lines, adminRE, "paymentsd's admin endpoint")
	// A request, so that the claim histogram has a series; the purge
	// service's first run starts at once, but its metrics exist from the
	// start.
	if a := post(t, base, "sk_a", "deploy-1", `{"amount":4200,"currency":"usd","customer":"cus_1"}`); a.status != http.StatusCreated {
		t.Fatalf("POST /v1/payments: %d %s", a.status, a.body)
	}
	res, err := http.Get(admin + "/metrics")
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %d, %v", res.StatusCode, err)
	}
	return string(body)
}

func TestDeployNamesOnlyExportedMetrics(t *testing.T) {
	t.Parallel()
	exported := exportedMetrics(scrapePaymentsd(t))
	dashboard, err := os.ReadFile(dashboardPath)
	if err != nil {
		t.Fatal(err)
	}
	alerts, err := os.ReadFile(alertsPath)
	if err != nil {
		t.Fatal(err)
	}
	exprs := dashboardExprs(t, dashboard)
	if len(exprs) < 10 {
		t.Errorf("the dashboard has %d queries; the test read it wrong", len(exprs))
	}
	for path, text := range map[string]string{dashboardPath: string(dashboard), alertsPath: string(alerts)} {
		if len(metricNameRE.FindAllString(text, -1)) == 0 {
			t.Errorf("%s names no idem metric; the test read it wrong", path)
		}
		if unknown := unknownMetrics(text, exported); len(unknown) > 0 {
			t.Errorf("%s names metrics that paymentsd does not export: %s", path, strings.Join(unknown, ", "))
		}
	}

	// The check catches a renamed metric: the dashboard and the alerts as
	// they would read after idem_purge_deleted_total became
	// idem_purge_keys_deleted_total in the code but not in deploy/.
	renamed := map[string]bool{}
	for name := range exported {
		renamed[strings.Replace(name, "idem_purge_deleted_total", "idem_purge_keys_deleted_total", 1)] = true
	}
	if got := unknownMetrics(string(dashboard), renamed); !slices.Equal(got, []string{"idem_purge_deleted_total"}) {
		t.Errorf("after a rename of idem_purge_deleted_total, the dashboard check reports %v; want [idem_purge_deleted_total]", got)
	}
}
