package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemkit/idem/cmd/internal/mariadb"
	"github.com/idemkit/idem/internal/pgtest/pgcluster"
	"github.com/idemkit/idem/internal/pgtest/pgproxy"
)

// Config defaults.
const (
	DurationDefault       = 2 * time.Minute
	InstancesDefault      = 3
	ProxiesDefault        = 2
	ClientsDefault        = 16
	LockTimeoutDefault    = time.Second
	ProgressEveryDefault  = 5 * time.Second
	ProcessorDelayDefault = 50 * time.Millisecond

	// settleTimeout bounds the phase in which every unanswered operation is
	// retried to a final answer, and the verification replays, with
	// settlePerOp more for each operation of the history: a run of
	// thousands of queued commands settles each over HTTP.
	settleTimeout = 2 * time.Minute
	settlePerOp   = 50 * time.Millisecond
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

// harness is a running deployment: PostgreSQL, the proxy, processord and
// the paymentsd instances, with the history of the traffic.
type harness struct {
	cfg     Config
	dir     string
	cluster *pgcluster.Cluster // the primary
	// standby is the primary's streaming replica (Config.Replication),
	// nil while a failover makes the next one; retired are the primaries
	// that failed over, closed with the run. dbMu orders the database
	// faults (dbFault), which act on cluster.
	standby *pgcluster.Cluster
	retired []*pgcluster.Cluster
	dbMu    sync.Mutex
	// mariadb is the run's server on StoreMySQL, in place of cluster.
	mariadb   *mariadb.Server
	dbURL     string
	proxy     *pgproxy.Proxy
	processor *process
	instances []*process
	receiver  *receiver
	net       *network // the links between the processes, for network faults
	// proxies are the idemproxy instances of the proxy workload, in front
	// of upstream; none on SQLite.
	proxies  []*process
	upstream *upstream
	client   *http.Client
	history  *History
	faults   faultCounts
	keySeq   atomic.Int64
	// bank is the ledger's accounts, when the traffic has transfers.
	bank *bank
	// queue is the broker, when the traffic sends commands to one.
	queue *queue
	// start is when the traffic started; faultLog the faults applied.
	start    time.Time
	faultLog faultLog
	// stall tells a stalled run from a slow one (watchStall).
	stall stallWatch
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
	available := pgcluster.Available
	if cfg.Store == StoreMySQL {
		available = mariadb.Available
	}
	if err := available(); err != nil {
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

// run drives traffic and faults for the configured duration, settles,
// verifies and checks.
func (h *harness) run(ctx context.Context) (*Summary, error) {
	cfg := h.cfg
	events := Schedule(cfg.Seed, cfg.Duration, cfg.Faults, cfg.Instances+len(h.proxies), cfg.LockTimeout)
	if cfg.usesBank() {
		if err := h.openBank(ctx); err != nil {
			return nil, err
		}
	}
	start := time.Now()
	h.start = start
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

	// A fault that fails, or traffic that stalls, ends the run at once
	// with its error.
	faultErr, stallErr := make(chan error, 1), make(chan error, 1)
	go func() {
		err := h.inject(traffic, start, events)
		if err != nil {
			stopTraffic()
		}
		faultErr <- err
	}()
	go func() {
		err := h.watchStall(traffic, start)
		if err != nil {
			stopTraffic()
		}
		stallErr <- err
	}()
	if h.queue != nil && !cfg.NoFaults {
		var brokerFaults sync.WaitGroup
		brokerFaults.Go(func() { h.killBroker(traffic, max(cfg.Duration/5, 5*time.Second)) })
		brokerFaults.Go(func() { h.faultBrokerLinks(traffic) })
		defer brokerFaults.Wait()
	}
	if h.bank != nil {
		stopSampler := make(chan struct{})
		samplerDone := make(chan struct{})
		go func() {
			defer close(samplerDone)
			h.sampleBank(ctx, stopSampler)
		}()
		defer func() {
			close(stopSampler)
			<-samplerDone
		}()
	}

	var wg sync.WaitGroup
	if cfg.QueueCommands > 0 {
		// Every command is published, even past the traffic's end.
		wg.Go(func() { h.publishCommands(ctx, start) })
	}
	for i := range cfg.Clients {
		if !weighs(cfg.Workloads) {
			break
		}
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
	if err := <-stallErr; err != nil {
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
	// Every queued command is consumed before the settling, which would
	// send the unanswered ones over HTTP and hide a lost message.
	if h.queue != nil {
		fmt.Fprintf(cfg.Progress, "chaos: %s: waiting for the queue to drain\n", since(start))
		if err := h.drainQueue(ctx); err != nil {
			return nil, err
		}
	}
	// Leases of holders that died expire; then every operation without a
	// final answer is retried until it has one.
	wait := cfg.LockTimeout + cfg.LockTimeout/2
	if len(h.proxies) > 0 {
		wait = max(wait, proxySettleWait)
	}
	sleepCtx(ctx, wait)
	settle, cancel := context.WithTimeout(ctx, settleTimeout+time.Duration(len(h.history.Ops()))*settlePerOp)
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
	if cfg.ReportFile != "" {
		if err := h.writeReportFile(cfg.ReportFile, sum, report); err != nil {
			return nil, err
		}
		sum.ReportFile = cfg.ReportFile
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
		for i := range h.targets(op) {
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
// an event for every acknowledged payment, or until no event is left to
// come: the outbox holds none pending, so that a missing event was never
// written (a build that settles a payment without its event).
func (h *harness) waitEvents(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, eventsTimeout)
	defer cancel()
	db, err := h.openDB(ctx)
	if err != nil {
		db = nil // waits for every event, or the timeout
	} else {
		defer db.Close()
	}
	for ctx.Err() == nil {
		// The outbox is read before the receiver: an event delivered by
		// then is in the receiver's stats, as a relay marks an event
		// delivered only once the receiver accepted it.
		none := false
		if db != nil {
			var pending int
			err := db.QueryRowContext(ctx, "SELECT count(*) FROM idem_outbox WHERE status = 'pending'").Scan(&pending)
			none = err == nil && pending == 0
		}
		got := h.receiver.stats().ByPayment
		missing := 0
		for id := range h.history.ackedObjects() {
			if len(got[id]) == 0 {
				missing++
			}
		}
		if missing == 0 || none {
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
		fmt.Fprintf(h.cfg.Progress, "chaos: %s ops=%d attempts=%d acked=%d events=%d kills=%d pauses=%d db_restarts=%d commit_cuts=%d network=%d violations=%d\n",
			since(start), len(ops), h.history.attempts.Load(), acked, h.receiver.stats().Delivered,
			h.faults.kills.Load(), h.faults.pauses.Load(), h.faults.dbRestarts.Load(), h.cuts(), h.faults.network.Load(), h.history.suspect.Load())
	}
}

// weighs reports whether some workload has a positive weight.
func weighs(ws []Weighted) bool {
	for _, w := range ws {
		if w.Weight > 0 {
			return true
		}
	}
	return false
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

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

func since(start time.Time) string { return time.Since(start).Round(time.Second).String() }

// cuts is the number of connections cut around a COMMIT: none on SQLite.
func (h *harness) cuts() int {
	if h.proxy == nil {
		return 0
	}
	return h.proxy.Cuts()
}
