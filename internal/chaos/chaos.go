package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem/idemoutbox"
	"github.com/idemkit/idem/internal/pgcluster"
	"github.com/idemkit/idem/internal/pgproxy"
)

// Config configures a run. The zero value is a valid configuration.
type Config struct {
	// Duration is how long traffic and faults last; settling and checking
	// come after. Defaults to DurationDefault.
	Duration time.Duration
	// Instances is the number of paymentsd processes. Defaults to
	// InstancesDefault.
	Instances int
	// Clients is the number of concurrent clients. Defaults to
	// ClientsDefault.
	Clients int
	// Seed draws the fault schedule and the traffic. 0 is a seed like any
	// other.
	Seed uint64
	// Faults sets how often each fault falls. Defaults to the Xxx
	// defaults of Faults.
	Faults Faults
	// ProcessorFaults sets how often processord fails, loses answers and
	// answers late. Defaults to the ProcessorXxxDefault rates.
	ProcessorFaults ProcessorFaults
	// NoFaults turns every fault off, for a baseline. Defaults to false.
	NoFaults bool
	// LockTimeout is paymentsd's lease; pauses last longer. Defaults to
	// LockTimeoutDefault.
	LockTimeout time.Duration
	// ProcessorDelay is processord's latency per charge: it keeps requests
	// in flight between claim and commit, where kills and pauses catch
	// them. processord charges one at a time, so a long delay overloads it
	// and paymentsd answers 502. Defaults to ProcessorDelayDefault.
	ProcessorDelay time.Duration
	// Workloads is the traffic mix. Defaults to DefaultWorkloads().
	Workloads []Weighted
	// SourceDir is the module whose cmd/paymentsd and cmd/processord are
	// built. Defaults to the module of the working directory.
	SourceDir string
	// BuildTags are passed to go build -tags for paymentsd. Defaults to
	// none.
	BuildTags string
	// Env is added to paymentsd's environment. Defaults to none.
	Env []string
	// ViolationsFile receives the history of every offending operation,
	// one JSON object a line, when the checker finds a violation. Defaults
	// to chaos-violations-SEED.jsonl in the working directory.
	ViolationsFile string
	// LogDir, when set, receives the processes' logs and is kept.
	// Defaults to a temporary directory, removed after a run without
	// violations.
	LogDir string
	// Progress receives a line every ProgressEvery. Defaults to
	// io.Discard.
	Progress io.Writer
	// ProgressEvery defaults to ProgressEveryDefault.
	ProgressEvery time.Duration
}

// Config defaults.
const (
	DurationDefault       = 2 * time.Minute
	InstancesDefault      = 3
	ClientsDefault        = 16
	LockTimeoutDefault    = time.Second
	ProgressEveryDefault  = 5 * time.Second
	ProcessorDelayDefault = 50 * time.Millisecond

	// settleTimeout bounds the phase in which every unanswered operation is
	// retried to a final answer, and the verification replays.
	settleTimeout = 2 * time.Minute
	readyTimeout  = time.Minute
	// settleAttempts bounds the attempts of one operation while settling.
	settleAttempts = 120
	// verifyAttempts bounds the attempts of one verification replay.
	verifyAttempts = 10
	// eventsTimeout bounds the wait, after the replays, for the event of
	// every acknowledged payment to reach the receiver. An event is due at
	// its commit; a relay polls every relayPoll, a batch held by a killed
	// instance is due again when its connection's transaction ends, and an
	// event the receiver refused is retried after webhookRetry, then twice
	// that. A few seconds suffice; the bound is generous for a loaded
	// machine. An event still missing then is a violation.
	eventsTimeout = 30*time.Second + 4*relayPoll + 3*(1<<receiverMaxFailures)*webhookRetry
	// eventsPoll is how often the wait looks at the receiver.
	eventsPoll = 200 * time.Millisecond
)

