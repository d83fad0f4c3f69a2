package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// Packages are the groups by which Instructions counts a request's
// instructions, by the Go package of the function that ran them (its own
// cost, not what it called).
var Packages = []string{
	PkgIdem, PkgIdempg, PkgPgx, PkgIdemmysql, PkgMySQL, PkgHTTP, PkgRuntime, PkgApp, PkgStd, PkgOther,
}

// The groups of Packages.
const (
	// PkgIdem is the module's own packages but the stores and the
	// commands: the middleware, idemstore, idemfingerprint and
	// internal/...
	PkgIdem = "idem"
	// PkgIdempg is the PostgreSQL store.
	PkgIdempg = "idempg"
	// PkgPgx is its driver: github.com/jackc/...
	PkgPgx = "pgx"
	// PkgIdemmysql is the MySQL and MariaDB store.
	PkgIdemmysql = "idemmysql"
	// PkgMySQL is its driver, github.com/go-sql-driver/mysql
	// (database/sql, which it runs under, is in PkgStd).
	PkgMySQL = "mysql"
	// PkgHTTP is net/http and net/textproto, both server and the
	// benchmark's client.
	PkgHTTP = "net/http"
	// PkgRuntime is the Go runtime: scheduler, allocator, collector.
	PkgRuntime = "runtime"
	// PkgApp is the payments endpoint (with its bearer tokens) and the
	// benchmark's own code.
	PkgApp = "app"
	// PkgStd is the rest of the standard library (crypto, encoding, net,
	// sync, syscall, time...).
	PkgStd = "std"
	// PkgOther is code without a Go package: the C library, the dynamic
	// loader, the vDSO.
	PkgOther = "other"
)

// InstrConfig configures Instructions.
type InstrConfig struct {
	// DatabaseURL is the scratch PostgreSQL or MySQL database, as for
	// Run. Required.
	DatabaseURL string
	// Variants to count. Defaults to atomic, two-phase, replay and
	// floor-2rt-read.
	Variants []string
	// Requests is the count of the shorter of the two runs of each variant;
	// the longer sends twice as many. Defaults to 300.
	Requests int
	// Command runs the driving process: Command and the arguments given
	// to it must run `idem bench --drive` (see Instructions). Required.
	Command []string
	// Valgrind is the valgrind binary. Defaults to "valgrind" on the PATH.
	Valgrind string
	// Dir keeps the callgrind files. Defaults to a temporary directory,
	// removed after the run.
	Dir string
	// Progress receives a line per callgrind run. Defaults to io.Discard.
	Progress io.Writer
}

// InstrResult is a variant's instructions per request.
type InstrResult struct {
	Variant string
	// PerRequest is the process's instructions per request.
	PerRequest float64
	// ByPackage splits PerRequest by the groups of Packages.
	ByPackage map[string]float64
}

// Instructions counts the instructions that each variant's requests cost
// this process, under valgrind --tool=callgrind: for each variant it runs
// the endpoint twice, one request at a time (`idem bench --drive`), with
// Requests and with twice as many requests, and divides the difference by
// Requests, so that start-up, migrations, statement preparation and
// warm-up cancel out. Counts are of the whole process: the middleware,
// the store, the driver, the endpoint, and the HTTP client that sends the
// requests over loopback, the same for every variant. The database
// server's work is not counted.
func Instructions(ctx context.Context, cfg InstrConfig) ([]InstrResult, error) {
	if cfg.DatabaseURL == "" || len(cfg.Command) == 0 {
		return nil, errors.New("bench: instructions: a database URL and a command are required")
	}
	if len(cfg.Variants) == 0 {
		cfg.Variants = []string{Atomic, TwoPhase, Replay, Floor2RTRead}
	}
	if cfg.Requests <= 0 {
		cfg.Requests = 300
	}
	if cfg.Valgrind == "" {
		cfg.Valgrind = "valgrind"
	}
	if cfg.Progress == nil {
		cfg.Progress = io.Discard
	}
	if cfg.Dir == "" {
		dir, err := os.MkdirTemp("", "idem-callgrind-")
		if err != nil {
			return nil, fmt.Errorf("bench: instructions: %w", err)
		}
		defer os.RemoveAll(dir)
		cfg.Dir = dir
	} else if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("bench: instructions: %w", err)
	}
	var out []InstrResult
	for _, v := range cfg.Variants {
		var runs [2]map[string]uint64
		for i, n := range []int{cfg.Requests, 2 * cfg.Requests} {
			file := filepath.Join(cfg.Dir, fmt.Sprintf("callgrind.%s.%d", v, n))
			args := slices.Concat([]string{"--tool=callgrind", "--callgrind-out-file=" + file},
				cfg.Command, []string{"--db", cfg.DatabaseURL, "--drive", "--variants", v, "--requests", strconv.Itoa(n)})
			cmd := exec.CommandContext(ctx, cfg.Valgrind, args...)
			// One thread at a time, and no preemption signals: the same
			// work from run to run. The runtime reads the clock with
			// RDTSCP where the processor has it (in lock2's spin, among
			// others), which valgrind 3.19 does not decode: it raises
			// SIGILL in the process. cpu.rdtscp=off makes it use RDTSC.
			cmd.Env = append(os.Environ(), "GOMAXPROCS=1", "GODEBUG=asyncpreemptoff=1,cpu.rdtscp=off")
			if said, err := cmd.CombinedOutput(); err != nil {
				return nil, fmt.Errorf("bench: instructions: %s with %d requests: %w: %s", v, n, err, tail(said))
			}
			counts, err := readCallgrind(file)
			if err != nil {
				return nil, err
			}
			runs[i] = counts
			fmt.Fprintf(cfg.Progress, "%s: %d requests, %d instructions\n", v, n, sum(counts))
		}
		r := InstrResult{Variant: v, ByPackage: map[string]float64{}}
		for _, pkg := range Packages {
			d := float64(int64(runs[1][pkg])-int64(runs[0][pkg])) / float64(cfg.Requests)
			r.ByPackage[pkg] = d
			r.PerRequest += d
		}
		out = append(out, r)
	}
	return out, nil
}

