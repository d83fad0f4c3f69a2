package proxy

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/http/httputil"
	"strings"
	"sync/atomic"
	"time"

	"github.com/idemkit/idem"
)

// Problem codes of the proxy, beside idem's own.
const (
	// ProblemOutcomeUnknown: 502 or 504, the request reached the upstream
	// and no usable answer came back, so whether it took effect is unknown.
	ProblemOutcomeUnknown idem.ProblemCode = "idempotency-outcome-unknown"
	// ProblemUpstreamUnavailable: 503, the upstream could not be reached and
	// the request was not sent; the key is free.
	ProblemUpstreamUnavailable idem.ProblemCode = "upstream-unavailable"
	// ProblemUpstreamFailed: 502, a request outside the key routes got no
	// answer from the upstream.
	ProblemUpstreamFailed idem.ProblemCode = "upstream-failed"
)

// problemKinds are the proxy's problems, served with idem's at the type base.
var problemKinds = []idem.ProblemKind{
	{Code: ProblemOutcomeUnknown, Status: http.StatusBadGateway, Title: "Outcome unknown",
		About: "The request was sent to the upstream service and no usable answer came back (a timeout, a reset connection, or a 502, 503 or 504 from a gateway in between), so whether it took effect is unknown. Never retry with a new key. Depending on the route's policy, a retry with the same key is forwarded again with the same Idempotency-Key (retry), gets this same answer until an operator resolves the key (hold), or asks the upstream service what became of the request and gets its response, is forwarded if the upstream never received it, or gets this answer again while that is unknown (probe)."},
	{Code: ProblemUpstreamUnavailable, Status: http.StatusServiceUnavailable, Title: "Upstream unavailable",
		About: "The upstream service could not be reached, and the request was not sent to it. The key is free: retry with the same key."},
	{Code: ProblemUpstreamFailed, Status: http.StatusBadGateway, Title: "Upstream failed",
		About: "A request that needs no Idempotency-Key got no answer from the upstream service: it could not be reached, or failed before it answered. Whether the request took effect is unknown."},
}

// kindOf describes one of the proxy's problem codes.
func kindOf(code idem.ProblemCode) idem.ProblemKind {
	for _, k := range problemKinds {
		if k.Code == code {
			return k
		}
	}
	return code.Kind()
}

// ForwardResult is how a forward of a key route ended.
type ForwardResult string

const (
	// ForwardAnswered: the upstream answered.
	ForwardAnswered ForwardResult = "answered"
	// ForwardNotSent: the request never reached the upstream; the key was
	// released.
	ForwardNotSent ForwardResult = "not_sent"
	// ForwardOutcomeUnknown: the request was sent and no usable answer came
	// back.
	ForwardOutcomeUnknown ForwardResult = "outcome_unknown"
)

// ForwardMetrics counts forwards.
type ForwardMetrics interface {
	Forward(ctx context.Context, route string, result ForwardResult)
}

type noForwardMetrics struct{}

func (noForwardMetrics) Forward(context.Context, string, ForwardResult) {}

// attempt is one forward of a key route: its route, for metrics, and
// whether anything was written to the upstream.
type attempt struct {
	route string
	probe probeURL // the status URL of a probe route
	sent  atomic.Bool
}

type attemptKey struct{}

// statusError is an upstream answer that says nothing about the request's
// outcome: a 502, 503 or 504, typically from a load balancer in between.
type statusError struct{ status int }

func (e *statusError) Error() string { return fmt.Sprintf("upstream answered %d", e.status) }

// forwarder forwards a request on a key route, under the lease idem's
// middleware holds. Unlike a plain httputil.ReverseProxy it never lets
// net/http send the request twice: the body has no GetBody, and the key
// (and an X-Idempotency-Key) goes out under its lower-case spelling, which
// http.Transport does not take as a sign that a body-less request may be
// re-sent after a reused connection fails (header names are
// case-insensitive, RFC 9110 section 5.1). Every failure therefore reaches forwardFailed, which tells a request
// never sent from one whose outcome is unknown. Responses stream to the
// client (idem.StreamResponse) and are stored up to MaxStoredBytes.
func (p *Proxy) forwarder(policy Policy) http.Handler {
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			p.rewrite(pr)
			for _, name := range []string{idem.HeaderKey, "X-Idempotency-Key"} {
				keys := pr.Out.Header.Values(name)
				delete(pr.Out.Header, name)
				if len(keys) > 0 && !p.cfg.DropKey {
					pr.Out.Header[strings.ToLower(name)] = keys
				}
			}
			pr.Out.GetBody = nil
			a := attemptOf(pr.In)
			pr.Out = pr.Out.WithContext(httptrace.WithClientTrace(pr.Out.Context(), &httptrace.ClientTrace{
				WroteHeaders: func() { a.sent.Store(true) },
			}))
		},
		Transport: p.cfg.Transport,
		ModifyResponse: func(resp *http.Response) error {
			switch resp.StatusCode {
			case http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
				return &statusError{resp.StatusCode}
			}
			p.cfg.Forwards.Forward(resp.Request.Context(), attemptOf(resp.Request).route, ForwardAnswered)
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			p.forwardFailed(w, r, policy, err)
		},
		ErrorLog: slog.NewLogLogger(p.cfg.Logger.Handler(), slog.LevelWarn),
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		idem.StreamResponse(w, p.cfg.MaxStoredBytes)
		defer func() {
			// httputil.ReverseProxy (and replayProbe) panics with
			// http.ErrAbortHandler when the body breaks off after the
			// status was sent: the upstream answered, so the key is
			// completed as not retained, and idem then aborts the client's
			// connection.
			if v := recover(); v != nil {
				if v != http.ErrAbortHandler || !idem.BreakResponse(w) {
					panic(v)
				}
				p.cfg.Logger.WarnContext(r.Context(), "idemproxy: the upstream's response broke off after its status was sent; the key keeps the status, not the body",
					"method", r.Method, "path", r.URL.Path)
			}
		}()
		if policy == PolicyProbe && p.probeFirst(w, r) {
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), p.cfg.UpstreamTimeout)
		defer cancel()
		rp.ServeHTTP(w, r.WithContext(ctx))
	})
}