func (c Config) withDefaults() Config {
	if c.Duration == 0 {
		c.Duration = DurationDefault
	}
	if c.Instances == 0 {
		c.Instances = InstancesDefault
	}
	if c.Clients == 0 {
		c.Clients = ClientsDefault
	}
	if c.LockTimeout == 0 {
		c.LockTimeout = LockTimeoutDefault
	}
	if c.ProcessorDelay == 0 {
		c.ProcessorDelay = ProcessorDelayDefault
	}
	if c.Workloads == nil {
		c.Workloads = DefaultWorkloads()
	}
	if c.Progress == nil {
		c.Progress = io.Discard
	}
	if c.ProgressEvery == 0 {
		c.ProgressEvery = ProgressEveryDefault
	}
	f := &c.Faults
	if c.NoFaults {
		*f = Faults{KillEvery: -1, PauseEvery: -1, DBRestartEvery: -1, CutEvery: -1}
	} else {
		if f.KillEvery == 0 {
			f.KillEvery = KillEveryDefault
		}
		if f.PauseEvery == 0 {
			f.PauseEvery = PauseEveryDefault
		}
		if f.DBRestartEvery == 0 {
			f.DBRestartEvery = DBRestartEveryDefault
		}
		if f.CutEvery == 0 {
			f.CutEvery = CutEveryDefault
		}
	}
	pf := &c.ProcessorFaults
	for _, r := range []struct {
		rate *float64
		def  float64
	}{{&pf.FailRate, ProcessorFailRateDefault}, {&pf.LoseRate, ProcessorLoseRateDefault}, {&pf.TimeoutRate, ProcessorTimeoutRateDefault}} {
		switch {
		case c.NoFaults || *r.rate < 0:
			*r.rate = 0
		case *r.rate == 0:
			*r.rate = r.def
		}
	}
	if f.DBDown == 0 {
		f.DBDown = DBDownDefault
	}
	if c.ViolationsFile == "" {
		c.ViolationsFile = fmt.Sprintf("chaos-violations-%d.jsonl", c.Seed)
	}
	return c
}

func (c Config) validate() error {
	switch {
	case c.Duration < 0:
		return errors.New("chaos: Duration must not be negative")
	case c.Instances < 1 || c.Instances > 32:
		return errors.New("chaos: Instances must be 1 to 32")
	case c.Clients < 1 || c.Clients > 256:
		return errors.New("chaos: Clients must be 1 to 256")
	case c.LockTimeout < 100*time.Millisecond || c.LockTimeout > attemptTimeout/3:
		return fmt.Errorf("chaos: LockTimeout must be 100ms to %s, a third of a client's attempt timeout", attemptTimeout/3)
	}
	if pf := c.ProcessorFaults; pf.FailRate > 1 || pf.LoseRate > 1 || pf.TimeoutRate > 1 || pf.FailRate+pf.LoseRate+pf.TimeoutRate > 1 {
		return errors.New("chaos: the processor fault rates must add up to at most 1")
	}
	total := 0
	for _, w := range c.Workloads {
		if w.Weight < 0 {
			return errors.New("chaos: a workload weight is negative")
		}
		total += w.Weight
	}
	if total == 0 {
		return errors.New("chaos: no workload has a positive weight")
	}
	return nil
}

// harness is a running deployment: PostgreSQL, the proxy, processord and
// the paymentsd instances, with the history of the traffic.
type harness struct {
	cfg       Config
	dir       string
	cluster   *pgcluster.Cluster
	dbURL     string
	proxy     *pgproxy.Proxy
	processor *process
	instances []*process
	receiver  *receiver
	client    *http.Client
	history   *History
	faults    faultCounts
	keySeq    atomic.Int64
}

