package proxy

import (
	"context"
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
	"github.com/idemkit/idem/idemstore"
	"github.com/idemkit/idem/internal/keyspec"
)

// Problem codes of the proxy, beside idem's own.
const (
	// ProblemUpstreamUnavailable: 503, the upstream could not be reached and
	// the request was not sent; the key is free.
	ProblemUpstreamUnavailable idem.ProblemCode = "upstream-unavailable"
	// ProblemUpstreamFailed: 502, a request outside the key routes got no
	// answer from the upstream.
	ProblemUpstreamFailed idem.ProblemCode = "upstream-failed"
	// ProblemBadTarget: 400, the request-target is not a path (such as
	// "POST *"), so no route can be told for it; nothing is forwarded.
	ProblemBadTarget idem.ProblemCode = "request-target-invalid"
)

// problemKinds are the proxy's problems, served with idem's at the type base.
var problemKinds = []idem.ProblemKind{
	{Code: ProblemUpstreamUnavailable, Status: http.StatusServiceUnavailable, Title: "Upstream unavailable",
		About: "The upstream service could not be reached, and the request was not sent to it. The key is free: retry with the same key."},
	{Code: ProblemBadTarget, Status: http.StatusBadRequest, Title: "Request-target invalid",
		About: "The request-target is not a path starting with / (only OPTIONS may use \"*\"), so the proxy cannot tell whether it needs an Idempotency-Key. Nothing was sent upstream. Send the request to a path."},
	{Code: ProblemUpstreamFailed, Status: http.StatusBadGateway, Title: "Upstream failed",
		About: "A request that needs no Idempotency-Key got no answer from the upstream service: it could not be reached, or failed before it answered. Whether the request took effect is unknown."},
}

// outcomeUnknownKind is idem's outcome-unknown problem as the proxy
// answers it: 502 or 504 (the status is set per answer), with the proxy's
// account of what a retry gets in its detail.
var outcomeUnknownKind = idem.ProblemOutcomeUnknown.Kind()

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
	// ForwardHeld: nothing was sent, as an earlier forward of the key on a
	// hold route may have reached the upstream; the retry got the
	// outcome-unknown problem, now stored under the key.
	ForwardHeld ForwardResult = "held"
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
	route  string
	policy Policy
	probe  probeURL            // the status URL of a probe route
	client http.ResponseWriter // the client's, under idem's recorder
	sent   atomic.Bool

	prior  prior  // what the key's recovery point said when the claim took it
	key    string // the Idempotency-Key field value forwarded: the request's, or the first forward's
	point  string // the key's recovery point now
	status int    // the outcome-unknown status saved with RecoveryOutcomeUnknown
}

type attemptKey struct{}

// statusError is an upstream answer that says nothing about the request's
// outcome: a 502 or 504, or a 503 without Retry-After, typically from a
// load balancer in between.
type statusError struct{ status int }

func (e *statusError) Error() string { return fmt.Sprintf("upstream answered %d", e.status) }

// saysNothing reports whether an upstream answer says nothing about the
// request's outcome. A 503 with Retry-After is the service's own word that
// it did not handle the request (RFC 9110, section 15.6.4), and is passed
// on; a gateway's 503 carries none, and may come after the request was
// passed on, as a proxy's does when its upstream's connection resets.
func saysNothing(resp *http.Response) bool {
	switch resp.StatusCode {
	case http.StatusBadGateway, http.StatusGatewayTimeout:
		return true
	case http.StatusServiceUnavailable:
		return resp.Header.Get("Retry-After") == ""
	}
	return false
}

