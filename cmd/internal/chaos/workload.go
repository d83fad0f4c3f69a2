package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/cmd/internal/proxy"
	"github.com/idemkit/idem/idemclient"
)

// A Workload is one kind of traffic. Run performs one round of it as the
// client of w (one operation, or a few at once) and returns when each has a
// final answer or ctx is done. Workloads register their operations in the
// history, which the checker audits afterwards; a new workload (transfers,
// webhooks) is one more type and one more line in [DefaultWorkloads].
type Workload interface {
	Name() string
	Run(ctx context.Context, w *Worker)
}

// Weighted is a workload with its share of the rounds.
type Weighted struct {
	Workload Workload
	Weight   int
}

// DefaultWorkloads is the traffic mix of a run: duplicate storms across
// instances, plain retries, reuse of a remembered key with a changed
// body, and the ledger's transfers between accounts opened before the
// traffic. Every payment charges through processord.
func DefaultWorkloads() []Weighted {
	return []Weighted{
		{Storm{}, 4},
		{Retry{}, 4},
		{Reuse{}, 2},
		{Transfer{}, 3},
		{Proxy{}, 3},
	}
}

// Worker is one client of the harness: a tenant, a random source drawn
// from the seed, and the deployment.
type Worker struct {
	ID     int
	Tenant tenant
	Rand   *rand.Rand
	h      *harness
}

// newPayment registers a new payment operation of t with a fresh key. One
// in declineEvery has an amount that processord declines (ending in 02):
// it must end as one declined payment, no charge, and a 402
// payment-declined replayed byte for byte.
func (w *Worker) newPayment(workload string, t tenant, key string) *Op {
	amount := 100 + w.Rand.Int64N(100_000)
	switch {
	case w.Rand.IntN(declineEvery) == 0:
		amount = amount/100*100 + 2
	case declined(amount):
		amount++
	}
	return w.h.history.newOp(workload, t, key, amount, "cus_"+t.name+"_"+key)
}

// declineEvery is how rare declined payments are among new payments.
const declineEvery = 12

// declined reports whether processord declines amount: it ends in 02.
func declined(amount int64) bool { return amount%100 == 2 }

// newKey returns a key no operation has used.
func (w *Worker) newKey() string {
	return fmt.Sprintf("chaos-%d-%07d", w.h.cfg.Seed, w.h.keySeq.Add(1))
}

// Storm sends K identical requests at once for a new key, each to an
// instance of its own choice and each retried until a final answer; often
// the other tenant sends its own payment with the same key at the same time.
type Storm struct{}

func (Storm) Name() string { return "storm" }

func (Storm) Run(ctx context.Context, w *Worker) {
	key := w.newKey()
	ops := []*Op{w.newPayment("storm", w.Tenant, key)}
	if w.Rand.IntN(10) < 3 {
		ops = append(ops, w.newPayment("storm", tenants[(w.ID+1)%len(tenants)], key))
	}
	var wg sync.WaitGroup
	for _, op := range ops {
		k := 2 + w.Rand.IntN(4)
		for range k {
			seed := w.Rand.Uint64()
			wg.Add(1)
			go func() {
				defer wg.Done()
				w.h.drive(ctx, op, "traffic", rand.New(rand.NewPCG(seed, 1)))
			}()
		}
	}
	wg.Wait()
	for _, op := range ops {
		w.h.settled(op)
	}
}

// Decline is a storm of a payment that processord declines: every copy
// must get the one stored 402 payment-declined, and the card is tried
// once. The default mix has declines among its storms and retries; this
// workload alone is for the broken build that forgets them.
type Decline struct{}

func (Decline) Name() string { return "decline" }

func (Decline) Run(ctx context.Context, w *Worker) {
	key := w.newKey()
	amount := (100+w.Rand.Int64N(100_000))/100*100 + 2
	op := w.h.history.newOp("decline", w.Tenant, key, amount, "cus_"+w.Tenant.name+"_"+key)
	var wg sync.WaitGroup
	for range 2 + w.Rand.IntN(4) {
		seed := w.Rand.Uint64()
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.h.drive(ctx, op, "traffic", rand.New(rand.NewPCG(seed, 3)))
		}()
	}
	wg.Wait()
}

// Retry sends one payment and retries it with idemclient's backoff, each
// attempt to a random instance, until a final answer.
type Retry struct{}

func (Retry) Name() string { return "retry" }

func (Retry) Run(ctx context.Context, w *Worker) {
	op := w.newPayment("retry", w.Tenant, w.newKey())
	w.h.drive(ctx, op, "traffic", w.Rand)
	w.h.settled(op)
}

// Reuse sends an acknowledged key of the client again with a changed
// amount: the answer must be 422, and the payment must stay as it was.
type Reuse struct{}

func (Reuse) Name() string { return "reuse" }

func (Reuse) Run(ctx context.Context, w *Worker) {
	acked := w.h.history.ackedOf(w.Tenant.name)
	if len(acked) == 0 {
		Retry{}.Run(ctx, w)
		return
	}
	orig := acked[w.Rand.IntN(len(acked))]
	op := w.h.history.newOp("reuse", w.Tenant, orig.Key, orig.Amount+1, orig.Customer)
	op.ReuseOf = orig.ID
	w.h.drive(ctx, op, "traffic", w.Rand)
}

// Client timing: idemclient's backoff between attempts, a per-attempt
// timeout shorter than a pause, so that clients leave a stopped instance
// for another.
const (
	backoffBase     = 50 * time.Millisecond
	backoffLimit    = time.Second
	retryAfterLimit = 2 * time.Second
	attemptTimeout  = 5 * time.Second
)

