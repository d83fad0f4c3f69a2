package chaos

import (
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/cmd/internal/proxy"
)

// upstream is the API behind the run's idemproxy instances: an API that
// cannot change. It counts what reaches it per key (forwards) and what it
// does (executions), so that the checker holds each route's policy to its
// promise. On the hold route it does not honour keys: every forward is an
// execution, as with a legacy API. On the retry and probe routes it does,
// as the policies require of their upstreams: a forward of a key it
// executed gets the first answer again, and on the probe route it keeps
// the status URL contract of docs/proxy.md. It fails some requests on a
// schedule drawn from the seed: it loses the answer after executing (the
// connection closes), answers after the proxy's upstream timeout, or
// refuses with 503 and Retry-After before doing anything.
type upstream struct {
	srv     *http.Server
	addr    string
	seed    uint64
	timeout time.Duration // the proxies' -upstream-timeout; late answers come after it

	mu   sync.Mutex
	n    uint64
	keys map[scopeKey]*upstreamKey
	// ops counts executions per operation, by client and the opHeader the
	// harness sends, under whatever key the proxy forwarded.
	ops map[scopeKey]*upstreamOp
}

// opHeader carries a proxy operation's id in the harness's requests; the
// proxies pass it on, and the upstream counts executions per operation by
// it, so that a proxy that forwards an operation under another key than
// the client's is seen executing it twice.
const opHeader = "X-Chaos-Op"

// upstreamOp is what the upstream executed of one operation.
type upstreamOp struct {
	Executions int
	Keys       []string // the keys it was executed under, in order
}

// upstreamKey is what the upstream saw of one client's key.
type upstreamKey struct {
	Forwards   int    `json:"forwards"`   // requests that reached the upstream
	Executions int    `json:"executions"` // operations it performed
	Answer     string `json:"answer"`     // the first execution's response body
	running    bool
}

// Upstream fault rates, of requests.
const (
	upstreamLoseRate   = 0.03
	upstreamLateRate   = 0.02
	upstreamRefuseRate = 0.02
	// upstreamDelay keeps forwards in flight, where kills and pauses of
	// the proxies catch them.
	upstreamDelay = 20 * time.Millisecond
)

// Policies of the proxy workload's routes; each is under /v1/POLICY/ops.
var proxyPolicies = []string{string(proxy.PolicyRetry), string(proxy.PolicyHold), string(proxy.PolicyProbe)}

func startUpstream(seed uint64, timeout time.Duration) (*upstream, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("chaos: start the upstream: %w", err)
	}
	u := &upstream{addr: l.Addr().String(), seed: seed, timeout: timeout, keys: map[scopeKey]*upstreamKey{}, ops: map[scopeKey]*upstreamOp{}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+healthPath, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok\n") })
	mux.HandleFunc("POST /v1/{policy}/ops", u.operate)
	mux.HandleFunc("GET /v1/requests/{key}", u.status)
	u.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go u.srv.Serve(l)
	return u, nil
}

func (u *upstream) close() { u.srv.Close() }

// draw returns a number in [0, 1) from the seed and the request count.
func (u *upstream) draw() float64 {
	u.mu.Lock()
	u.n++
	n := u.n
	u.mu.Unlock()
	return rand.New(rand.NewPCG(u.seed, n)).Float64()
}

func (u *upstream) operate(w http.ResponseWriter, r *http.Request) {
	policy := r.PathValue("policy")
	k := scopeKey{client: r.Header.Get("Authorization"), key: r.Header.Get(idem.HeaderKey)}
	body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<16))
	var in struct {
		Amount int64 `json:"amount"`
	}
	if k.key == "" || json.Unmarshal(body, &in) != nil {
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	d := u.draw()
	if d < upstreamRefuseRate {
		// The service says it did not handle the request.
		w.Header().Set("Retry-After", "1")
		http.Error(w, "busy", http.StatusServiceUnavailable)
		return
	}
	u.mu.Lock()
	s := u.keys[k]
	if s == nil {
		s = &upstreamKey{}
		u.keys[k] = s
	}
	s.Forwards++
	honours := policy != string(proxy.PolicyHold)
	if honours && (s.running || s.Executions > 0) {
		answer, running := s.Answer, s.running
		u.mu.Unlock()
		if running {
			w.Header().Set("Retry-After", "1")
			http.Error(w, "in flight", http.StatusConflict)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, answer)
		return
	}
	s.running = true
	s.Executions++
	if id := r.Header.Get(opHeader); id != "" {
		ok := scopeKey{client: k.client, key: id}
		o := u.ops[ok]
		if o == nil {
			o = &upstreamOp{}
			u.ops[ok] = o
		}
		o.Executions++
		o.Keys = append(o.Keys, k.key)
	}
	u.n++
	answer := fmt.Sprintf(`{"id":"op_%d","key":%q,"amount":%d}`, u.n, k.key, in.Amount)
	if s.Answer == "" {
		s.Answer = answer
	}
	u.mu.Unlock()
	time.Sleep(upstreamDelay)
	u.mu.Lock()
	s.running = false
	u.mu.Unlock()
	switch {
	case d < upstreamRefuseRate+upstreamLoseRate:
		// Executed, and the answer is lost.
		if hj, ok := w.(http.Hijacker); ok {
			if c, _, err := hj.Hijack(); err == nil {
				c.Close()
				return
			}
		}
	case d < upstreamRefuseRate+upstreamLoseRate+upstreamLateRate:
		time.Sleep(u.timeout + 500*time.Millisecond)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	io.WriteString(w, answer)
}

// status is the probe route's status URL (docs/proxy.md, "The probe
// contract"): completed with the answer, not-received when no request
// with the key ever arrived, and 202 while one is running.
func (u *upstream) status(w http.ResponseWriter, r *http.Request) {
	k := scopeKey{client: r.Header.Get("Authorization"), key: r.PathValue("key")}
	u.mu.Lock()
	s := u.keys[k]
	var answer string
	var running, executed bool
	if s != nil {
		answer, running, executed = s.Answer, s.running, s.Executions > 0
	}
	u.mu.Unlock()
	switch {
	case executed && !running:
		w.Header().Set(proxy.ProbeStatusHeader, proxy.ProbeStatusCompleted)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, answer)
	case s == nil:
		w.Header().Set(proxy.ProbeStatusHeader, proxy.ProbeStatusNotReceived)
		w.WriteHeader(http.StatusNotFound)
	default:
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(http.StatusAccepted)
	}
}

// seen returns what the upstream saw of a client's key (the client as its
// Authorization header).
func (u *upstream) seen(authorization, key string) upstreamKey {
	u.mu.Lock()
	defer u.mu.Unlock()
	if s := u.keys[scopeKey{authorization, key}]; s != nil {
		return *s
	}
	return upstreamKey{}
}

// executed returns what the upstream executed of a client's operation,
// under any key.
func (u *upstream) executed(authorization string, op int) upstreamOp {
	u.mu.Lock()
	defer u.mu.Unlock()
	if o := u.ops[scopeKey{authorization, strconv.Itoa(op)}]; o != nil {
		return upstreamOp{Executions: o.Executions, Keys: slices.Clone(o.Keys)}
	}
	return upstreamOp{}
}

// proxyPath is where an operation of the proxy workload goes.
func proxyPath(policy string) string { return "/v1/" + strings.ToLower(policy) + "/ops" }
