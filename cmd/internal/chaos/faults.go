package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemkit/idem/internal/pgtest/pgproxy"
)

// FaultKind is a kind of fault the harness injects.
type FaultKind int

const (
	// Kill sends SIGKILL to a paymentsd instance, which is restarted.
	Kill FaultKind = iota
	// Pause stops an instance with SIGSTOP for longer than the lease, then
	// continues it with SIGCONT: a stale holder that wakes up.
	Pause
	// DBRestart stops PostgreSQL as pg_ctl stop -m immediate does, then
	// starts it again (crash recovery).
	DBRestart
	// CommitCut cuts the connection between instance 0 and PostgreSQL
	// right after a COMMIT went out (the service cannot know whether it
	// committed) or, one time in four, just before.
	CommitCut
	// ClockSkew sets an instance's clock ahead by more than the lease for
	// a while (paymentsd built with the chaosclock tag reads its offset
	// from a file): the instance takes over leases that are live on the
	// others' clocks, and the fences must keep every write single.
	ClockSkew
	// Network puts a toxic on one link of one instance for a while: answers
	// delayed past the timeouts, connections reset mid-stream, or a peer
	// that accepts and never answers (see Link and Toxic).
	Network
	// Failover stops the PostgreSQL primary as pg_ctl stop -m immediate
	// does, promotes its standby, moves every connection to it, and makes
	// the next standby from it (Config.Replication).
	Failover
	// DiskFull fills the file system of PostgreSQL's WAL (a tmpfs) for a
	// while: writes fail, the server may stop with a PANIC, and once the
	// space is back it runs again (restarted if it stopped).
	DiskFull
	faultKinds
)

func (k FaultKind) String() string {
	return [...]string{"kill", "pause", "db-restart", "commit-cut", "clock-skew", "network", "failover", "disk-full"}[k]
}

// Faults sets how often each fault falls: the mean time between two
// faults of a kind; the gaps are drawn from the seed. 0 means the default,
// a negative value disables the kind.
type Faults struct {
	KillEvery      time.Duration // Defaults to 5s.
	PauseEvery     time.Duration // Defaults to 12s.
	DBRestartEvery time.Duration // Defaults to 60s.
	CutEvery       time.Duration // Defaults to 6s.
	SkewEvery      time.Duration // Defaults to 15s.
	NetworkEvery   time.Duration // Defaults to 4s.
	// FailoverEvery applies with Config.Replication only. Defaults to 40s.
	FailoverEvery time.Duration
	// DiskFullEvery applies on PostgreSQL, when the harness runs as root
	// (it mounts a tmpfs for each server's WAL). Defaults to 45s.
	DiskFullEvery time.Duration
	// DBDown is the longest PostgreSQL stays down; each outage lasts
	// between a third of it and all of it. Defaults to 3s.
	DBDown time.Duration
	// NetworkLinks are the links network faults fall on, each as likely.
	// Defaults to every link.
	NetworkLinks []Link
}

// ProcessorFaults are the rates, 0 to 1, at which processord fails a
// charge before making it (503), makes it and loses the answer (the
// connection closes), or makes it and answers only after the caller gave
// up. A negative rate turns that fault off; 0 means the default.
type ProcessorFaults struct {
	FailRate    float64 `json:"fail_rate"`    // Defaults to 0.02.
	LoseRate    float64 `json:"lose_rate"`    // Defaults to 0.02.
	TimeoutRate float64 `json:"timeout_rate"` // Defaults to 0.01.
}

// Fault defaults.
const (
	KillEveryDefault      = 5 * time.Second
	PauseEveryDefault     = 12 * time.Second
	DBRestartEveryDefault = 60 * time.Second
	CutEveryDefault       = 6 * time.Second
	SkewEveryDefault      = 15 * time.Second
	NetworkEveryDefault   = 4 * time.Second
	FailoverEveryDefault  = 40 * time.Second
	DiskFullEveryDefault  = 45 * time.Second
	DBDownDefault         = 3 * time.Second

	ProcessorFailRateDefault    = 0.02
	ProcessorLoseRateDefault    = 0.02
	ProcessorTimeoutRateDefault = 0.01
)

