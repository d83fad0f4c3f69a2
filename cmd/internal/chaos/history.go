package chaos

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"sync"
	"sync/atomic"
	"time"
)

// Op is one logical operation: a client, a key and a body, sent once or
// many times (duplicates, retries, verification replays) until a final
// answer.
type Op struct {
	ID       int    `json:"op"`
	Workload string `json:"workload"`
	Client   string `json:"client"`
	Key      string `json:"key"`
	Body     string `json:"body"`
	BodySHA  string `json:"body_sha256"`
	Customer string `json:"customer,omitempty"`
	Amount   int64  `json:"amount"`
	// Kind is "" for a payment, kindAccount or kindTransfer for the
	// ledger's operations; From and To are a transfer's accounts.
	Kind string `json:"kind,omitempty"`
	From string `json:"from,omitempty"`
	To   string `json:"to,omitempty"`
	// Policy is the outcome-unknown policy of a proxy operation's route
	// (Kind kindProxy): retry, hold or probe.
	Policy string `json:"policy,omitempty"`
	// ReuseOf is the operation whose key this one reuses with a changed
	// body; it must be answered 422 and change nothing.
	ReuseOf int `json:"reuse_of,omitempty"`
	// Queued is a transfer sent to the broker (QueuedTransfer).
	Queued bool `json:"queued,omitempty"`

	token string

	mu       sync.Mutex
	attempts []*Attempt
	final    *Attempt // the first final answer
}

// Attempt is one HTTP request of an operation and what came back.
type Attempt struct {
	Op       int       `json:"op"`
	Instance int       `json:"instance"`
	Phase    string    `json:"phase"` // traffic, settle or verify
	Sent     time.Time `json:"sent"`
	Answered time.Time `json:"answered"`
	Status   int       `json:"status"` // 0: no answer
	Error    string    `json:"error,omitempty"`
	Problem  string    `json:"problem,omitempty"` // the problem code of an error answer
	Replayed bool      `json:"replayed,omitempty"`
	// AnswerSHA is the SHA-256 of the answer's body; Answer the body itself.
	AnswerSHA string `json:"answer_sha256,omitempty"`
	Answer    string `json:"answer,omitempty"`
	// Held is set on a proxy operation's answer outcome-unknown on a hold
	// route: the key is held until an operator resolves it, and every
	// retry gets the same answer, so it is final.
	Held bool `json:"held,omitempty"`
}

// final reports whether an attempt ends its operation: a 2xx, or a 4xx
// other than 409 and 429, which is the same on every attempt.
func (a *Attempt) final() bool {
	s := a.Status
	return (s >= 200 && s < 300) || (s >= 400 && s < 500 && s != 409 && s != 429) || a.Held
}

func (a *Attempt) ok() bool { return a.Status >= 200 && a.Status < 300 }

// record adds a to the operation's history.
func (o *Op) record(a *Attempt) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.attempts = append(o.attempts, a)
	if o.final == nil && a.final() {
		o.final = a
	}
}

// snapshot returns the attempts so far and the final answer.
func (o *Op) snapshot() ([]*Attempt, *Attempt) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]*Attempt(nil), o.attempts...), o.final
}

// History holds every operation of a run.
type History struct {
	mu  sync.Mutex
	ops []*Op
	// acked holds the acknowledged payment operations per client, for the
	// reuse workload.
	acked map[string][]*Op

	attempts   atomic.Int64
	answered2x atomic.Int64
	suspect    atomic.Int64 // violations seen while running
}

func newHistory() *History { return &History{acked: map[string][]*Op{}} }

// newOp registers a payment operation.
func (h *History) newOp(workload string, t tenant, key string, amount int64, customer string) *Op {
	return h.add(&Op{Workload: workload, Client: t.name, Key: key, Customer: customer, Amount: amount, token: t.token}, paymentBody(amount, customer))
}

// add registers o, whose request body is body.
func (h *History) add(o *Op, body []byte) *Op {
	sum := sha256.Sum256(body)
	o.Body, o.BodySHA = string(body), hex.EncodeToString(sum[:])
	h.mu.Lock()
	defer h.mu.Unlock()
	o.ID = len(h.ops) + 1
	h.ops = append(h.ops, o)
	return o
}

// path is where o is sent.
func (o *Op) path() string {
	switch o.Kind {
	case kindAccount:
		return accountsPath
	case kindTransfer:
		return transfersPath
	case kindProxy:
		return proxyPath(o.Policy)
	}
	return paymentsPath
}

// ack records that o, a payment, was acknowledged.
func (h *History) ack(o *Op) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.acked[o.Client] = append(h.acked[o.Client], o)
}

// ackedOf returns the acknowledged payment operations of client.
func (h *History) ackedOf(client string) []*Op {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.acked[client]
}

// Ops returns every operation.
func (h *History) Ops() []*Op {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]*Op(nil), h.ops...)
}

// opRecord is an operation with its attempts, as written to the
// violations file.
type opRecord struct {
	*Op
	Reasons  []string   `json:"reasons"`
	Attempts []*Attempt `json:"attempts"`
	Database any        `json:"database,omitempty"`
}

func (o *Op) marshal(reasons []string, db any) ([]byte, error) {
	attempts, _ := o.snapshot()
	return json.Marshal(opRecord{Op: o, Reasons: reasons, Attempts: attempts, Database: db})
}

func digest(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// ackedObjects returns the acknowledged payments and transfers by id, the
// objects whose events the webhook receiver must get: for each payment or
// transfer operation with a 2xx, the object of its first 2xx.
func (h *History) ackedObjects() map[string]*Op {
	m := map[string]*Op{}
	for _, op := range h.Ops() {
		if op.ReuseOf != 0 || op.Kind == kindAccount || op.Kind == kindProxy {
			continue // no events: an account's opening, or the proxy's upstream
		}
		attempts, _ := op.snapshot()
		for _, a := range attempts {
			if !a.ok() {
				continue
			}
			switch op.Kind {
			case kindTransfer:
				if t, err := parseTransfer([]byte(a.Answer)); err == nil {
					m[t.ID] = op
				}
			default:
				if p, err := parsePayment([]byte(a.Answer)); err == nil {
					m[p.ID] = op
				}
			}
			break
		}
	}
	return m
}