// forwarder forwards a request on a key route, under the lease idem's
// middleware holds. Unlike a plain httputil.ReverseProxy it never lets
// net/http send the request twice: the body has no GetBody, and the key
// (and an X-Idempotency-Key) goes out under its lower-case spelling, which
// http.Transport does not take as a sign that a body-less request may be
// re-sent after a reused connection fails (header names are
// case-insensitive, RFC 9110 section 5.1). Every failure therefore reaches
// forwardFailed, which tells a request never sent from one whose outcome is
// unknown. On hold and probe routes, the key's recovery point
// RecoveryForwarded is saved before anything is sent, so that no later
// holder of the key forwards it again unchecked; a retry route saves it
// only when it releases the key after an unknown outcome. The forward does not depend on the client: a
// client that goes away or stops reading cancels nothing, and the answer is
// stored for its retry. Responses stream to the client
// (idem.StreamResponse) and are stored up to MaxStoredBytes.
func (p *Proxy) forwarder(policy Policy) http.Handler {
	outcome := outcomePolicy(policy, p.cfg.ReleaseServerErrors)
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			p.rewrite(pr)
			a := attemptOf(pr.In)
			for _, name := range []string{idem.HeaderKey, "X-Idempotency-Key"} {
				keys := pr.Out.Header.Values(name)
				delete(pr.Out.Header, name)
				if name == idem.HeaderKey {
					keys = []string{a.key} // the first forward's, byte for byte
				}
				if len(keys) > 0 && !p.cfg.DropKey {
					pr.Out.Header[strings.ToLower(name)] = keys
				}
			}
			pr.Out.GetBody = nil
			pr.Out = pr.Out.WithContext(httptrace.WithClientTrace(pr.Out.Context(), &httptrace.ClientTrace{
				WroteHeaders: func() { a.sent.Store(true) },
			}))
		},
		Transport: p.cfg.Transport,
		ModifyResponse: func(resp *http.Response) error {
			if saysNothing(resp) {
				return &statusError{resp.StatusCode}
			}
			ctx := resp.Request.Context()
			a := attemptOf(resp.Request)
			p.cfg.Forwards.Forward(ctx, a.route, ForwardAnswered)
			if outcome(resp.StatusCode) == idem.OutcomeRelease {
				// The upstream says it did not process the request: the
				// retry may be forwarded, whatever the policy.
				if err := p.save(ctx, a, RecoveryNotProcessed); err != nil {
					p.cfg.Idem.Logger.ErrorContext(ctx, "idemproxy: could not record that the upstream did not process the request; a retry is treated as after an unknown outcome",
						"upstream_status", resp.StatusCode, "err", err)
				}
			}
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			p.forwardFailed(w, r, policy, err)
		},
		ErrorLog: slog.NewLogLogger(p.cfg.Idem.Logger.Handler(), slog.LevelWarn),
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
				p.cfg.Idem.Logger.WarnContext(r.Context(), "idemproxy: the upstream's response broke off after its status was sent; the key keeps the status, not the body",
					"method", r.Method, "path", r.URL.Path)
			}
		}()
		if !p.begin(w, r, policy) {
			return
		}
		if policy == PolicyProbe && p.probeFirst(w, r) {
			return
		}
		a := attemptOf(r)
		if policy != PolicyRetry {
			// Before anything is sent: a later holder of the key must know
			// that this forward may have reached the upstream. The claim
			// of a new key saved it already (see keyStore).
			if !keyLeaseOf(r.Context()).forwarded {
				if err := p.save(r.Context(), a, RecoveryForwarded); err != nil {
					p.notForwarded(w, r, err)
					return
				}
			}
			a.point = RecoveryForwarded
		}
		// Writes to the client end well before the lease does: a client that
		// stops reading is written to no more (see idem.StreamResponse), and
		// the rest of the answer is stored for its retry.
		http.NewResponseController(a.client).SetWriteDeadline(time.Now().Add(p.writeBound()))
		ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), p.cfg.UpstreamTimeout)
		defer cancel()
		rp.ServeHTTP(w, r.WithContext(ctx))
	})
}

// writeBound is how long after a forward starts the client may be written
// to: the upstream timeout, and half the time the lease has beyond it.
func (p *Proxy) writeBound() time.Duration {
	return p.cfg.UpstreamTimeout + (p.cfg.Idem.LockTimeout-p.cfg.UpstreamTimeout)/2
}

// begin reads what the key's recovery point says of earlier forwards and
// decides whether this request may be forwarded. On a hold route, a key
// whose earlier forward may have reached the upstream is answered with the
// outcome-unknown problem, stored under the key, and never forwarded again.
// It reports whether the request goes on; if not, it has answered w.
func (p *Proxy) begin(w http.ResponseWriter, r *http.Request, policy Policy) bool {
	ctx := r.Context()
	a := attemptOf(r)
	pr, err := p.prior(ctx, keyLeaseOf(ctx))
	if err != nil {
		p.logger(r, policy).ErrorContext(ctx, "idemproxy: could not read the key's recovery point; nothing was sent", "err", err)
		idem.WriteProblem(w, idem.ProblemUnavailable.Kind().New(p.cfg.Idem.ProblemTypeBase,
			"The idempotency store did not answer; the request was not sent upstream. Retry with the same key after Retry-After."), 1)
		return false
	}
	a.prior, a.point, a.status = pr, pr.point, pr.status
	if pr.key != "" {
		a.key = pr.key
	}
	if policy != PolicyHold || !pr.mayHaveReached() {
		return true
	}
	p.logger(r, policy).WarnContext(ctx, "idemproxy: hold: an earlier forward of the key may have reached the upstream; holding it, nothing is sent", "recovery_point", pr.point)
	p.cfg.Forwards.Forward(ctx, a.route, ForwardHeld)
	prob := outcomeUnknownKind.New(p.cfg.Idem.ProblemTypeBase, "")
	prob.Status = http.StatusBadGateway
	prob.Detail = "An earlier request with this key was sent to the upstream service, and its answer was not recorded (the proxy that sent it stopped, or could not store the answer), so whether it took effect is unknown. " + holdAdvice
	idem.WriteProblem(w, prob, 0)
	return false
}

// holdAdvice ends every held answer.
const holdAdvice = "The key is held: every retry with it gets this answer, and nothing is sent upstream, until an operator resolves the key. Never retry with a new key unless you know that the operation did not happen."