// tail is the end of a process's output, for an error.
func tail(b []byte) string {
	const most = 2000
	if len(b) > most {
		b = b[len(b)-most:]
	}
	return strings.TrimSpace(string(b))
}

func sum(m map[string]uint64) uint64 {
	var n uint64
	for _, v := range m {
		n += v
	}
	return n
}

// readCallgrind sums the self cost (event Ir, the first) of every function
// in a callgrind output file by the groups of Packages.
func readCallgrind(path string) (map[string]uint64, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("bench: instructions: %w", err)
	}
	defer f.Close()
	counts, err := parseCallgrind(f)
	if err != nil {
		return nil, fmt.Errorf("bench: instructions: %s: %w", path, err)
	}
	return counts, nil
}

// parseCallgrind is readCallgrind on r. A cost line belongs to the last
// fn= line's function, except the one after a calls= line, which is the
// inclusive cost of that call. Function names are compressed: "(id) name"
// defines id, "(id)" refers to it, in one table for fn= and cfn=.
func parseCallgrind(r io.Reader) (map[string]uint64, error) {
	names := map[string]string{}
	name := func(spec string) string {
		spec = strings.TrimSpace(spec)
		if !strings.HasPrefix(spec, "(") {
			return spec
		}
		id, rest, ok := strings.Cut(spec, ")")
		if !ok {
			return spec
		}
		if rest = strings.TrimSpace(rest); rest != "" {
			names[id] = rest
			return rest
		}
		return names[id]
	}
	counts := map[string]uint64{}
	group := ""
	skipNext := false
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
		case strings.HasPrefix(line, "fn="):
			group = packageGroup(name(line[3:]))
		case strings.HasPrefix(line, "cfn="):
			name(line[4:])
		case strings.HasPrefix(line, "calls="):
			skipNext = true
		case line[0] >= '0' && line[0] <= '9', line[0] == '+', line[0] == '-', line[0] == '*':
			if skipNext {
				skipNext = false
				continue
			}
			fields := strings.Fields(line)
			if len(fields) < 2 {
				continue
			}
			n, err := strconv.ParseUint(fields[1], 10, 64)
			if err != nil {
				return nil, fmt.Errorf("cost line %q: %w", line, err)
			}
			counts[group] += n
		}
	}
	return counts, sc.Err()
}

// packageGroup returns the group of Packages of the function sym, as Go
// names its symbols ("net/http.(*conn).serve", "runtime.mallocgc").
func packageGroup(sym string) string {
	pkg := goPackage(sym)
	switch {
	case pkg == "":
		return PkgOther
	case pkg == "github.com/idemkit/idem/idempg":
		return PkgIdempg
	case pkg == "github.com/idemkit/idem/idemmysql":
		return PkgIdemmysql
	case strings.HasPrefix(pkg, "github.com/go-sql-driver/"):
		return PkgMySQL
	case strings.HasPrefix(pkg, "github.com/idemkit/idem/cmd/"), pkg == "github.com/idemkit/idem/internal/bearer":
		return PkgApp
	case pkg == "github.com/idemkit/idem" || strings.HasPrefix(pkg, "github.com/idemkit/idem/"):
		return PkgIdem
	case strings.HasPrefix(pkg, "github.com/jackc/"):
		return PkgPgx
	case pkg == "net/http" || strings.HasPrefix(pkg, "net/http/") || pkg == "net/textproto":
		return PkgHTTP
	case pkg == "runtime" || strings.HasPrefix(pkg, "runtime/") || strings.HasPrefix(pkg, "internal/runtime/"):
		return PkgRuntime
	case pkg == "main":
		return PkgApp
	case !strings.Contains(pkg, "."):
		return PkgStd
	}
	return PkgOther
}

// goPackage returns the import path of the Go symbol sym, "" when sym is
// not one: the part before the first dot after the last slash.
func goPackage(sym string) string {
	if strings.HasPrefix(sym, "0x") || strings.ContainsAny(sym, " ") && !strings.Contains(sym, ".") {
		return ""
	}
	head := sym
	if i := strings.IndexAny(head, "[("); i >= 0 {
		head = head[:i] // generic instantiations and methods hold dots and slashes
	}
	slash := strings.LastIndex(head, "/")
	dot := strings.Index(head[slash+1:], ".")
	if dot < 0 {
		return ""
	}
	return head[:slash+1+dot]
}

// WriteInstructions writes results as a table of instructions per request,
// by package group, in thousands. A group that no result has (the other
// database's store and driver) is left out.
func WriteInstructions(w io.Writer, results []InstrResult) {
	var names []string
	for _, r := range results {
		names = append(names, r.Variant)
	}
	var groups []string
	for _, p := range Packages {
		if slices.ContainsFunc(results, func(r InstrResult) bool { return r.ByPackage[p] != 0 }) {
			groups = append(groups, p)
		}
	}
	width := nameWidth(names)
	fmt.Fprintf(w, "%-*s %9s", width, "kinstr/req", "total")
	for _, p := range groups {
		fmt.Fprintf(w, " %9s", p)
	}
	fmt.Fprintln(w)
	for _, r := range results {
		fmt.Fprintf(w, "%-*s %9.1f", width, r.Variant, r.PerRequest/1000)
		for _, p := range groups {
			fmt.Fprintf(w, " %9.1f", r.ByPackage[p]/1000)
		}
		fmt.Fprintln(w)
	}
}
