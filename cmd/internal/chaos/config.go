package chaos

import (
	"errors"
	"fmt"
	"io"
	"time"
)

// The databases a run can deploy paymentsd on.
const (
	StorePostgres = "postgres"
	StoreSQLite   = "sqlite"
	StoreMySQL    = "mysql"
)

// The replications a run can give PostgreSQL (Config.Replication).
const (
	ReplicationSync  = "sync"
	ReplicationAsync = "async"
)

// Config configures a run. The zero value is a valid configuration.
type Config struct {
	// Duration is how long traffic and faults last; settling and checking
	// come after. Defaults to DurationDefault.
	Duration time.Duration
	// Store is the database of paymentsd: StorePostgres (a throwaway
	// cluster shared by every instance), StoreMySQL (a throwaway mariadbd
	// shared by every instance, killed with SIGKILL and started again;
	// no commit cuts, which need PostgreSQL's protocol, nor full disks,
	// failovers or proxy workload) or StoreSQLite
	// (one instance on its embedded file; no database restarts nor commit
	// cuts then). Defaults to StorePostgres.
	Store string
	// Replication, on PostgreSQL, gives the primary a streaming standby:
	// ReplicationSync (every commit waits until the standby flushed it) or
	// ReplicationAsync; failovers then stop the primary, promote the
	// standby and move every connection to it. With asynchronous
	// replication, the acknowledged writes the standby had not received
	// are lost at a failover: the run counts them. Defaults to none: one
	// server, no failovers.
	Replication string
	// Instances is the number of paymentsd processes. Defaults to
	// InstancesDefault.
	Instances int
	// Proxies is the number of idemproxy processes of the proxy workload,
	// in front of an upstream of the harness, on the run's PostgreSQL; -1
	// (or the SQLite store) runs none. Defaults to ProxiesDefault.
	Proxies int
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
	// and paymentsd answers 503 operation-unfinished. Defaults to
	// ProcessorDelayDefault.
	ProcessorDelay time.Duration
	// Workloads is the traffic mix. Defaults to DefaultWorkloads().
	Workloads []Weighted
	// Queue is the broker that the queued transfers go to: QueueNATS (a
	// throwaway nats-server with JetStream on a file store, killed with
	// SIGKILL and restarted during the traffic) or QueueRabbitMQ (a
	// throwaway RabbitMQ node, never the shared server). Every instance
	// consumes it with -transfers-from through a link of its own, whose
	// connections the broker link faults cut. PostgreSQL only. Defaults
	// to QueueNATS.
	Queue string
	// QueueCommands, when positive, publishes this many transfer commands
	// to the broker besides the Workloads, spread evenly over Duration,
	// every tenth a second time a moment later; the publishers wait for
	// the broker's confirm of each. The Workloads may then all weigh 0.
	// Defaults to 0: none.
	QueueCommands int
	// SourceDir is the module whose cmd/paymentsd and cmd/processord are
	// built. Defaults to the module of the working directory.
	SourceDir string
	// BuildTags are passed to go build -tags for paymentsd and idemproxy.
	// Defaults to none.
	BuildTags string
	// BinDir, when set, holds paymentsd, processord and idemproxy built
	// by Build with BuildTags, and the run builds nothing: runs one after
	// the other share one build. Defaults to building them for the run.
	BinDir string
	// Env is added to paymentsd's environment. Defaults to none.
	Env []string
	// ViolationsFile receives the history of every offending operation,
	// one JSON object a line, when the checker finds a violation. Defaults
	// to chaos-violations-SEED.jsonl in the working directory.
	ViolationsFile string
	// ReportFile, when set, receives a self-contained HTML page of the run:
	// attempts per second by answer with the faults marked, latency
	// percentiles over time, the invariants and each violation's history.
	ReportFile string
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
	if c.Store == "" {
		c.Store = StorePostgres
	}
	if c.Queue == "" {
		c.Queue = QueueNATS
	}
	if c.Proxies == 0 {
		c.Proxies = ProxiesDefault
	}
	if c.Proxies < 0 || c.Store != StorePostgres {
		c.Proxies = 0
	}
	if c.Store == StoreSQLite {
		// No server to restart, no connection to cut.
		c.Faults.DBRestartEvery, c.Faults.CutEvery = -1, -1
	}
	if c.Store == StoreMySQL {
		c.Faults.CutEvery = -1 // the commit cuts' proxy speaks PostgreSQL's protocol
	}
	f := &c.Faults
	if c.NoFaults {
		*f = Faults{KillEvery: -1, PauseEvery: -1, DBRestartEvery: -1, CutEvery: -1, SkewEvery: -1, NetworkEvery: -1, FailoverEvery: -1, DiskFullEvery: -1}
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
		if f.SkewEvery == 0 {
			f.SkewEvery = SkewEveryDefault
		}
		if f.NetworkEvery == 0 {
			f.NetworkEvery = NetworkEveryDefault
		}
		if f.FailoverEvery == 0 {
			f.FailoverEvery = FailoverEveryDefault
		}
		if f.DiskFullEvery == 0 {
			f.DiskFullEvery = DiskFullEveryDefault
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
	if c.Replication == "" {
		f.FailoverEvery = -1 // no standby to fail over to
	}
	if c.Store != StorePostgres {
		f.DiskFullEvery = -1
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
	case c.Store != StorePostgres && c.Store != StoreSQLite && c.Store != StoreMySQL:
		return fmt.Errorf("chaos: Store %q: want %q, %q or %q", c.Store, StorePostgres, StoreMySQL, StoreSQLite)
	case c.Replication != "" && c.Replication != ReplicationSync && c.Replication != ReplicationAsync:
		return fmt.Errorf("chaos: Replication %q: want %q, %q or none", c.Replication, ReplicationSync, ReplicationAsync)
	case c.Replication != "" && c.Store != StorePostgres:
		return errors.New("chaos: Replication needs the PostgreSQL store")
	case c.Store == StoreSQLite && c.Instances != 1:
		return errors.New("chaos: the SQLite store runs one instance: its file belongs to one process")
	case c.Clients < 1 || c.Clients > 256:
		return errors.New("chaos: Clients must be 1 to 256")
	case c.Queue != QueueNATS && c.Queue != QueueRabbitMQ:
		return fmt.Errorf("chaos: Queue %q: want %q or %q", c.Queue, QueueNATS, QueueRabbitMQ)
	case c.QueueCommands < 0:
		return errors.New("chaos: QueueCommands must not be negative")
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
	if total == 0 && c.QueueCommands == 0 {
		return errors.New("chaos: no workload has a positive weight")
	}
	return nil
}