func (f Faults) every(k FaultKind) time.Duration {
	return [...]time.Duration{f.KillEvery, f.PauseEvery, f.DBRestartEvery, f.CutEvery, f.SkewEvery, f.NetworkEvery, f.FailoverEvery, f.DiskFullEvery}[k]
}

// Event is one scheduled fault.
type Event struct {
	At       time.Duration // since the start of traffic
	Kind     FaultKind
	Instance int           // for Kill, Pause, ClockSkew and Network
	Hold     time.Duration // how long a pause, an outage, a skew or a toxic lasts
	Skew     time.Duration // for ClockSkew: how far ahead the clock runs
	After    bool          // for CommitCut: after the COMMIT (else before)
	Link     Link          // for Network: which link
	Toxic    Toxic         // for Network: what it does to it
}

// Schedule returns the faults of a run of length d, drawn from seed: the
// same seed and settings give the same schedule.
func Schedule(seed uint64, d time.Duration, f Faults, instances int, lease time.Duration) []Event {
	var events []Event
	for k := range faultKinds {
		every := f.every(k)
		if every <= 0 {
			continue // disabled
		}
		rnd := rand.New(rand.NewPCG(seed, uint64(k)+1))
		at := time.Duration(0)
		for {
			// Uniform gaps in [every/2, 3·every/2): faults come at a steady
			// pace, never in a burst that a short run might lack.
			at += every/2 + time.Duration(rnd.Int64N(int64(every)))
			if at >= d {
				break
			}
			e := Event{At: at, Kind: k, Instance: rnd.IntN(instances)}
			switch k {
			case Pause:
				// Always past the lease. Half the pauses end before the
				// client's attempt times out: the client still waits while
				// its duplicates take the key over elsewhere, and the holder
				// wakes up to finish a request it no longer owns. The other
				// half outlast the attempt: the client gives up, retries
				// elsewhere and takes the key over itself.
				if rnd.IntN(2) == 0 {
					e.Hold = lease + lease/2 + time.Duration(rnd.Int64N(int64(attemptTimeout-2*lease)))
				} else {
					e.Hold = attemptTimeout + lease + time.Duration(rnd.Int64N(int64(lease)+1))
				}
			case DiskFull:
				e.Hold = 2*time.Second + time.Duration(rnd.Int64N(int64(2*time.Second)+1))
			case DBRestart:
				e.Hold = f.DBDown/3 + time.Duration(rnd.Int64N(int64(f.DBDown-f.DBDown/3)+1))
			case CommitCut:
				e.After = rnd.IntN(4) != 0
			case ClockSkew:
				// Ahead by two to four leases, for two to four seconds.
				e.Skew = 2*lease + time.Duration(rnd.Int64N(int64(2*lease)+1))
				e.Hold = 2*time.Second + time.Duration(rnd.Int64N(int64(2*time.Second)+1))
			case Network:
				e.Link, e.Toxic = Link(rnd.IntN(int(links))), Toxic(rnd.IntN(int(toxics)))
				if n := len(f.NetworkLinks); n > 0 {
					e.Link = f.NetworkLinks[int(e.Link)%n]
				}
				if e.Toxic == ToxicReset {
					// Resets are short: every connection that carries data
					// meanwhile dies.
					e.Hold = 200*time.Millisecond + time.Duration(rnd.Int64N(int64(800*time.Millisecond)+1))
				} else {
					e.Hold = time.Second + time.Duration(rnd.Int64N(int64(2*time.Second)+1))
				}
			}
			events = append(events, e)
		}
	}
	sort.SliceStable(events, func(i, j int) bool { return events[i].At < events[j].At })
	return events
}

// faultCounts are the faults injected so far.
type faultCounts struct {
	kills, pauses, dbRestarts, clockSkews, network, failovers, diskFull atomic.Int64
}

