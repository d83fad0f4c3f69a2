package chaos

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem/cmd/internal/mariadb"
	"github.com/idemkit/idem/internal/pgtest/pgcluster"
)

func TestSchedule(t *testing.T) {
	t.Parallel()
	f := Config{}.withDefaults().Faults
	lease := time.Second
	a := Schedule(42, 10*time.Minute, f, 3, lease)
	if b := Schedule(42, 10*time.Minute, f, 3, lease); !slices.Equal(a, b) {
		t.Fatal("the same seed gave two schedules")
	}
	if c := Schedule(43, 10*time.Minute, f, 3, lease); slices.Equal(a, c) {
		t.Fatal("two seeds gave the same schedule")
	}
	n := map[FaultKind]int{}
	for i, e := range a {
		n[e.Kind]++
		if e.At < 0 || e.At >= 10*time.Minute || (i > 0 && e.At < a[i-1].At) {
			t.Fatalf("event %d at %s: out of order or out of the run", i, e.At)
		}
		if e.Instance < 0 || e.Instance >= 3 {
			t.Fatalf("event %d names instance %d of 3", i, e.Instance)
		}
		if e.Kind == Pause && e.Hold <= lease {
			t.Errorf("pause %d holds %s, not past the %s lease", i, e.Hold, lease)
		}
		if e.Kind == DBRestart && (e.Hold <= 0 || e.Hold > f.DBDown) {
			t.Errorf("outage %d lasts %s, want (0, %s]", i, e.Hold, f.DBDown)
		}
	}
	// Gaps are at most 1.5 times the mean, so a run of d has at least
	// d/(1.5·every) - 1 faults of each kind.
	for k, every := range map[FaultKind]time.Duration{Kill: f.KillEvery, Pause: f.PauseEvery, DBRestart: f.DBRestartEvery, CommitCut: f.CutEvery} {
		if least := int(10*time.Minute/(every*3/2)) - 1; n[k] < least {
			t.Errorf("%d %s faults in 10 minutes, want at least %d", n[k], k, least)
		}
	}
	off := f
	off.KillEvery = -1
	for _, e := range Schedule(42, 10*time.Minute, off, 3, lease) {
		if e.Kind == Kill {
			t.Fatal("a disabled kind was scheduled")
		}
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	for name, c := range map[string]Config{
		"NegativeDuration": {Duration: -time.Second},
		"TooManyInstances": {Instances: 33},
		"LongLease":        {LockTimeout: time.Minute},
		"NoWorkload":       {Workloads: []Weighted{{Storm{}, 0}}},
		"UnknownStore":     {Store: "oracle"},
	} {
		if err := c.withDefaults().validate(); err == nil {
			t.Errorf("%s: validate accepted %+v", name, c)
		}
	}
	if err := (Config{}).withDefaults().validate(); err != nil {
		t.Errorf("the defaults do not validate: %v", err)
	}
}

func TestSummaryJSONNamesEveryField(t *testing.T) {
	t.Parallel()
	b, err := json.Marshal(&Summary{})
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"seed", "operations", "attempts", "acknowledged", "lost", "duplicated",
		"mismatched_replays", "cross_tenant", "stuck_keys", "kills", "pauses", "db_restarts",
		"commit_cuts", "clock_skews", "network_faults", "failovers", "disk_full", "proxy_operations", "declines", "transfers", "bank_total_ok", "bank_sum_ok", "insufficient_funds_moved", "unexpected_5xx", "events_delivered", "events_missing",
		"events_unknown", "events_invalid_signature", "events_duplicate_ids"} {
		if _, ok := m[f]; !ok {
			t.Errorf("the JSON summary has no %q", f)
		}
	}
}

