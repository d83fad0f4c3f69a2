package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/cmd/internal/proxy"
)

// kindProxy marks an operation of the proxy workload: sent to an idemproxy
// instance in front of the run's upstream, on the route of its Policy.
const kindProxy = "proxy"

// Proxy timing: the upstream timeout is far below a client's attempt, and
// the lease covers it and a probe, as idemproxy requires.
const (
	proxyUpstreamTimeout = time.Second
	proxyProbeTimeout    = time.Second
	proxyLockTimeout     = 3 * time.Second
	// proxySecret keys the proxies' client ids; every instance has it.
	proxySecret = "chaos-proxy-secret-0123456789"
)

// Proxy sends a payment-like operation through the idemproxy instances on
// a route of each outcome-unknown policy (retry, hold, probe): sometimes
// as a storm of duplicates across instances, else one client retrying
// with idemclient's backoff, until a final answer. On a hold route the
// held outcome-unknown is final.
type Proxy struct {
	// Policy sends every operation to that policy's route; "" draws one
	// per operation.
	Policy string
}

func (Proxy) Name() string { return "proxy" }

func (p Proxy) Run(ctx context.Context, w *Worker) {
	if len(w.h.proxies) == 0 {
		Retry{}.Run(ctx, w)
		return
	}
	policy := p.Policy
	if policy == "" {
		policy = proxyPolicies[w.Rand.IntN(len(proxyPolicies))]
	}
	amount := 100 + w.Rand.Int64N(100_000)
	op := &Op{Workload: "proxy", Client: w.Tenant.name, Key: w.newKey(), Kind: kindProxy, Policy: policy, Amount: amount, token: w.Tenant.token}
	body, _ := json.Marshal(map[string]any{"amount": amount})
	w.h.history.add(op, body)
	k := 1
	if w.Rand.IntN(2) == 0 {
		k = 2 + w.Rand.IntN(3)
	}
	var wg sync.WaitGroup
	for range k {
		seed := w.Rand.Uint64()
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.h.drive(ctx, op, "traffic", rand.New(rand.NewPCG(seed, 2)))
		}()
	}
	wg.Wait()
}

// targets returns the processes an operation is sent to: the idemproxy
// instances for the proxy workload, else the paymentsd instances.
func (h *harness) targets(op *Op) []*process {
	if op.Kind == kindProxy {
		return h.proxies
	}
	return h.instances
}

// deployProxies starts the upstream and cfg.Proxies idemproxy instances
// in front of it, sharing a key store on the run's PostgreSQL (through
// the primary's link: restarts and failovers reach them too).
func (h *harness) deployProxies(ctx context.Context, bin string) error {
	idemproxy := filepath.Join(bin, "idemproxy")
	var err error
	if h.upstream, err = startUpstream(h.cfg.Seed, proxyUpstreamTimeout); err != nil {
		return err
	}
	h.dbMu.Lock()
	dbURL, err := h.cluster.CreateDatabase(ctx, "proxy")
	h.dbMu.Unlock()
	if err != nil {
		return fmt.Errorf("chaos: %w", err)
	}
	if dbURL, err = h.net.viaPrimary(dbURL); err != nil {
		return err
	}
	addrs, err := freeAddrs(h.cfg.Proxies)
	if err != nil {
		return err
	}
	for i := range h.cfg.Proxies {
		upstreamURL, err := h.net.routeURL(LinkUpstream, i, "http://"+h.upstream.addr)
		if err != nil {
			return err
		}
		p := &process{
			name: fmt.Sprintf("idemproxy-%d", i), path: idemproxy, addr: addrs[i],
			args: []string{
				"-listen", addrs[i], "-admin-addr", "", "-upstream", upstreamURL, "-db", dbURL,
				"-route", "POST " + proxyPath(string(proxy.PolicyRetry)) + " retry",
				"-route", "POST " + proxyPath(string(proxy.PolicyHold)) + " hold",
				"-route", "POST " + proxyPath(string(proxy.PolicyProbe)) + " probe",
				"-probe-url", "/v1/requests/{key}",
				"-upstream-timeout", proxyUpstreamTimeout.String(), "-probe-timeout", proxyProbeTimeout.String(),
				"-lock-timeout", proxyLockTimeout.String(), "-shutdown-timeout", "1s",
			},
			env:     append(slices.Clone(h.cfg.Env), "IDEMPROXY_SECRET="+proxySecret),
			logPath: filepath.Join(h.dir, fmt.Sprintf("idemproxy-%d.log", i)),
		}
		h.proxies = append(h.proxies, p)
		p.supervise()
	}
	return nil
}