// inject runs the schedule from start until ctx is done, one goroutine per
// kind so that faults overlap, and returns when every fault it began has
// been undone: paused instances continued, PostgreSQL started again. The
// first fault that fails stops the others: its error is returned as soon
// as they are undone, not at the end of the schedule.
func (h *harness) inject(ctx context.Context, start time.Time, events []Event) error {
	byKind := make([][]Event, faultKinds)
	for _, e := range events {
		byKind[e.Kind] = append(byKind[e.Kind], e)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make(chan error, faultKinds)
	for k := range faultKinds {
		go func() {
			err := h.injectKind(ctx, start, byKind[k])
			if err != nil {
				cancel()
			}
			errs <- err
		}()
	}
	var first error
	for range faultKinds {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}

// injectKind applies the events of one kind in order. Pauses of different
// instances overlap; the other kinds fall one after the other.
func (h *harness) injectKind(ctx context.Context, start time.Time, events []Event) error {
	var pauses sync.WaitGroup
	defer pauses.Wait()
	for _, e := range events {
		t := time.NewTimer(time.Until(start.Add(e.At)))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
		if e.Kind == Pause {
			pauses.Add(1)
			go func() {
				defer pauses.Done()
				h.apply(e)
			}()
			continue
		}
		if err := h.apply(e); err != nil {
			return err
		}
	}
	return nil
}

// apply injects one fault and, for pauses and outages, undoes it after its
// hold time, whatever ctx says: a run never ends with a stopped process.
func (h *harness) apply(e Event) error {
	mark := faultMark{At: time.Since(h.start), Kind: e.Kind, Instance: e.Instance}
	switch e.Kind {
	case Kill:
		if h.target(e.Instance).kill() {
			h.faults.kills.Add(1)
			h.faultLog.add(mark)
		}
	case Pause:
		resume, ok := h.target(e.Instance).pause()
		if !ok {
			return nil
		}
		h.faults.pauses.Add(1)
		mark.Hold = e.Hold
		h.faultLog.add(mark)
		time.Sleep(e.Hold)
		resume()
	case Failover:
		return h.dbFault(e.Kind, func() error { return h.failover(mark) })
	case DiskFull:
		return h.dbFault(e.Kind, func() error { return h.fillDisk(mark, e.Hold) })
	case DBRestart:
		return h.dbFault(e.Kind, func() error { return h.restartDB(mark, e.Hold) })
	case ClockSkew:
		p := h.instances[e.Instance%len(h.instances)]
		if err := writeSkew(p.clockFile, e.Skew); err != nil {
			return err
		}
		h.faults.clockSkews.Add(1)
		mark.Hold = e.Hold
		h.faultLog.add(mark)
		time.Sleep(e.Hold)
		return writeSkew(p.clockFile, 0)
	case Network:
		l, i := e.Link, e.Instance%len(h.instances)
		if l == LinkUpstream && len(h.proxies) > 0 {
			i = e.Instance % len(h.proxies)
		}
		if !h.net.has(l, i) {
			l, i = LinkProcessor, e.Instance%len(h.instances) // SQLite: no database link, no proxies
		}
		h.faults.network.Add(1)
		mark.Hold = e.Hold
		mark.Link, mark.Toxic = l, e.Toxic
		h.faultLog.add(mark)
		mark.Instance = i
		return h.net.inject(l, i, e.Toxic, e.Hold)
	case CommitCut:
		if h.proxy.Armed() == 0 {
			when := pgproxy.Before
			if e.After {
				when = pgproxy.After
			}
			h.proxy.CutNext(pgproxy.IsCommit, when)
			h.faultLog.add(mark)
		}
	}
	return nil
}

// target is the process that a kill or a pause of instance i hits: the
// paymentsd instances first, then the idemproxy instances.
func (h *harness) target(i int) *process {
	if i < len(h.instances) {
		return h.instances[i]
	}
	return h.proxies[i-len(h.instances)]
}

// writeSkew sets the clock offset that a paymentsd built with the
// chaosclock tag reads from path (cmd/paymentsd/chaosclock.go): a number
// of nanoseconds.
func writeSkew(path string, d time.Duration) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(strconv.FormatInt(int64(d), 10)), 0o644); err != nil {
		return fmt.Errorf("chaos: skew a clock: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("chaos: skew a clock: %w", err)
	}
	return nil
}
