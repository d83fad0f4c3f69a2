package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/keyspec"
	"github.com/idemkit/idem/internal/replay"
)

// The status URL contract of PolicyProbe (docs/proxy.md, "The probe
// contract"). A status URL answers GET for one key, for the client whose
// credentials the probe carries, and states what it knows in the
// ProbeStatusHeader: a status alone is not enough, so that a router's 404
// for a mistyped URL, or a catch-all 200, is never taken for an answer.
const (
	// ProbeStatusHeader is the response header by which a status URL states
	// what became of a key.
	ProbeStatusHeader = "Idempotency-Key-Status"
	// ProbeStatusCompleted, with 200 or 201, says that the operation
	// happened and that the response is its response, which the proxy
	// stores as the key's answer and replays.
	ProbeStatusCompleted = "completed"
	// ProbeStatusNotReceived, with 404, is the upstream's promise that it
	// never received a request with the key, and that it will not act on
	// one still on its way: the proxy forwards the retry.
	ProbeStatusNotReceived = "not-received"
)

// ProbeTimeoutDefault is the default of Config.ProbeTimeout.
const ProbeTimeoutDefault = 5 * time.Second

// RecoveryOutcomeUnknown is the recovery point at which a probe route's key
// waits after a forward whose outcome is unknown: the store keeps the key
// there, started and with no holder, when it is released, and the retry
// that claims the key next probes. The state's "status" is the problem's
// status, 502 or 504.
const RecoveryOutcomeUnknown = "outcome_unknown"

// ProbeResult is what a probe learned.
type ProbeResult string

const (
	// ProbeCompleted: the status URL answered the operation's response; it
	// was stored under the key and replayed.
	ProbeCompleted ProbeResult = "completed"
	// ProbeNotReceived: the upstream never received the key; the retry was
	// forwarded.
	ProbeNotReceived ProbeResult = "not_received"
	// ProbeUnknown: the status URL answered anything else (still running,
	// 409, 425, a 404 without the promise, ...); the key stays unknown.
	ProbeUnknown ProbeResult = "unknown"
	// ProbeFailed: the status URL gave no answer within Config.ProbeTimeout;
	// the key stays unknown.
	ProbeFailed ProbeResult = "failed"
)

// ProbeMetrics counts probes.
type ProbeMetrics interface {
	Probe(ctx context.Context, route string, result ProbeResult)
}

type noProbeMetrics struct{}

func (noProbeMetrics) Probe(context.Context, string, ProbeResult) {}

// probeURL is a status URL template: one "{key}" in its path or query.
type probeURL struct {
	before, after string // around "{key}"; before is absolute once resolved
	query         bool   // "{key}" is in the query
}

// parseProbeURL parses a status URL template: an absolute http or https
// URL, or a path (starting with "/") under the upstream's URL, holding
// "{key}" once, in its path or its query.
func parseProbeURL(s string) (probeURL, error) {
	before, after, ok := strings.Cut(s, "{key}")
	if !ok || strings.Contains(after, "{key}") {
		return probeURL{}, fmt.Errorf("probe URL %q: want {key} once, such as /v1/requests/{key}", s)
	}
	u, err := url.Parse(before + "k" + after)
	if err != nil {
		return probeURL{}, fmt.Errorf("probe URL %q: %w", s, err)
	}
	switch {
	case strings.Contains(before, "#"):
		return probeURL{}, fmt.Errorf("probe URL %q: {key} must be in the path or the query", s)
	case strings.HasPrefix(s, "/") && !strings.HasPrefix(s, "//"):
	case (u.Scheme == "http" || u.Scheme == "https") && u.Host != "":
		_, rest, _ := strings.Cut(before, "://")
		if !strings.ContainsAny(rest, "/?") {
			return probeURL{}, fmt.Errorf("probe URL %q: {key} must be in the path or the query", s)
		}
	default:
		return probeURL{}, fmt.Errorf("probe URL %q: want an absolute http or https URL, or a path under the upstream", s)
	}
	return probeURL{before: before, after: after, query: strings.Contains(before, "?")}, nil
}

// resolve makes a path template absolute under the upstream's URL.
func (t probeURL) resolve(upstream *url.URL) probeURL {
	if strings.HasPrefix(t.before, "/") {
		base := *upstream
		base.RawQuery, base.Fragment = "", ""
		t.before = strings.TrimSuffix(base.String(), "/") + t.before
	}
	return t
}

// url is the status URL of a key, escaped for where it stands.
func (t probeURL) url(key string) string {
	if t.query {
		return t.before + url.QueryEscape(key) + t.after
	}
	return t.before + url.PathEscape(key) + t.after
}

// markUnknown saves the key's recovery point RecoveryOutcomeUnknown, so that
// the key keeps it when it is released, unless it is there already. It
// reports the problem's status saved earlier, or status. When the point
// cannot be saved, the lease keeps the key (see keyLease.keep) and keep is
// true.
func (p *Proxy) markUnknown(ctx context.Context, a *attempt, status int) (_ int, keep bool) {
	if a.point == RecoveryOutcomeUnknown {
		return a.status, false
	}
	if err := p.save(ctx, a, RecoveryOutcomeUnknown, "status", strconv.Itoa(status)); err != nil {
		p.cfg.Idem.Logger.ErrorContext(ctx, "idemproxy: could not mark the key unknown; it stays held until its lease expires, and the retry that takes it over probes", "err", err)
		keyLeaseOf(ctx).keep.Store(true)
		return status, true
	}
	a.point, a.status = RecoveryOutcomeUnknown, status
	return status, false
}

