package chaos

import (
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Summary is the outcome of a run; its JSON form is what idem chaos --json
// prints.
type Summary struct {
	Seed uint64 `json:"seed"`
	// Store is the database of paymentsd (Config.Store).
	Store     string  `json:"store"`
	Seconds   float64 `json:"seconds"` // traffic, settling and checking
	Instances int     `json:"instances"`
	Clients   int     `json:"clients"`

	Operations   int `json:"operations"`
	Attempts     int `json:"attempts"`
	Acknowledged int `json:"acknowledged"`

	Lost              int `json:"lost"`
	Duplicated        int `json:"duplicated"`
	MismatchedReplays int `json:"mismatched_replays"`
	CrossTenant       int `json:"cross_tenant"`
	StuckKeys         int `json:"stuck_keys"`
	Unexpected5xx     int `json:"unexpected_5xx"`
	Unanswered        int `json:"unanswered"`
	ReuseAccepted     int `json:"reuse_accepted"`
	UnknownPayments   int `json:"unknown_payments"`
	// Events are what the webhook receiver saw of the outbox:
	// EventsDelivered distinct event ids accepted; EventsMissing
	// acknowledged payments without one, EventsUnknown accepted events
	// about a payment the database does not hold, and
	// EventsInvalidSignature deliveries rejected (a signature that does
	// not verify, or a signed body that is not a payment event): each a
	// violation. EventsDuplicateIDs counts ids accepted more than once,
	// which at-least-once delivery allows, and EventsRefused the
	// deliveries the receiver answered 500 on its schedule.
	EventsDelivered        int `json:"events_delivered"`
	EventsMissing          int `json:"events_missing"`
	EventsUnknown          int `json:"events_unknown"`
	EventsInvalidSignature int `json:"events_invalid_signature"`
	EventsDuplicateIDs     int `json:"events_duplicate_ids"`
	EventsRefused          int `json:"events_refused"`
	// BankTotalOK is whether the ledger's balances summed to the opening
	// total at the end and at every sample taken while the traffic ran,
	// each account's balance matched its stored transfers and none was
	// negative; null when the run had no transfers. Transfers counts the
	// transfer operations, TransfersApplied those acknowledged and found
	// once, InsufficientFunds those answered 402 (which must move nothing),
	// and BankSamples the sums read during the run.
	BankTotalOK *bool `json:"bank_total_ok"`
	// BankSumOK is the part of BankTotalOK about the sum alone: whether
	// the balances summed to the opening total at every sample and at the
	// end; null when the run had no transfers.
	BankSumOK         *bool `json:"bank_sum_ok"`
	Transfers         int   `json:"transfers"`
	TransfersApplied  int   `json:"transfers_applied"`
	InsufficientFunds int   `json:"insufficient_funds"`
	// InsufficientFundsMoved counts the transfers answered 402 that have
	// a stored transfer all the same: each a violation (counted lost).
	InsufficientFundsMoved int `json:"insufficient_funds_moved"`
	BankSamples            int `json:"bank_samples"`
	// The queue, when the run sends commands to a broker: Queue is the
	// broker (Config.Queue); QueuedPublished counts the commands
	// published to it (copies included), QueuedResent the copies that
	// reach the consumers (on JetStream, published after its duplicate
	// window); BrokerKills the SIGKILLs of the broker; BrokerLinkFaults
	// the toxics put on an instance's link to it (also counted in
	// NetworkFaults); QueuedLost the queued commands whose key was not
	// completed in the database once the queue had drained, each a
	// violation.
	Queue            string `json:"queue,omitempty"`
	QueuedPublished  int    `json:"queued_published,omitempty"`
	QueuedResent     int    `json:"queued_resent,omitempty"`
	BrokerKills      int    `json:"broker_kills,omitempty"`
	BrokerLinkFaults int    `json:"broker_link_faults,omitempty"`
	QueuedLost       int    `json:"queued_lost,omitempty"`
	// Declines counts the payment operations of an amount that processord
	// declines; each must end as one declined payment, no charge and a
	// 402 payment-declined replayed byte for byte.
	Declines int `json:"declines"`
	// ProxyOperations counts the proxy workload's operations; Proxy has
	// its figures (acknowledged, held, the upstream's executions, the retry
	// route's repeated forwards).
	ProxyOperations int         `json:"proxy_operations"`
	Proxy           proxyCounts `json:"proxy"`

	Kills      int `json:"kills"`
	Pauses     int `json:"pauses"`
	DBRestarts int `json:"db_restarts"`
	CommitCuts int `json:"commit_cuts"`
	// ClockSkews counts the periods an instance's clock ran ahead of the
	// others by more than the lease.
	ClockSkews int `json:"clock_skews"`
	// NetworkFaults counts the toxics put on a link between two processes
	// (an instance and PostgreSQL, processord or the webhook receiver).
	NetworkFaults int `json:"network_faults"`
	// Replication is the run's Config.Replication ("" for none), and
	// Failovers counts the primaries stopped and replaced by their standby.
	Replication string `json:"replication,omitempty"`
	Failovers   int    `json:"failovers"`
	// DiskFull counts the periods PostgreSQL's WAL had no space left.
	DiskFull int `json:"disk_full"`
	// ProcessorFaults are the rates at which processord failed charges,
	// lost answers and answered late; it does not count them.
	ProcessorFaults ProcessorFaults `json:"processor_faults"`

	// Workloads counts operations per workload; Answers counts attempts
	// per answer: a status with its problem code, or "no answer".
	Workloads map[string]int `json:"workloads"`
	Answers   map[string]int `json:"answers"`

	Violations    int      `json:"violations"`
	OffendingKeys []string `json:"offending_keys,omitempty"`
	// OffendingAccounts are the ledger's accounts whose balance breaks an
	// invariant (negative, not what its stored transfers make, missing),
	// tenant/id and why: a break of the bank's total that no key's
	// record shows, such as a debit outside the key's transaction, is
	// named here.
	OffendingAccounts []string `json:"offending_accounts,omitempty"`
	ViolationsFile    string   `json:"violations_file,omitempty"`
	ReportFile        string   `json:"report_file,omitempty"`
	LogDir            string   `json:"log_dir,omitempty"`
}

// maxListedKeys bounds the offending keys a summary lists; the
// violations file has them all.
const maxListedKeys = 20

func (h *harness) summary(r *Report, took time.Duration) *Summary {
	s := &Summary{
		Seed: h.cfg.Seed, Store: h.cfg.Store, Seconds: took.Round(time.Second).Seconds(), Instances: h.cfg.Instances, Clients: h.cfg.Clients,
		Lost: r.counts[vLost], Duplicated: r.counts[vDuplicated], MismatchedReplays: r.counts[vMismatch],
		CrossTenant: r.counts[vCross], StuckKeys: r.counts[vStuck], Unexpected5xx: r.counts[v5xx],
		Unanswered: r.counts[vUnanswered], ReuseAccepted: r.counts[vReuse], UnknownPayments: r.counts[vUnknown],
		EventsDelivered: r.events.Delivered, EventsMissing: r.counts[vEventMissing], EventsUnknown: r.counts[vEventUnknown],
		EventsInvalidSignature: r.counts[vEventInvalid], EventsDuplicateIDs: r.events.Duplicate, EventsRefused: r.events.Refused,
		Kills: int(h.faults.kills.Load()), Pauses: int(h.faults.pauses.Load()),
		DBRestarts: int(h.faults.dbRestarts.Load()), CommitCuts: h.cuts(), ClockSkews: int(h.faults.clockSkews.Load()), NetworkFaults: int(h.faults.network.Load()), Replication: h.cfg.Replication, Failovers: int(h.faults.failovers.Load()), DiskFull: int(h.faults.diskFull.Load()), ProcessorFaults: h.cfg.ProcessorFaults,
		Workloads: map[string]int{}, Answers: map[string]int{},
		Violations:      r.violations(),
		ProxyOperations: r.proxy.Operations, Proxy: r.proxy,
	}
	for _, op := range h.history.Ops() {
		if op.Kind == "" && op.ReuseOf == 0 && declined(op.Amount) {
			s.Declines++
		}
		s.Operations++
		s.Workloads[op.Workload]++
		attempts, final := op.snapshot()
		s.Attempts += len(attempts)
		if final != nil && final.ok() && op.ReuseOf == 0 {
			s.Acknowledged++
		}
		for _, a := range attempts {
			s.Answers[answerLabel(a)]++
		}
	}
	if b := r.bank; b != nil {
		ok, sumOK := b.TotalOK, b.SumOK
		s.BankTotalOK, s.BankSumOK = &ok, &sumOK
		s.Transfers, s.TransfersApplied, s.InsufficientFunds, s.BankSamples = b.Transfers, b.Applied, b.InsufficientFunds, b.Samples
		s.InsufficientFundsMoved = b.MovedOn402
		s.OffendingAccounts = b.Accounts
		if len(s.OffendingAccounts) > maxListedKeys {
			s.OffendingAccounts = s.OffendingAccounts[:maxListedKeys]
		}
	}
	if q := h.queue; q != nil {
		s.Queue = h.cfg.Queue
		s.QueuedPublished, s.QueuedResent, s.BrokerKills, s.QueuedLost = int(q.published.Load()), int(q.resent.Load()), int(q.kills.Load()), q.lost
		s.BrokerLinkFaults = int(q.linkFaults.Load())
		s.Violations += q.lost
	}
	s.OffendingKeys = r.offending()
	if len(s.OffendingKeys) > maxListedKeys {
		s.OffendingKeys = s.OffendingKeys[:maxListedKeys]
	}
	return s
}

func answerLabel(a *Attempt) string {
	switch {
	case a.Status == 0:
		return "no answer"
	case a.Problem != "":
		return strconv.Itoa(a.Status) + " " + a.Problem
	case a.Replayed:
		return strconv.Itoa(a.Status) + " replayed"
	}
	return strconv.Itoa(a.Status)
}

// storeName names the database of a store for people.
func storeName(store string) string {
	switch store {
	case StoreMySQL:
		return "MariaDB"
	case StoreSQLite:
		return "SQLite"
	}
	return "PostgreSQL"
}

// WriteText writes the summary for people.
func (s *Summary) WriteText(w io.Writer) {
	verdict := "PASS: no violation"
	if s.Violations > 0 {
		verdict = fmt.Sprintf("FAIL: %d violations", s.Violations)
		if s.Replication == ReplicationAsync && s.Failovers > 0 {
			verdict += " under asynchronous replication: the acknowledged writes a failover loses are the documented limit (docs/reliability.md), not a pass"
		}
	}
	fmt.Fprintf(w, "idem chaos: seed %d, %d instances, %d clients, %s: %s\n",
		s.Seed, s.Instances, s.Clients, time.Duration(s.Seconds*float64(time.Second)), verdict)
	fmt.Fprintf(w, "  traffic:    %d operations (%s), %d attempts, %d acknowledged, %d declined payments\n",
		s.Operations, counts(s.Workloads), s.Attempts, s.Acknowledged, s.Declines)
	fmt.Fprintf(w, "  faults:     %d kills, %d pauses, %d %s restarts, %d commit cuts, %d clock skews, %d network faults, %d failovers, %d full disks\n",
		s.Kills, s.Pauses, s.DBRestarts, storeName(s.Store), s.CommitCuts, s.ClockSkews, s.NetworkFaults, s.Failovers, s.DiskFull)
	pf := s.ProcessorFaults
	fmt.Fprintf(w, "              processord fails %g%%, loses the answer to %g%% and answers %g%% late, of charges\n",
		100*pf.FailRate, 100*pf.LoseRate, 100*pf.TimeoutRate)
	fmt.Fprintf(w, "  answers:    %s\n", counts(s.Answers))
	fmt.Fprintf(w, "  violations: %d lost, %d duplicated, %d mismatched replays, %d cross-tenant, %d stuck keys, %d unexpected 5xx, %d unanswered, %d reuse accepted, %d unknown payments\n",
		s.Lost, s.Duplicated, s.MismatchedReplays, s.CrossTenant, s.StuckKeys, s.Unexpected5xx, s.Unanswered, s.ReuseAccepted, s.UnknownPayments)
	fmt.Fprintf(w, "  events:     %d delivered (%d ids more than once, %d deliveries refused with 500 and retried); %d missing, %d unknown, %d invalid signatures\n",
		s.EventsDelivered, s.EventsDuplicateIDs, s.EventsRefused, s.EventsMissing, s.EventsUnknown, s.EventsInvalidSignature)
	switch {
	case s.BankTotalOK == nil:
		fmt.Fprintln(w, "  bank:       not checked (no transfers in the traffic)")
	default:
		verdict := "constant"
		if s.BankSumOK != nil && !*s.BankSumOK {
			verdict = "NOT constant"
		}
		moved := "moved nothing"
		if s.InsufficientFundsMoved > 0 {
			moved = fmt.Sprintf("%d of them moved money", s.InsufficientFundsMoved)
		}
		fmt.Fprintf(w, "  bank:       %d transfers, %d applied once, %d insufficient funds (%s); total %s over %d samples and at the end",
			s.Transfers, s.TransfersApplied, s.InsufficientFunds, moved, verdict, s.BankSamples)
		if !*s.BankTotalOK && len(s.OffendingAccounts) > 0 {
			fmt.Fprintf(w, "; %d accounts wrong", len(s.OffendingAccounts))
		}
		fmt.Fprintln(w)
	}
	if s.QueuedPublished > 0 {
		broker, resent := "JetStream", "re-sent past its duplicate window"
		if s.Queue == QueueRabbitMQ {
			broker, resent = "RabbitMQ with confirms", "published twice"
		}
		fmt.Fprintf(w, "  queue:      %d commands published to %s (%d %s), broker killed %d times, %d faults on the consumers' links to it; %d lost\n",
			s.QueuedPublished, broker, s.QueuedResent, resent, s.BrokerKills, s.BrokerLinkFaults, s.QueuedLost)
	}
	if s.ProxyOperations > 0 {
		p := s.Proxy
		fmt.Fprintf(w, "  proxy:      %d operations through idemproxy: %d acknowledged, %d held (outcome unknown on the hold route); the upstream executed %d, and the retry route forwarded %d keys again (its upstream honours keys)\n",
			s.ProxyOperations, p.Acknowledged, p.Held, p.Executions, p.RetryForwards)
	}
	if len(s.OffendingKeys) > 0 {
		fmt.Fprintf(w, "  offending keys: %s\n", strings.Join(s.OffendingKeys, " "))
	}
	if len(s.OffendingAccounts) > 0 {
		fmt.Fprintf(w, "  offending accounts: %s\n", strings.Join(s.OffendingAccounts, "; "))
	}
	if s.ViolationsFile != "" {
		fmt.Fprintf(w, "  history of the offending keys: %s\n", s.ViolationsFile)
	}
	if s.ReportFile != "" {
		fmt.Fprintf(w, "  report: %s\n", s.ReportFile)
	}
	if s.LogDir != "" {
		fmt.Fprintf(w, "  process logs: %s\n", s.LogDir)
	}
}

// counts formats a map of counts, largest first.
func counts(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if m[keys[i]] != m[keys[j]] {
			return m[keys[i]] > m[keys[j]]
		}
		return keys[i] < keys[j]
	})
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, m[k])
	}
	return strings.Join(parts, ", ")
}