// attemptOf returns the attempt that ServeHTTP put in a request's context.
func attemptOf(r *http.Request) *attempt { return r.Context().Value(attemptKey{}).(*attempt) }

// forwardFailed answers a forward that got no usable answer.
func (p *Proxy) forwardFailed(w http.ResponseWriter, r *http.Request, policy Policy, err error) {
	ctx := r.Context()
	a := attemptOf(r)
	log := p.cfg.Logger.With("method", r.Method, "path", r.URL.Path, "policy", string(policy))
	if scope, ok := idem.ScopeFromContext(ctx); ok {
		log = log.With("client_id", scope.ClientID, "key_digest", keyDigest(scope.Key))
	}
	var se *statusError
	switch {
	case errors.As(err, &se):
		status := http.StatusBadGateway
		if se.status == http.StatusGatewayTimeout {
			status = http.StatusGatewayTimeout
		}
		log.WarnContext(ctx, "idemproxy: outcome unknown: the upstream's answer says nothing about the request", "upstream_status", se.status)
		p.outcomeUnknown(w, r, policy, status, fmt.Sprintf("The request was sent to the upstream service, and a gateway answered %d for it", se.status))
	case !a.sent.Load():
		log.WarnContext(ctx, "idemproxy: upstream unreachable; the request was not sent", "err", err)
		p.cfg.Forwards.Forward(ctx, a.route, ForwardNotSent)
		idem.WriteProblem(w, kindOf(ProblemUpstreamUnavailable).New(p.cfg.ProblemTypeBase,
			"The upstream service could not be reached and the request was not sent to it. The key is free: retry with the same key."), 1)
	case isTimeout(err):
		log.WarnContext(ctx, "idemproxy: outcome unknown: the upstream did not answer in time", "err", err)
		p.outcomeUnknown(w, r, policy, http.StatusGatewayTimeout, "The request was sent to the upstream service, which did not answer in time")
	default:
		log.WarnContext(ctx, "idemproxy: outcome unknown: the upstream connection failed after the request was sent", "err", err)
		p.outcomeUnknown(w, r, policy, http.StatusBadGateway, "The request was sent to the upstream service, and the connection failed before its answer came back")
	}
}

// outcomeUnknown answers a request whose outcome is unknown. The answer is
// stored and replayed under PolicyHold, so its text holds for every retry.
func (p *Proxy) outcomeUnknown(w http.ResponseWriter, r *http.Request, policy Policy, status int, what string) {
	p.cfg.Forwards.Forward(r.Context(), attemptOf(r).route, ForwardOutcomeUnknown)
	prob := kindOf(ProblemOutcomeUnknown).New(p.cfg.ProblemTypeBase, "")
	prob.Status = status
	retryAfter := 0
	switch policy {
	case PolicyProbe:
		prob.Detail = what + ", so whether it took effect is unknown. Retry with the same Idempotency-Key after Retry-After, never a new one: the retry asks the upstream service what became of the request, and gets its response if it took effect, or is sent upstream again if the upstream never received it."
		retryAfter = 1
		if _, keep := p.markUnknown(r.Context(), status); keep {
			prob.Detail = what + ", so whether it took effect is unknown. Retry with the same Idempotency-Key after Retry-After, never a new one: the retry asks the upstream service what became of the request before anything is sent again."
			retryAfter = int(p.cfg.LockTimeout.Round(time.Second) / time.Second)
		}
	case PolicyHold:
		prob.Detail = what + ", so whether it took effect is unknown. The key is held: every retry with it gets this answer, and nothing is sent upstream, until an operator resolves the key. Never retry with a new key unless you know that the operation did not happen."
	default:
		prob.Detail = what + ", so whether it took effect is unknown. Retry with the same Idempotency-Key, never a new one: the retry is sent upstream again with the same key."
		if p.cfg.DropKey {
			prob.Detail = what + ", so whether it took effect is unknown. A retry with the same Idempotency-Key is sent upstream again, and the upstream does not receive the key: it may repeat the operation."
		}
		retryAfter = 1
	}
	idem.WriteProblem(w, prob, retryAfter)
}

// keyDigest is a short digest of a key for logs, as idem's middleware logs
// it: logs never carry keys.
func keyDigest(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:6])
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}