// Run builds paymentsd and processord, starts a throwaway PostgreSQL
// cluster, processord and cfg.Instances paymentsd processes on 127.0.0.1,
// drives the traffic while injecting the faults of the schedule, lets every
// key settle, checks the history against the database, and stops every
// process it started, on every path. The error is for a run that could not
// be made; violations are in the summary.
func Run(ctx context.Context, cfg Config) (*Summary, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if err := pgcluster.Available(); err != nil {
		return nil, fmt.Errorf("chaos: %w", err)
	}
	dir, keepDir := cfg.LogDir, cfg.LogDir != ""
	if keepDir {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("chaos: %w", err)
		}
	} else {
		var err error
		if dir, err = os.MkdirTemp("", "idem-chaos-"); err != nil {
			return nil, fmt.Errorf("chaos: %w", err)
		}
	}
	defer func() {
		if !keepDir {
			os.RemoveAll(dir)
		}
	}()
	h := &harness{cfg: cfg, dir: dir, history: newHistory()}
	defer h.close()
	if err := h.deploy(ctx); err != nil {
		keepDir = true
		return nil, fmt.Errorf("%w (logs in %s)", err, dir)
	}
	sum, err := h.run(ctx)
	if err != nil {
		keepDir = true
		return nil, fmt.Errorf("%w (logs in %s)", err, dir)
	}
	if sum.Violations > 0 {
		keepDir = true
		sum.LogDir = dir
	}
	return sum, nil
}

// deploy builds the binaries and starts every process.
func (h *harness) deploy(ctx context.Context) error {
	fmt.Fprintf(h.cfg.Progress, "chaos: seed %d: building paymentsd and processord\n", h.cfg.Seed)
	bin := filepath.Join(h.dir, "bin")
	paymentsd, err := build(ctx, h.cfg.SourceDir, bin, "paymentsd", h.cfg.BuildTags)
	if err != nil {
		return err
	}
	processord, err := build(ctx, h.cfg.SourceDir, bin, "processord", "")
	if err != nil {
		return err
	}
	fmt.Fprintf(h.cfg.Progress, "chaos: starting PostgreSQL, processord and %d paymentsd instances\n", h.cfg.Instances)
	if h.cluster, err = pgcluster.New(ctx); err != nil {
		return fmt.Errorf("chaos: %w", err)
	}
	if h.dbURL, err = h.cluster.CreateDatabase(ctx, "chaos"); err != nil {
		return fmt.Errorf("chaos: %w", err)
	}
	proxy, proxiedURL, err := pgproxy.StartFor(h.dbURL)
	if err != nil {
		return fmt.Errorf("chaos: %w", err)
	}
	h.proxy = proxy
	h.client = &http.Client{Transport: &http.Transport{
		MaxIdleConnsPerHost: h.cfg.Clients * 4,
		DialContext:         (&net.Dialer{Timeout: time.Second}).DialContext,
	}}

	addrs, err := freeAddrs(h.cfg.Instances + 1)
	if err != nil {
		return err
	}
	h.processor = &process{
		name: "processord", path: processord, addr: addrs[0],
		args:    processordArgs(addrs[0], filepath.Join(h.dir, "processord.db"), h.cfg.ProcessorDelay, h.cfg.ProcessorFaults, h.cfg.Seed),
		logPath: filepath.Join(h.dir, "processord.log"),
	}
	h.processor.supervise()
	secret := idemoutbox.NewSecret()
	if h.receiver, err = startReceiver(secret, h.cfg.Seed); err != nil {
		return err
	}
	for i := range h.cfg.Instances {
		db := h.dbURL
		if i == 0 {
			db = proxiedURL // commit cuts fall between instance 0 and PostgreSQL
		}
		p := &process{
			name: fmt.Sprintf("paymentsd-%d", i), path: paymentsd, addr: addrs[i+1],
			args:    paymentsdArgs(addrs[i+1], db, "http://"+addrs[0], h.cfg.LockTimeout, h.receiver.url, secret),
			env:     h.cfg.Env,
			logPath: filepath.Join(h.dir, fmt.Sprintf("paymentsd-%d.log", i)),
		}
		h.instances = append(h.instances, p)
		p.supervise()
	}
	return h.waitReady(ctx)
}

// waitReady waits until processord and every instance answer /healthz.
func (h *harness) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	for _, p := range append([]*process{h.processor}, h.instances...) {
		if err := p.waitReady(ctx, h.client); err != nil {
			return fmt.Errorf("chaos: %w", err)
		}
	}
	return nil
}

