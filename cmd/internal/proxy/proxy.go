package proxy

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemstore"
)

// Proxy is a reverse proxy that gives an upstream the Idempotency-Key
// contract: requests on key routes go through idem's middleware in
// two-phase mode, then to the upstream; every other request passes through.
type Proxy struct {
	cfg      *Config
	routes   []Route
	probes   []probeURL // per route, for probe routes
	guarded  map[Policy]http.Handler
	pass     *httputil.ReverseProxy
	problems http.Handler
}

// New returns a proxy. cfg.Upstream, cfg.Store and cfg.Identity are
// required.
func New(cfg *Config) (*Proxy, error) {
	c := cfg.withDefaults()
	if err := c.validate(); err != nil {
		return nil, err
	}
	p := &Proxy{cfg: c, routes: slices.Clone(c.Routes), probes: make([]probeURL, len(c.Routes)), guarded: map[Policy]http.Handler{}}
	for i, rt := range p.routes {
		if rt.Policy == "" {
			p.routes[i].Policy = c.DefaultPolicy
		}
		if rt.Policy == PolicyProbe {
			tmpl := cmp.Or(rt.ProbeURL, c.ProbeURL)
			t, _ := parseProbeURL(tmpl) // validated
			p.probes[i] = t.resolve(c.Upstream)
		}
	}
	p.pass = &httputil.ReverseProxy{
		Rewrite:       p.rewrite,
		Transport:     c.Transport,
		FlushInterval: -1,
		ErrorLog:      slog.NewLogLogger(c.Idem.Logger.Handler(), slog.LevelWarn),
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			c.Idem.Logger.WarnContext(r.Context(), "idemproxy: forward failed", "method", r.Method, "path", r.URL.Path, "err", err)
			idem.WriteProblem(w, kindOf(ProblemUpstreamFailed).New(c.Idem.ProblemTypeBase,
				"The upstream service could not be reached, or failed before it answered."), 0)
		},
	}
	if _, ok := c.Store.(idemstore.RecoveryStore); !ok {
		return nil, errNoRecoveryStore
	}
	for _, policy := range []Policy{PolicyRetry, PolicyHold, PolicyProbe} {
		ic := p.IdemConfig()
		ic.Outcome = outcomePolicy(policy, c.ReleaseServerErrors)
		mw, err := idem.New(keyStore{c.Store}, ic)
		if err != nil {
			return nil, fmt.Errorf("proxy: %w", err)
		}
		p.guarded[policy] = mw.Wrap(p.forwarder(policy))
	}
	if strings.HasPrefix(c.Idem.ProblemTypeBase, "/") {
		p.problems = problemPages(c.Idem.Retention)
	}
	return p, nil
}

// IdemConfig returns the idem configuration the proxy's middleware is built
// from: Config.Idem with the proxy's defaults, its client identity, and
// two-phase mode on every request of a key route (each route's policy sets
// its own Outcome). Build the purger from it, so that it keeps the proxy's
// retention, lock timeout and clock.
func (p *Proxy) IdemConfig() *idem.Config {
	ic := p.cfg.Idem
	ic.ClientID = p.cfg.Identity
	ic.Require = func(*http.Request) bool { return true } // only key routes reach it
	ic.Mode = idem.ModeTwoPhase
	return &ic
}

// outcomePolicy is idem's outcome policy for a route's policy: which
// answers are stored under the key and replayed, and which release it for
// a retry to be forwarded.
//
//   - The proxy's own 503 (never sent) and an upstream's 503 with
//     Retry-After release the key: nothing was processed.
//   - 502 and 504 (an unknown outcome) are stored under PolicyHold, and
//     released under PolicyRetry and PolicyProbe, whose upstream honours
//     the forwarded key.
//   - A 409 is released: an upstream that honours keys has the same key in
//     flight, and one that does not refused the request.
//   - The upstream's other 5xx are stored and replayed, as Stripe does;
//     releaseServerErrors releases them on retry and probe routes, never on
//     hold routes, whose upstream could repeat the operation.
//   - The statuses by which the upstream says it did not process the
//     request (idem.NotProcessed) are released; every other answer is
//     stored.
func outcomePolicy(policy Policy, releaseServerErrors bool) idem.OutcomePolicy {
	return func(status int) idem.Outcome {
		switch {
		case status == http.StatusConflict, status == http.StatusServiceUnavailable, idem.NotProcessed(status):
			return idem.OutcomeRelease
		case status == http.StatusBadGateway, status == http.StatusGatewayTimeout:
			if policy == PolicyHold {
				return idem.OutcomeStore
			}
			return idem.OutcomeRelease
		case status >= 500 && releaseServerErrors && policy != PolicyHold:
			return idem.OutcomeRelease
		}
		return idem.OutcomeStore
	}
}