// probeFirst probes before a forward on a probe route, when the key's last
// forward may have reached the upstream: the claim took the key over, from
// a recovery point other than RecoveryNotProcessed or from a holder whose
// lease expired. It reports whether it answered w; if not, the request is
// to be forwarded.
func (p *Proxy) probeFirst(w http.ResponseWriter, r *http.Request) bool {
	ctx := r.Context()
	a := attemptOf(r)
	if !a.prior.takenOver || a.prior.point == RecoveryNotProcessed {
		return false // nothing was sent under the key before, or it did not take effect
	}
	scope, _ := idem.ScopeFromContext(ctx)
	log := p.cfg.Idem.Logger.With("method", r.Method, "path", r.URL.Path, "client_id", scope.ClientID, "key_digest", keyspec.Digest(scope.Key))
	pctx, cancel := context.WithTimeout(ctx, p.cfg.ProbeTimeout)
	defer cancel()
	// The key as the upstream received it: the field value the first
	// forward sent.
	resp, err := p.ask(pctx, r, a.probe.url(a.key))
	result := classify(resp, err)
	p.cfg.Probes.Probe(ctx, a.route, result)
	log = log.With("route", a.route, "probe_result", string(result))
	switch result {
	case ProbeCompleted:
		log.InfoContext(ctx, "idemproxy: probe: the upstream has the operation's response; it is stored under the key and replayed", "probe_status", resp.StatusCode)
		p.replayProbe(w, resp)
		return true
	case ProbeNotReceived:
		resp.Body.Close()
		log.InfoContext(ctx, "idemproxy: probe: the upstream never received the key; forwarding the retry")
		return false
	case ProbeFailed:
		log.WarnContext(ctx, "idemproxy: probe failed; the key stays unknown", "err", err)
		p.stillUnknown(w, r, 0, "the upstream service did not answer the question in time")
	default:
		resp.Body.Close()
		log.WarnContext(ctx, "idemproxy: probe: the upstream does not say that the operation completed or never arrived; the key stays unknown",
			"probe_status", resp.StatusCode, "key_status", resp.Header.Get(ProbeStatusHeader))
		why := "the upstream service did not say whether it received it"
		if resp.StatusCode == http.StatusAccepted {
			why = "the upstream service is still working on it"
		}
		p.stillUnknown(w, r, retryAfterOf(resp), why)
	}
	return true
}

// ask sends the probe: GET the status URL with the retry's identity
// headers, so that the upstream answers for the key's client.
func (p *Proxy) ask(ctx context.Context, r *http.Request, target string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return nil, err
	}
	for _, name := range p.cfg.ProbeHeaders {
		for _, v := range r.Header.Values(name) {
			req.Header.Add(name, v)
		}
	}
	return p.cfg.Transport.RoundTrip(req)
}

// classify reads the status URL's answer by the probe contract.
func classify(resp *http.Response, err error) ProbeResult {
	if err != nil {
		return ProbeFailed
	}
	said := strings.ToLower(strings.TrimSpace(resp.Header.Get(ProbeStatusHeader)))
	switch {
	case (resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusCreated) && said == ProbeStatusCompleted:
		return ProbeCompleted
	case resp.StatusCode == http.StatusNotFound && said == ProbeStatusNotReceived:
		return ProbeNotReceived
	}
	return ProbeUnknown
}

// replayProbe answers with the operation's response from the status URL,
// with the headers a replay has; the middleware stores it under the key
// (streamed, as a forward's response is).
func (p *Proxy) replayProbe(w http.ResponseWriter, resp *http.Response) {
	defer resp.Body.Close()
	for _, name := range replay.Headers(p.cfg.Idem.ReplayHeaders) {
		if v := resp.Header.Values(name); len(v) > 0 {
			w.Header()[name] = v
		}
	}
	w.Header().Set(idem.HeaderReplayed, "true")
	w.WriteHeader(resp.StatusCode)
	if _, err := io.Copy(w, resp.Body); err != nil {
		// As for a forward whose body breaks off: the operation happened,
		// so the key keeps the status, and the client sees the cut.
		// The forwarder recovers the panic (see forwarder).
		panic(http.ErrAbortHandler)
	}
}

// stillUnknown answers a retry whose probe did not settle the outcome: the
// same outcome-unknown problem, nothing forwarded, and the key released at
// its recovery point RecoveryOutcomeUnknown for the next retry to probe.
func (p *Proxy) stillUnknown(w http.ResponseWriter, r *http.Request, retryAfter int, why string) {
	status, keep := p.markUnknown(r.Context(), attemptOf(r), http.StatusBadGateway)
	prob := outcomeUnknownKind.New(p.cfg.Idem.ProblemTypeBase, "")
	prob.Status = status
	prob.Detail = "An earlier request with this key was sent to the upstream service and its outcome is unknown, and it still is: " + why +
		". Nothing was sent upstream. Retry with the same Idempotency-Key after Retry-After, never a new one: the retry asks the upstream again."
	if retryAfter <= 0 {
		retryAfter = 1
	}
	if keep {
		retryAfter = int(p.cfg.Idem.LockTimeout.Round(time.Second) / time.Second)
	}
	idem.WriteProblem(w, prob, retryAfter)
}

// retryAfterOf is the status URL's Retry-After in seconds, when it is a
// number from 1 to 60, else 0.
func retryAfterOf(resp *http.Response) int {
	n, err := strconv.Atoi(strings.TrimSpace(resp.Header.Get("Retry-After")))
	if err != nil || n < 1 || n > 60 {
		return 0
	}
	return n
}

var errNoProbeURL = errors.New("a probe route needs a status URL: its own or Config.ProbeURL")