// close stops every process the harness started and removes the cluster.
func (h *harness) close() {
	var wg sync.WaitGroup
	for _, p := range h.instances {
		wg.Add(1)
		go func() { defer wg.Done(); p.stop() }()
	}
	wg.Wait()
	if h.processor != nil {
		h.processor.stop()
	}
	if h.receiver != nil {
		h.receiver.close()
	}
	if h.proxy != nil {
		h.proxy.Close()
	}
	if h.cluster != nil {
		h.cluster.Close()
	}
	if h.client != nil {
		h.client.CloseIdleConnections()
	}
}

// run drives traffic and faults for the configured duration, settles,
// verifies and checks.
func (h *harness) run(ctx context.Context) (*Summary, error) {
	cfg := h.cfg
	events := Schedule(cfg.Seed, cfg.Duration, cfg.Faults, cfg.Instances, cfg.LockTimeout)
	start := time.Now()
	traffic, stopTraffic := context.WithDeadline(ctx, start.Add(cfg.Duration))
	defer stopTraffic()

	progressDone := make(chan struct{})
	stopProgress := make(chan struct{})
	go func() {
		defer close(progressDone)
		h.progress(start, stopProgress)
	}()
	defer func() {
		close(stopProgress)
		<-progressDone
	}()

	faultErr := make(chan error, 1)
	go func() { faultErr <- h.inject(traffic, start, events) }()

	var wg sync.WaitGroup
	for i := range cfg.Clients {
		w := &Worker{ID: i, Tenant: tenants[i%len(tenants)], Rand: rand.New(rand.NewPCG(cfg.Seed, uint64(1000+i))), h: h}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for traffic.Err() == nil {
				pick(cfg.Workloads, w.Rand).Run(traffic, w)
			}
		}()
	}
	wg.Wait()
	if err := <-faultErr; err != nil {
		return nil, err
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	fmt.Fprintf(cfg.Progress, "chaos: %s: faults stopped; settling\n", since(start))

	// Every instance must be up before settling; one that was just killed
	// is being restarted.
	if err := h.waitReady(ctx); err != nil {
		return nil, err
	}
	// Leases of holders that died expire; then every operation without a
	// final answer is retried until it has one.
	sleepCtx(ctx, cfg.LockTimeout+cfg.LockTimeout/2)
	settle, cancel := context.WithTimeout(ctx, settleTimeout)
	defer cancel()
	h.settle(settle)
	h.verify(settle)
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	fmt.Fprintf(cfg.Progress, "chaos: %s: waiting for the events of the acknowledged payments\n", since(start))
	h.waitEvents(ctx)
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	fmt.Fprintf(cfg.Progress, "chaos: %s: checking the history against the database\n", since(start))
	report, err := h.check(ctx)
	if err != nil {
		return nil, err
	}
	sum := h.summary(report, time.Since(start))
	if report.violations() > 0 {
		if err := report.write(cfg.ViolationsFile); err != nil {
			return nil, err
		}
		sum.ViolationsFile = cfg.ViolationsFile
	}
	return sum, nil
}

// settle retries, to a final answer, every operation that has none.
func (h *harness) settle(ctx context.Context) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, h.cfg.Clients)
	for i, op := range h.history.Ops() {
		if _, final := op.snapshot(); final != nil {
			continue
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			h.driveN(ctx, op, "settle", rand.New(rand.NewPCG(h.cfg.Seed, uint64(i))), settleAttempts)
		}()
	}
	wg.Wait()
}

// verify sends every acknowledged payment once more to each instance: each
// answer must replay the first, byte for byte.
func (h *harness) verify(ctx context.Context) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, h.cfg.Clients)
	for _, op := range h.history.Ops() {
		if _, final := op.snapshot(); final == nil || !final.ok() || op.ReuseOf != 0 {
			continue
		}
		for i := range h.instances {
			sem <- struct{}{}
			wg.Add(1)
			go func() {
				defer func() { <-sem; wg.Done() }()
				for n := 0; n < verifyAttempts && ctx.Err() == nil; n++ {
					a := h.send(ctx, op, i, "verify")
					if a == nil || a.final() {
						return
					}
					sleepCtx(ctx, idemclientBackoff(n))
				}
			}()
		}
	}
	wg.Wait()
}