// ServeHTTP routes a request: problem pages, key routes through idem, and
// everything else straight upstream. A method that differs from a standard
// one only in case (post) is taken as that method, as many upstream
// frameworks take it, and forwarded so; a request-target other than an
// origin-form path is refused, except "*" for OPTIONS (RFC 9112, section
// 3.2).
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	r.Method = normalMethod(r.Method)
	if !strings.HasPrefix(r.URL.Path, "/") && !(r.Method == http.MethodOptions && r.RequestURI == "*") {
		idem.WriteProblem(w, kindOf(ProblemBadTarget).New(p.cfg.Idem.ProblemTypeBase,
			fmt.Sprintf("The request-target must be a path starting with /; %s %q is not forwarded.", r.Method, r.RequestURI)), 0)
		return
	}
	if p.problems != nil && r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, p.cfg.Idem.ProblemTypeBase) {
		p.problems.ServeHTTP(w, r)
		return
	}
	for i, rt := range p.routes {
		if rt.matches(r) {
			a := &attempt{route: rt.label(), policy: rt.Policy, probe: p.probes[i], client: w,
				key: strings.TrimSpace(r.Header.Get(idem.HeaderKey))}
			p.guarded[rt.Policy].ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), attemptKey{}, a)))
			return
		}
	}
	p.pass.ServeHTTP(w, r)
}

// normalMethod returns the standard method that m spells in another case,
// else m.
func normalMethod(m string) string {
	switch u := strings.ToUpper(m); u {
	case m:
		return m
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodConnect, http.MethodOptions, http.MethodTrace:
		return u
	}
	return m
}

// rewrite makes the outgoing request: the upstream's URL, hop-by-hop
// headers dropped (httputil.ReverseProxy drops them before Rewrite), and
// X-Forwarded-For, X-Forwarded-Host, X-Forwarded-Proto, Forwarded and
// X-Real-IP set.
func (p *Proxy) rewrite(pr *httputil.ProxyRequest) {
	if p.cfg.TrustForwarded {
		pr.Out.Header["X-Forwarded-For"] = pr.In.Header["X-Forwarded-For"]
		pr.Out.Header["Forwarded"] = pr.In.Header["Forwarded"]
	}
	pr.SetURL(p.cfg.Upstream)
	pr.SetXForwarded()
	pr.Out.Header.Add("Forwarded", forwardedElement(pr.In))
	if !p.cfg.TrustForwarded || len(pr.In.Header.Values("X-Real-Ip")) != 1 {
		// The client's own X-Real-IP is no more to be trusted than its
		// X-Forwarded-For: replaced by the address the proxy sees.
		pr.Out.Header.Del("X-Real-Ip")
		if host, _, err := net.SplitHostPort(pr.In.RemoteAddr); err == nil {
			pr.Out.Header.Set("X-Real-Ip", host)
		}
	}
}

// forwardedElement is this hop's element of an RFC 7239 Forwarded header.
func forwardedElement(r *http.Request) string {
	b := make([]byte, 0, 64)
	if host, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		if strings.Contains(host, ":") {
			host = "[" + host + "]"
		}
		b = append(b, "for="...)
		b = append(strconv.AppendQuote(b, host), ';')
	}
	if r.Host != "" && !strings.ContainsAny(r.Host, "\"\\") {
		b = append(b, "host="...)
		b = append(strconv.AppendQuote(b, r.Host), ';')
	}
	b = append(b, "proto="...)
	if r.TLS != nil {
		return string(append(b, "https"...))
	}
	return string(append(b, "http"...))
}

// problemPages serves idem's problem pages and the proxy's, each with the
// published retention policy, which the draft requires servers to publish.
func problemPages(retention time.Duration) http.Handler {
	if retention == 0 {
		retention = idem.RetentionDefault
	}
	pages := idem.ProblemsHandler(problemKinds...)
	policy := fmt.Sprintf("<p>Retention: this service keeps idempotency keys for %s after their first use. A key older than that is treated as never used.</p>", humanDuration(retention))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		pages.ServeHTTP(sw, r)
		if sw.status == http.StatusOK {
			io.WriteString(w, policy)
		}
	})
}

// humanDuration writes whole days or hours in words, other durations as
// Go does.
func humanDuration(d time.Duration) string {
	switch {
	case d%(24*time.Hour) == 0:
		return fmt.Sprintf("%d %s", d/(24*time.Hour), plural(int(d/(24*time.Hour)), "day", "days"))
	case d%time.Hour == 0:
		return fmt.Sprintf("%d %s", d/time.Hour, plural(int(d/time.Hour), "hour", "hours"))
	}
	return d.String()
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// statusWriter records the status a handler answers with.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (s *statusWriter) WriteHeader(status int) {
	s.status = status
	s.ResponseWriter.WriteHeader(status)
}