// proxyLiveViolation returns why a proxy operation's answer is wrong on
// its own, or "".
func proxyLiveViolation(op *Op, a *Attempt) string {
	switch {
	case a.Status >= 500 && !proxyDocumented5xx(op, a):
		return "unexpected 5xx"
	case a.ok():
		var got struct {
			Key    string `json:"key"`
			Amount int64  `json:"amount"`
		}
		if json.Unmarshal([]byte(a.Answer), &got) != nil || got.Key != op.Key || got.Amount != op.Amount {
			return "another request's answer"
		}
	}
	return ""
}

// proxyDocumented5xx reports whether a proxy's 5xx is a documented answer
// to a fault (docs/proxy.md, "Outcome unknown"): the outcome-unknown
// problem (502 or 504), the upstream out of reach (503), the key store
// down (503), or the upstream's own 503 with Retry-After, passed on.
func proxyDocumented5xx(op *Op, a *Attempt) bool {
	switch a.Problem {
	case string(idem.ProblemOutcomeUnknown), string(proxy.ProblemUpstreamUnavailable), string(idem.ProblemUnavailable):
		return true
	}
	return a.Status == 503 && a.Problem == ""
}

// checkProxy audits the proxy workload against what the upstream saw:
// on the hold and probe routes the upstream received each key at most
// once (the policies' promise: no second forward once one may have
// arrived); on every route it executed each key at most once, and each
// operation at most once under any key (the retry policy's promise: a
// retry goes out with the first forward's key, which the upstream
// honours); every 2xx
// is the upstream's answer to that key, the same on every attempt; every
// acknowledged key was executed; and every operation has a final answer.
func (h *harness) checkProxy(r *Report) {
	for _, op := range h.history.Ops() {
		if op.Kind != kindProxy {
			continue
		}
		r.proxy.Operations++
		seen := h.upstream.seen("Bearer "+op.token, op.Key)
		attempts, final := op.snapshot()
		for _, a := range attempts {
			if a.Status >= 500 && !proxyDocumented5xx(op, a) {
				r.add(v5xx, op, fmt.Sprintf("proxy %d answered %d %s", a.Instance, a.Status, a.Problem))
			}
		}
		switch {
		case final == nil:
			r.add(vUnanswered, op, "no final answer after settling")
		case final.Held:
			r.proxy.Held++
		case final.ok():
			r.proxy.Acknowledged++
		}
		if seen.Executions > 1 {
			r.add(vDuplicated, op, fmt.Sprintf("the upstream executed the key %d times (%s route)", seen.Executions, op.Policy))
		}
		if ex := h.upstream.executed("Bearer "+op.token, op.ID); ex.Executions > 1 && slices.ContainsFunc(ex.Keys, func(k string) bool { return k != op.Key }) {
			r.add(vDuplicated, op, fmt.Sprintf("the upstream executed the operation %d times, under the keys %q (%s route)", ex.Executions, ex.Keys, op.Policy))
		}
		if op.Policy != string(proxy.PolicyRetry) && seen.Forwards > 1 {
			r.add(vDuplicated, op, fmt.Sprintf("the %s route forwarded the key %d times", op.Policy, seen.Forwards))
		}
		if op.Policy == string(proxy.PolicyRetry) && seen.Forwards > 1 {
			r.proxy.RetryForwards += seen.Forwards - 1
		}
		r.proxy.Executions += seen.Executions
		for _, a := range attempts {
			if !a.ok() {
				continue
			}
			switch {
			case seen.Executions == 0:
				r.add(vLost, op, fmt.Sprintf("proxy %d answered %d, but the upstream never executed the key", a.Instance, a.Status))
			case a.Answer != seen.Answer:
				r.add(vMismatch, op, fmt.Sprintf("proxy %d answered a 2xx that is not the upstream's answer to the key", a.Instance))
			}
		}
	}
}

// proxyCounts are the proxy workload's figures.
type proxyCounts struct {
	Operations   int `json:"operations"`
	Acknowledged int `json:"acknowledged"`
	// Held counts operations on the hold route that ended held: their
	// outcome was unknown and an operator resolves them.
	Held int `json:"held"`
	// Executions counts what the upstream did for the workload's keys.
	Executions int `json:"upstream_executions"`
	// RetryForwards counts the second and later forwards of one key on the
	// retry route: allowed by its policy (the upstream honours keys and
	// answers them from its record).
	RetryForwards int `json:"retry_forwards"`
}

// proxySettleWait is how long settling waits for the proxies' leases of
// killed holders to run out before retrying.
const proxySettleWait = proxyLockTimeout + proxyLockTimeout/2