// waitEvents waits, at most eventsTimeout, until the receiver has accepted
// an event for every acknowledged payment.
func (h *harness) waitEvents(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, eventsTimeout)
	defer cancel()
	for ctx.Err() == nil {
		got := h.receiver.stats().ByPayment
		missing := 0
		for id := range h.history.ackedPayments() {
			if len(got[id]) == 0 {
				missing++
			}
		}
		if missing == 0 {
			return
		}
		sleepCtx(ctx, eventsPoll)
	}
}

// progress writes a line every ProgressEvery until stop is closed.
func (h *harness) progress(start time.Time, stop <-chan struct{}) {
	t := time.NewTicker(h.cfg.ProgressEvery)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		acked := 0
		ops := h.history.Ops()
		for _, op := range ops {
			if _, f := op.snapshot(); f != nil && f.ok() {
				acked++
			}
		}
		fmt.Fprintf(h.cfg.Progress, "chaos: %s ops=%d attempts=%d acked=%d events=%d kills=%d pauses=%d db_restarts=%d commit_cuts=%d violations=%d\n",
			since(start), len(ops), h.history.attempts.Load(), acked, h.receiver.stats().Delivered,
			h.faults.kills.Load(), h.faults.pauses.Load(), h.faults.dbRestarts.Load(), h.proxy.Cuts(), h.history.suspect.Load())
	}
}

// pick draws a workload by weight.
func pick(ws []Weighted, rnd *rand.Rand) Workload {
	total := 0
	for _, w := range ws {
		total += w.Weight
	}
	n := rnd.IntN(total)
	for _, w := range ws {
		if n < w.Weight {
			return w.Workload
		}
		n -= w.Weight
	}
	panic("unreachable")
}

// build compiles ./cmd/name of the module at src into dir.
func build(ctx context.Context, src, dir, name, tags string) (string, error) {
	out := filepath.Join(dir, name)
	args := []string{"build", "-o", out}
	if tags != "" {
		args = append(args, "-tags", tags)
	}
	args = append(args, "./cmd/"+name)
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = src
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("chaos: go build ./cmd/%s: %v\n%s", name, err, b)
	}
	return out, nil
}

// ModuleDir returns the root of the module that holds dir: where
// cmd/paymentsd is built from.
func ModuleDir(dir string) (string, error) {
	cmd := exec.Command("go", "env", "GOMOD")
	cmd.Dir = dir
	b, err := cmd.Output()
	mod := strings.TrimSpace(string(b))
	if err != nil || mod == "" || mod == os.DevNull {
		return "", fmt.Errorf("chaos: %s is not inside a Go module; run from a checkout of idem", dir)
	}
	root := filepath.Dir(mod)
	if _, err := os.Stat(filepath.Join(root, "cmd", "paymentsd")); err != nil {
		return "", fmt.Errorf("chaos: %s has no cmd/paymentsd; run from a checkout of idem", root)
	}
	return root, nil
}

// freeAddrs returns n loopback addresses whose ports were free a moment
// ago. The listeners are all open at once, so the ports differ.
func freeAddrs(n int) ([]string, error) {
	var addrs []string
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("chaos: pick a free port: %w", err)
		}
		defer l.Close()
		addrs = append(addrs, l.Addr().String())
	}
	return addrs, nil
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

func since(start time.Time) string { return time.Since(start).Round(time.Second).String() }

// openDB opens a small pool on the run's database, bypassing the proxy.
func (h *harness) openDB(ctx context.Context) (*pgxpool.Pool, error) {
	pool, err := pgxpool.New(ctx, h.dbURL)
	if err != nil {
		return nil, fmt.Errorf("chaos: open the database: %w", err)
	}
	return pool, nil
}