// notForwarded answers a request whose recovery point RecoveryForwarded
// could not be saved: nothing was sent.
func (p *Proxy) notForwarded(w http.ResponseWriter, r *http.Request, err error) {
	ctx := r.Context()
	p.logger(r, attemptOf(r).policy).ErrorContext(ctx, "idemproxy: could not save the key's recovery point before the forward; nothing was sent", "err", err)
	if errors.Is(err, idemstore.ErrLeaseLost) {
		idem.WriteProblem(w, idem.ProblemKeyInFlight.Kind().New(p.cfg.Idem.ProblemTypeBase,
			"Another request took this key over; nothing was sent upstream for this one. Retry with the same key to get its result."), 1)
		return
	}
	// The store did not answer, or (idemredis with MinReplicas) answered
	// that too few replicas had the point and undid it.
	idem.WriteProblem(w, idem.ProblemUnavailable.Kind().New(p.cfg.Idem.ProblemTypeBase,
		"The idempotency store did not confirm that it recorded the request as about to be sent, so it was not sent upstream. Retry with the same key after Retry-After."), 1)
}

// logger is the logger of a request on a key route.
func (p *Proxy) logger(r *http.Request, policy Policy) *slog.Logger {
	log := p.cfg.Idem.Logger.With("method", r.Method, "path", r.URL.Path, "policy", string(policy))
	if scope, ok := idem.ScopeFromContext(r.Context()); ok {
		log = log.With("client_id", scope.ClientID, "key_digest", keyspec.Digest(scope.Key))
	}
	return log
}

// attemptOf returns the attempt that ServeHTTP put in a request's context.
func attemptOf(r *http.Request) *attempt { return r.Context().Value(attemptKey{}).(*attempt) }

// forwardFailed answers a forward that got no usable answer.
func (p *Proxy) forwardFailed(w http.ResponseWriter, r *http.Request, policy Policy, err error) {
	ctx := r.Context()
	a := attemptOf(r)
	log := p.logger(r, policy)
	var se *statusError
	switch {
	case errors.As(err, &se):
		status := http.StatusBadGateway
		if se.status == http.StatusGatewayTimeout {
			status = http.StatusGatewayTimeout
		}
		log.WarnContext(ctx, "idemproxy: outcome unknown: the upstream's answer says nothing about the request", "upstream_status", se.status)
		p.outcomeUnknown(w, r, policy, status, fmt.Sprintf("The request was sent to the upstream service, and it, or a gateway in front of it, answered %d, which does not say whether the request was processed", se.status))
	case !a.sent.Load():
		log.WarnContext(ctx, "idemproxy: upstream unreachable; the request was not sent", "err", err)
		p.cfg.Forwards.Forward(ctx, a.route, ForwardNotSent)
		if serr := p.save(ctx, a, RecoveryNotProcessed); serr != nil && policy == PolicyHold {
			log.ErrorContext(ctx, "idemproxy: could not record that the request was not sent; the key will be held", "err", serr)
			idem.WriteProblem(w, kindOf(ProblemUpstreamUnavailable).New(p.cfg.Idem.ProblemTypeBase,
				"The upstream service could not be reached and the request was not sent to it, but the idempotency store failed to record that: a retry with this key is answered as an unknown outcome until an operator releases the key."), 0)
			keyLeaseOf(ctx).keep.Store(true)
			return
		}
		idem.WriteProblem(w, kindOf(ProblemUpstreamUnavailable).New(p.cfg.Idem.ProblemTypeBase,
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
	a := attemptOf(r)
	p.cfg.Forwards.Forward(r.Context(), a.route, ForwardOutcomeUnknown)
	prob := outcomeUnknownKind.New(p.cfg.Idem.ProblemTypeBase, "")
	prob.Status = status
	retryAfter := 0
	switch policy {
	case PolicyProbe:
		prob.Detail = what + ", so whether it took effect is unknown. Retry with the same Idempotency-Key after Retry-After, never a new one: the retry asks the upstream service what became of the request, and gets its response if it took effect, or is sent upstream again if the upstream never received it."
		retryAfter = 1
		if _, keep := p.markUnknown(r.Context(), a, status); keep {
			prob.Detail = what + ", so whether it took effect is unknown. Retry with the same Idempotency-Key after Retry-After, never a new one: the retry asks the upstream service what became of the request before anything is sent again."
			retryAfter = int(p.cfg.Idem.LockTimeout.Round(time.Second) / time.Second)
		}
	case PolicyHold:
		prob.Detail = what + ", so whether it took effect is unknown. " + holdAdvice
	default:
		// The key is released for the retry: keep the field value it was
		// forwarded with, for the retry's forward.
		if err := p.save(r.Context(), a, RecoveryForwarded); err != nil {
			p.logger(r, policy).ErrorContext(r.Context(), "idemproxy: could not keep the key's field value; the retry is forwarded with its own", "err", err)
		}
		prob.Detail = what + ", so whether it took effect is unknown. Retry with the same Idempotency-Key, never a new one: the retry is sent upstream again with the same key."
		if p.cfg.DropKey {
			prob.Detail = what + ", so whether it took effect is unknown. A retry with the same Idempotency-Key is sent upstream again, and the upstream does not receive the key: it may repeat the operation."
		}
		retryAfter = 1
	}
	idem.WriteProblem(w, prob, retryAfter)
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}