// drive sends op until it has a final answer or ctx is done, each attempt
// to an instance drawn from rnd, waiting between attempts as idemclient
// does (full-jitter exponential backoff, Retry-After). It returns the final
// attempt, or nil.
func (h *harness) drive(ctx context.Context, op *Op, phase string, rnd *rand.Rand) *Attempt {
	return h.driveN(ctx, op, phase, rnd, -1)
}

// driveN is drive with at most max attempts; -1 is no bound.
func (h *harness) driveN(ctx context.Context, op *Op, phase string, rnd *rand.Rand, max int) *Attempt {
	for n := 0; n != max; n++ {
		a := h.send(ctx, op, rnd.IntN(len(h.targets(op))), phase)
		if a == nil {
			return nil // ctx done before an answer
		}
		if a.final() {
			return a.Attempt
		}
		wait := idemclientBackoff(n)
		if a.retryAfter > 0 {
			wait = min(a.retryAfter, retryAfterLimit)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
	return nil
}

// idemclientBackoff is idemclient's default backoff before retry n.
func idemclientBackoff(n int) time.Duration {
	return idemclient.DefaultBackoff(n, backoffBase, backoffLimit)
}

// settled notes an operation whose traffic round ended.
func (h *harness) settled(op *Op) {
	if _, final := op.snapshot(); final != nil && final.ok() && op.ReuseOf == 0 && op.Kind == "" {
		h.history.ack(op)
	}
}

// sentAttempt is an Attempt with what only the client loop needs.
type sentAttempt struct {
	*Attempt
	retryAfter time.Duration
}

// send makes one attempt of op at instance i and records it. It returns
// nil, recording nothing, when ctx ended before an answer.
func (h *harness) send(ctx context.Context, op *Op, i int, phase string) *sentAttempt {
	a := &Attempt{Op: op.ID, Instance: i, Phase: phase, Sent: time.Now()}
	actx, cancel := context.WithTimeout(ctx, attemptTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(actx, http.MethodPost, "http://"+h.targets(op)[i].addr+op.path(), bytes.NewReader([]byte(op.Body)))
	if err != nil {
		panic(err) // the URL is ours
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+op.token)
	req.Header.Set(idem.HeaderKey, op.Key)
	if op.Kind == kindProxy {
		req.Header.Set(opHeader, strconv.Itoa(op.ID))
	}
	out := &sentAttempt{Attempt: a}
	resp, err := h.client.Do(req)
	var body []byte
	if err == nil {
		body, err = io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		resp.Body.Close()
	}
	a.Answered = time.Now()
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		a.Error = err.Error()
		op.record(a)
		h.history.attempts.Add(1)
		return out
	}
	a.Status = resp.StatusCode
	a.Replayed = resp.Header.Get(idem.HeaderReplayed) == "true"
	a.AnswerSHA = digest(body)
	a.Answer = string(body)
	if a.Status >= 400 {
		var p struct {
			Code string `json:"code"`
		}
		_ = json.Unmarshal(body, &p)
		a.Problem = p.Code
		a.Held = op.Kind == kindProxy && op.Policy == string(proxy.PolicyHold) && a.Problem == string(idem.ProblemOutcomeUnknown)
	}
	if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s >= 0 {
		out.retryAfter = time.Duration(s) * time.Second
	}
	op.record(a)
	h.history.attempts.Add(1)
	if a.ok() {
		h.history.answered2x.Add(1)
	}
	if reason := h.liveViolation(op, a); reason != "" {
		h.history.suspect.Add(1)
	}
	return out
}

// liveViolation returns why an answer is wrong on its own, or "".
func (h *harness) liveViolation(op *Op, a *Attempt) string {
	switch {
	case op.Kind == kindProxy:
		return proxyLiveViolation(op, a)
	case a.Status >= 500 && !h.documented5xx(a.Problem):
		return "unexpected 5xx"
	case a.ok() && op.ReuseOf != 0:
		return "changed body accepted"
	case a.ok() && op.Kind == kindTransfer:
		if t, err := parseTransfer([]byte(a.Answer)); err != nil || t.From != op.From || t.To != op.To || t.Amount != op.Amount {
			return "another request's transfer"
		}
	case a.ok() && op.Kind != "":
	case a.ok():
		if p, err := parsePayment([]byte(a.Answer)); err != nil || p.Customer != op.Customer || p.Amount != op.Amount {
			return "another request's payment"
		}
	}
	return ""
}

// documented5xx reports whether a 5xx problem code is a documented answer
// to a fault of the run: idem's 503s while the store is down, when a
// commit's answer was lost, or when a payment stopped at a recovery point.
func (h *harness) documented5xx(code string) bool {
	switch code {
	case string(idem.ProblemUnavailable), string(idem.ProblemOutcomeUnknown), string(idem.ProblemOperationUnfinished):
		// operation-unfinished: a two-phase payment stopped at a recovery
		// point (the processor's answer was lost, or a commit failed); the
		// retry resumes it.
		return true
	}
	return false
}

// payment is the part of a payment answer the checker reads.
type payment struct {
	ID       string `json:"id"`
	Amount   int64  `json:"amount"`
	Currency string `json:"currency"`
	Customer string `json:"customer"`
}

func parsePayment(body []byte) (payment, error) {
	var p payment
	err := json.Unmarshal(body, &p)
	if err == nil && p.ID == "" {
		err = fmt.Errorf("no payment id")
	}
	return p, err
}