// setupRun skips in -short mode and when this machine cannot run a
// cluster (failing instead under CI=true), and returns the module to build.
func setupRun(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("a chaos run takes a minute or more")
	}
	if err := pgcluster.Available(); err != nil {
		if ci, _ := strconv.ParseBool(os.Getenv("CI")); ci {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	src, err := ModuleDir(".")
	if err != nil {
		t.Fatal(err)
	}
	return src
}

// binRoot holds the binaries that the runs share (binDir), and is removed
// when the tests end.
var binRoot string

func TestMain(m *testing.M) {
	var err error
	if binRoot, err = os.MkdirTemp("", "idem-chaos-bin-"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(binRoot)
	os.Exit(code)
}

// binDirs are the builds of binDir by tags: a func() (string, error) from
// sync.OnceValues each.
var binDirs sync.Map

// binDir returns the directory of paymentsd, processord and idemproxy
// built from src with tags, as Config.BinDir, built by the first test that
// asks for it: every run of a set of tags shares one build.
func binDir(t *testing.T, src, tags string) string {
	t.Helper()
	f, _ := binDirs.LoadOrStore(tags, sync.OnceValues(func() (string, error) {
		dir := filepath.Join(binRoot, "tags-"+tags)
		return dir, Build(context.Background(), src, dir, tags)
	}))
	dir, err := f.(func() (string, error))()
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestRun is the run CI makes: a fixed seed, every kind of fault, and not
// one violation, the outbox's events included.
func TestRun(t *testing.T) {
	t.Parallel()
	src := setupRun(t)
	sum := runClean(t, Config{
		Duration: 60 * time.Second, Seed: 20261201, SourceDir: src,
		Faults:      Faults{DBRestartEvery: 20 * time.Second, FailoverEvery: 25 * time.Second, DiskFullEvery: 20 * time.Second},
		Replication: ReplicationSync,
	})
	if sum.Acknowledged == 0 || sum.Kills == 0 || sum.Pauses == 0 || sum.DBRestarts == 0 || sum.CommitCuts == 0 || sum.ClockSkews == 0 || sum.NetworkFaults == 0 || sum.Failovers == 0 || sum.DiskFull == 0 && os.Geteuid() == 0 {
		t.Errorf("a run that proves nothing: %d acknowledged, %d kills, %d pauses, %d PostgreSQL restarts, %d commit cuts, %d clock skews, %d network faults, %d failovers, %d full disks",
			sum.Acknowledged, sum.Kills, sum.Pauses, sum.DBRestarts, sum.CommitCuts, sum.ClockSkews, sum.NetworkFaults, sum.Failovers, sum.DiskFull)
	}
	if sum.BankTotalOK == nil || !*sum.BankTotalOK || sum.TransfersApplied == 0 || sum.InsufficientFunds == 0 || sum.Declines == 0 {
		t.Errorf("the ledger and declines prove nothing: bank_total_ok %v, %d transfers applied, %d insufficient funds, %d declines",
			sum.BankTotalOK, sum.TransfersApplied, sum.InsufficientFunds, sum.Declines)
	}
	// Violations above counts these too; they are asserted by name so that
	// a checker that stops counting them fails here.
	if sum.EventsMissing != 0 || sum.EventsUnknown != 0 || sum.EventsInvalidSignature != 0 {
		t.Errorf("events: %d missing, %d unknown, %d invalid signatures", sum.EventsMissing, sum.EventsUnknown, sum.EventsInvalidSignature)
	}
	// Held keys depend on how many forwards the upstream's faults hit, which
	// a loaded machine makes few: they are reported, not required.
	if p := sum.Proxy; sum.ProxyOperations == 0 || p.Acknowledged == 0 {
		t.Errorf("the proxy workload proves nothing: %d operations, %d acknowledged, %d held", sum.ProxyOperations, p.Acknowledged, p.Held)
	}
	if sum.EventsDelivered == 0 || sum.EventsRefused == 0 {
		t.Errorf("events that prove nothing: %d delivered, %d deliveries refused and retried", sum.EventsDelivered, sum.EventsRefused)
	}
}

// TestRunSQLite runs the same traffic against one paymentsd on its
// embedded SQLite file, killed, paused and skewed, with the same
// invariants (no server to restart, no connection to cut).
func TestRunSQLite(t *testing.T) {
	t.Parallel()
	src := setupRun(t)
	sum := runClean(t, Config{
		Duration: 30 * time.Second, Seed: 20261202, SourceDir: src, Store: StoreSQLite, Instances: 1, Clients: 8,
	})
	if sum.Acknowledged == 0 || sum.Kills == 0 || sum.BankTotalOK == nil || !*sum.BankTotalOK || sum.TransfersApplied == 0 {
		t.Errorf("a run that proves nothing: %d acknowledged, %d kills, bank_total_ok %v, %d transfers applied",
			sum.Acknowledged, sum.Kills, sum.BankTotalOK, sum.TransfersApplied)
	}
}

// TestRunMySQL runs the traffic against three paymentsd instances on a
// throwaway mariadbd, killed with SIGKILL and started again, with the
// instances killed, paused and skewed: the same invariants, no commit cuts.
func TestRunMySQL(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("a chaos run takes a minute or more")
	}
	if err := mariadb.Available(); err != nil {
		if ci, _ := strconv.ParseBool(os.Getenv("CI")); ci {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	src, err := ModuleDir(".")
	if err != nil {
		t.Fatal(err)
	}
	sum := runClean(t, Config{
		Duration: 45 * time.Second, Seed: 20261226, SourceDir: src, Store: StoreMySQL,
		Faults: Faults{DBRestartEvery: 15 * time.Second},
	})
	if sum.Acknowledged == 0 || sum.Kills == 0 || sum.DBRestarts == 0 || sum.BankTotalOK == nil || !*sum.BankTotalOK || sum.TransfersApplied == 0 {
		t.Errorf("a run that proves nothing: %d acknowledged, %d kills, %d MariaDB restarts, bank_total_ok %v, %d transfers applied",
			sum.Acknowledged, sum.Kills, sum.DBRestarts, sum.BankTotalOK, sum.TransfersApplied)
	}
	if sum.CommitCuts != 0 {
		t.Errorf("%d commit cuts on MariaDB, whose connections the proxy cannot read", sum.CommitCuts)
	}
}

// TestCheckerCatchesBrokenBuilds runs paymentsd and idemproxy built with
// the chaosbroken tag, broken one way each, and wants each break reported
// by the invariant it breaks, with the keys (or, for the bank's balances,
// the accounts) it hurt. Duplicate storms and frequent pauses make a
// lease lost to a takeover near certain within the run. skip-fencing
// commits a stale holder's phases anyway: its payment is settled and
// acknowledged outside the payment's transaction, without its event,
// while the key's new holder finds no pending payment to settle and leaves
// the key unfinished, or makes a second payment. shared-cache replays one
// client's answer to another that used the same key. The ledger's breaks
// and the proxy's are described in cmd/internal/brokenstore. The breaks
// share one build (the tag's binaries select the break by the environment
// at start-up) and run side by side, as many as -parallel lets, each on
// servers of its own.
func TestCheckerCatchesBrokenBuilds(t *testing.T) {
	t.Parallel()
	src := setupRun(t)
	bankBroken := func(s *Summary) int {
		if s.BankTotalOK != nil && !*s.BankTotalOK {
			return 1
		}
		return 0
	}
	for _, tt := range []struct {
		brk  string
		want func(*Summary) int
		// workload is the traffic; Storm when nil.
		workload Workload
		// networkEvery, when set, is how often a network fault falls, on
		// the proxies' upstream links only; pauseEvery, when set, replaces
		// the pause every second; proxies, when set, is the number of
		// idemproxy instances.
		networkEvery time.Duration
		pauseEvery   time.Duration
		proxies      int
		// strays is set for a break that no one key shows (the bank's
		// total): the violations file must say it, and the summary name
		// the accounts, with no offending key.
		strays string
		// reason, when set, is what the checker's reason for at least one
		// offending key must say: the invariant the break is for.
		reason string
	}{
		{brk: "skip-fencing", want: func(s *Summary) int { return min(s.Duplicated+s.Lost, s.EventsMissing) }},
		{brk: "release-after-commit", want: func(s *Summary) int { return s.Duplicated + s.Lost }},
		{brk: "shared-cache", want: func(s *Summary) int { return s.CrossTenant }},
		{brk: "forward-held", workload: Proxy{Policy: "hold"}, want: func(s *Summary) int { return s.Duplicated }},
		{brk: "forget-declines", workload: Decline{}, want: func(s *Summary) int { return s.Duplicated + s.Lost + s.MismatchedReplays }},
		{brk: "unkeyed-debit", workload: Transfer{}, strays: "sum to", want: bankBroken},
		{brk: "unlocked-overdraft", workload: Transfer{}, reason: "and left it at -", want: bankBroken},
		{brk: "debit-before-402", workload: Transfer{}, reason: "answered 402 insufficient-funds, but the transfer", want: func(s *Summary) int { return s.Lost }},
		// The probe route's status URL answers "completed" or "not
		// received", but not while the network between the proxy and the
		// upstream fails: one proxy, so that every retry meets its link's
		// faults, and a fault on that link every second make the unknown
		// answers that the break mistakes; no pauses, which would stop
		// the one proxy and with it the traffic.
		{brk: "probe-unknown-forwards", workload: Proxy{Policy: "probe"}, networkEvery: time.Second, pauseEvery: -1, proxies: 1, reason: "the probe route forwarded the key", want: func(s *Summary) int { return s.Duplicated }},
		{brk: "retry-new-key", workload: Proxy{Policy: "retry"}, reason: "the upstream executed the operation", want: func(s *Summary) int { return s.Duplicated }},
	} {
		t.Run(tt.brk, func(t *testing.T) {
			t.Parallel() // each run has servers of its own
			file := filepath.Join(t.TempDir(), "violations.jsonl")
			faults := Faults{PauseEvery: cmp.Or(tt.pauseEvery, time.Second), DBRestartEvery: -1}
			if tt.networkEvery > 0 {
				faults.NetworkEvery, faults.NetworkLinks = tt.networkEvery, []Link{LinkUpstream}
			}
			sum, err := Run(context.Background(), Config{
				Duration: 20 * time.Second, Seed: 7, SourceDir: src,
				BuildTags: "chaosbroken", BinDir: binDir(t, src, "chaosbroken"), Env: []string{"IDEM_CHAOS_BREAK=" + tt.brk},
				Workloads:      []Weighted{{cmp.Or[Workload](tt.workload, Storm{}), 1}},
				ProcessorDelay: 150 * time.Millisecond,
				Faults:         faults,
				Proxies:        tt.proxies,
				ViolationsFile: file,
				Progress:       testWriter{t},
			})
			if err != nil {
				t.Fatal(err)
			}
			if sum.LogDir != "" {
				t.Cleanup(func() { os.RemoveAll(sum.LogDir) })
			}
			var text strings.Builder
			sum.WriteText(&text)
			t.Log("\n" + text.String())
			if tt.want(sum) == 0 || len(sum.OffendingKeys) == 0 && tt.strays == "" {
				t.Fatalf("the checker missed %s", tt.brk)
			}
			if tt.strays != "" && len(sum.OffendingAccounts) == 0 {
				t.Errorf("the summary names no offending account")
			}
			f, err := os.Open(file)
			if err != nil {
				t.Fatalf("no history of the offending keys: %v", err)
			}
			defer f.Close()
			inFile := map[string]bool{}
			strays, because, example := 0, 0, ""
			sc := bufio.NewScanner(f)
			sc.Buffer(nil, 64<<20)
			for sc.Scan() {
				var rec struct {
					Client, Key string
					Attempts    []Attempt
					Reasons     []string
					Stray       string
				}
				if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
					t.Fatalf("violations file: %v", err)
				}
				if rec.Key != "" && len(rec.Attempts) == 0 {
					t.Errorf("%s/%s is listed without its attempts", rec.Client, rec.Key)
				}
				inFile[rec.Client+"/"+rec.Key] = true
				if tt.strays != "" && strings.Contains(rec.Stray, tt.strays) {
					strays++
				}
				if i := slices.IndexFunc(rec.Reasons, func(s string) bool { return tt.reason != "" && strings.Contains(s, tt.reason) }); i >= 0 {
					if because++; because == 1 {
						example = rec.Client + "/" + rec.Key + ": " + rec.Reasons[i]
					}
				}
			}
			if tt.strays != "" && strays == 0 {
				t.Errorf("no line of %s says %q", file, tt.strays)
			}
			if tt.reason != "" {
				if because == 0 {
					t.Errorf("no offending key of %s is reported because %q", file, tt.reason)
				}
				t.Logf("%d offending keys reported because %q; the first: %s", because, tt.reason, example)
			}
			for _, k := range sum.OffendingKeys {
				if !inFile[k] {
					t.Errorf("offending key %s is not in %s", k, file)
				}
			}
		})
	}
}

// testWriter sends progress lines to the test log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// runClean runs cfg with the test's progress and a violations file of its
// own, logs the summary, and fails with the offending keys' history on any
// violation.
func runClean(t *testing.T, cfg Config) *Summary {
	t.Helper()
	cfg.ViolationsFile = filepath.Join(t.TempDir(), "violations.jsonl")
	cfg.Progress = testWriter{t}
	cfg.BinDir = binDir(t, cfg.SourceDir, cfg.BuildTags)
	sum, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	var text strings.Builder
	sum.WriteText(&text)
	t.Log("\n" + text.String())
	if sum.Violations > 0 {
		b, _ := os.ReadFile(sum.ViolationsFile)
		t.Fatalf("%d violations; history of the offending keys:\n%.8000s", sum.Violations, b)
	}
	return sum
}
