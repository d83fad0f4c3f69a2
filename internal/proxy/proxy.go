package proxy

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/idemkit/idem"
)

// Defaults of Config.
const (
	UpstreamTimeoutDefault = 30 * time.Second
	LockTimeoutDefault     = 60 * time.Second
	ProblemTypeBaseDefault = "/idemproxy/problems/"
	MaxStoredBytesDefault  = 1 << 20
	MaxPreferWaitDefault   = 10 * time.Second
)

// NoPreferWait, as Config.MaxPreferWait, ignores Prefer: wait: duplicates
// get 409 at once.
const NoPreferWait = -1

// Config configures a Proxy.
type Config struct {
	// Upstream is the base URL requests are forwarded to. Required.
	Upstream *url.URL

	// Store keeps the keys. Required.
	Store idem.Store

	// Identity returns the client of a request. Required.
	Identity Identity

	// Routes are the requests that must carry an Idempotency-Key; every
	// other request passes through untouched. Defaults to every POST and
	// every PATCH.
	Routes []Route

	// DropKey stops forwarding the Idempotency-Key header upstream. Defaults
	// to false: the key is forwarded, so that an upstream that honours keys
	// deduplicates too.
	DropKey bool

	// DefaultPolicy applies to routes without a policy of their own:
	// PolicyRetry or PolicyHold (PolicyProbe is only ever a route's own).
	// Defaults to PolicyRetry when the key is forwarded and PolicyHold when
	// DropKey is set.
	DefaultPolicy Policy

	// ProbeURL is the status URL template of PolicyProbe routes that have
	// none of their own: an absolute http or https URL, or a path under
	// Upstream, with "{key}" in its path or query, such as
	// "/v1/requests/{key}". "{key}" becomes the Idempotency-Key field value
	// as the client sent it and the upstream received it (a quoted
	// structured-field string keeps its quotes), escaped for where it
	// stands. The upstream must keep the
	// probe contract (ProbeStatusHeader, docs/proxy.md). Defaults to none.
	ProbeURL string

	// ProbeTimeout bounds a probe, to the end of the status URL's answer.
	// LockTimeout must be longer than UpstreamTimeout and ProbeTimeout
	// together when a route probes. Defaults to ProbeTimeoutDefault (5 s).
	ProbeTimeout time.Duration

	// ProbeHeaders are the request headers copied from the client's retry
	// onto its probe, so that the upstream answers for the client whose key
	// it is, as it would for the request itself. Defaults to
	// Authorization.
	ProbeHeaders []string

	// StoreServerErrors stores the upstream's own 5xx answers (500, 501,
	// 505 and up) and replays them, as Stripe does, instead of releasing the
	// key so that a retry is forwarded again. 502, 503 and 504 are never the
	// upstream's answer to the request (see Policy). Defaults to false.
	StoreServerErrors bool

	// UpstreamTimeout bounds a forward of a key route, from sending the
	// request to the end of the response. Defaults to
	// UpstreamTimeoutDefault (30 s).
	UpstreamTimeout time.Duration

	// LockTimeout is how long a key's lease lasts before another request may
	// take it over; it must be longer than UpstreamTimeout, so that a
	// forward in progress is never overtaken. Defaults to
	// LockTimeoutDefault (60 s).
	LockTimeout time.Duration

	// Retention is how long keys are kept. Defaults to idem.RetentionDefault.
	Retention time.Duration

	// MaxBodyBytes is the largest request body accepted on a key route.
	// Defaults to idem.MaxBodyBytesDefault (1 MiB).
	MaxBodyBytes int64

	// MaxStoredBytes is the longest response body stored for replay.
	// Responses are streamed to the client whatever their size; a longer one
	// is stored as the problem idempotency-response-not-retained with its
	// status and Location, which retries get instead of a second forward.
	// Defaults to MaxStoredBytesDefault (1 MiB).
	MaxStoredBytes int64

	// MaxPreferWait is the longest a duplicate that arrives while its key is
	// in flight waits for the first request's response when it sends
	// Prefer: wait=N (idem.Config.MaxPreferWait). Defaults to
	// MaxPreferWaitDefault (10 s); NoPreferWait turns waiting off.
	MaxPreferWait time.Duration

	// ReplayHeaders are upstream response headers stored and replayed in
	// addition to Content-Type, Content-Language and Location. Defaults to
	// none.
	ReplayHeaders []string

	// TrustForwarded keeps the X-Forwarded-For and Forwarded headers of
	// incoming requests and appends to them. Set it only behind a load
	// balancer that sets them. Defaults to false: they are replaced.
	TrustForwarded bool

	// ProblemTypeBase prefixes the type URIs of problem documents. When it
	// is a path, the proxy serves the problem pages there (GET) instead of
	// forwarding it. Defaults to ProblemTypeBaseDefault.
	ProblemTypeBase string

	// Transport sends requests upstream. It must not retry requests on its
	// own. Defaults to a clone of http.DefaultTransport without
	// compression.
	Transport http.RoundTripper

	// Logger receives forwarding failures. Defaults to slog.Default().
	Logger *slog.Logger

	// Metrics receives idem's results. Defaults to none.
	Metrics idem.Metrics

	// Forwards receives the result of every forward of a key route.
	// Defaults to none.
	Forwards ForwardMetrics

	// Probes receives the result of every probe. Defaults to none.
	Probes ProbeMetrics
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

func (c *Config) withDefaults() *Config {
	out := Config{}
	if c != nil {
		out = *c
	}
	if out.Routes == nil {
		out.Routes = defaultRoutes
	}
	if out.DefaultPolicy == "" {
		out.DefaultPolicy = PolicyRetry
		if out.DropKey {
			out.DefaultPolicy = PolicyHold
		}
	}
	if out.UpstreamTimeout == 0 {
		out.UpstreamTimeout = UpstreamTimeoutDefault
	}
	if out.LockTimeout == 0 {
		out.LockTimeout = LockTimeoutDefault
	}
	switch out.MaxPreferWait {
	case 0:
		out.MaxPreferWait = MaxPreferWaitDefault
	case NoPreferWait:
		out.MaxPreferWait = 0
	}
	if out.MaxStoredBytes == 0 {
		out.MaxStoredBytes = MaxStoredBytesDefault
	}
	if out.ProblemTypeBase == "" {
		out.ProblemTypeBase = ProblemTypeBaseDefault
	}
	if out.Transport == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.DisableCompression = true // pass bodies through byte for byte
		out.Transport = t
	}
	if out.Logger == nil {
		out.Logger = slog.Default()
	}
	if out.Forwards == nil {
		out.Forwards = noForwardMetrics{}
	}
	if out.ProbeTimeout == 0 {
		out.ProbeTimeout = ProbeTimeoutDefault
	}
	if out.ProbeHeaders == nil {
		out.ProbeHeaders = []string{"Authorization"}
	}
	if out.Probes == nil {
		out.Probes = noProbeMetrics{}
	}
	return &out
}

func (c *Config) validate() error {
	switch {
	case c.Upstream == nil || c.Upstream.Host == "" || (c.Upstream.Scheme != "http" && c.Upstream.Scheme != "https"):
		return errors.New("proxy: Config.Upstream must be an absolute http or https URL")
	case c.Store == nil:
		return errors.New("proxy: Config.Store is required")
	case c.Identity == nil:
		return errors.New("proxy: Config.Identity is required")
	case c.UpstreamTimeout < 0 || c.MaxStoredBytes < 0 || c.ProbeTimeout < 0:
		return errors.New("proxy: Config.UpstreamTimeout, ProbeTimeout and MaxStoredBytes must not be negative")
	case c.LockTimeout <= c.UpstreamTimeout:
		return fmt.Errorf("proxy: the lock timeout (%s) must be longer than the upstream timeout (%s), or a forward in progress could be taken over and sent twice", c.LockTimeout, c.UpstreamTimeout)
	}
	switch c.DefaultPolicy {
	case PolicyRetry, PolicyHold:
	case PolicyProbe:
		return errors.New("proxy: probe is no default policy: it is sound only for routes whose upstream keeps the probe contract; name it on those routes")
	default:
		return fmt.Errorf("proxy: unknown default policy %q: want retry or hold", c.DefaultPolicy)
	}
	if c.ProbeURL != "" {
		if _, err := parseProbeURL(c.ProbeURL); err != nil {
			return fmt.Errorf("proxy: %w", err)
		}
	}
	for _, rt := range c.Routes {
		if err := rt.validate(); err != nil {
			return fmt.Errorf("proxy: %w", err)
		}
		if rt.Policy != PolicyProbe {
			continue
		}
		switch {
		case rt.ProbeURL == "" && c.ProbeURL == "":
			return fmt.Errorf("proxy: route %s: %w", rt, errNoProbeURL)
		case c.DropKey:
			return fmt.Errorf("proxy: route %s: probe needs the key forwarded, so that the upstream can answer for it; it does not work with DropKey", rt)
		case c.LockTimeout <= c.UpstreamTimeout+c.ProbeTimeout:
			return fmt.Errorf("proxy: the lock timeout (%s) must be longer than the upstream timeout (%s) and the probe timeout (%s) together, or a retry that probes and forwards could be taken over", c.LockTimeout, c.UpstreamTimeout, c.ProbeTimeout)
		}
	}
	return nil
}

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
		ErrorLog:      slog.NewLogLogger(c.Logger.Handler(), slog.LevelWarn),
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			c.Logger.WarnContext(r.Context(), "idemproxy: forward failed", "method", r.Method, "path", r.URL.Path, "err", err)
			idem.WriteProblem(w, kindOf(ProblemUpstreamFailed).New(c.ProblemTypeBase,
				"The upstream service could not be reached, or failed before it answered."), 0)
		},
	}
	for _, policy := range []Policy{PolicyRetry, PolicyHold, PolicyProbe} {
		store := c.Store
		if policy == PolicyProbe {
			store = probeStore{c.Store}
		}
		mw, err := idem.New(store, &idem.Config{
			ClientID:        c.Identity,
			Require:         func(*http.Request) bool { return true }, // only key routes reach it
			Mode:            idem.ModeTwoPhase,
			LockTimeout:     c.LockTimeout,
			Retention:       c.Retention,
			MaxBodyBytes:    c.MaxBodyBytes,
			MaxPreferWait:   c.MaxPreferWait,
			ReplayHeaders:   c.ReplayHeaders,
			Outcome:         outcomePolicy(policy, c.StoreServerErrors),
			ProblemTypeBase: c.ProblemTypeBase,
			Logger:          c.Logger,
			Metrics:         c.Metrics,
		})
		if err != nil {
			return nil, fmt.Errorf("proxy: %w", err)
		}
		p.guarded[policy] = mw.Wrap(p.forwarder(policy))
	}
	if strings.HasPrefix(c.ProblemTypeBase, "/") {
		p.problems = problemPages(c.Retention)
	}
	return p, nil
}

// outcomePolicy is idem's outcome policy for a route's policy. The
// proxy's own answers: 503 (never sent) releases the key; 502 and 504 (an
// unknown outcome) are stored under PolicyHold and released under
// PolicyRetry and PolicyProbe (whose keys keep their recovery point). A 409 is released: an upstream that honours keys has the
// same key in flight. The upstream's other answers follow idem's
// DefaultOutcomePolicy, or StoreServerErrorsPolicy when storeServerErrors
// is set: the statuses by which it says it did not process the request are
// released either way.
func outcomePolicy(policy Policy, storeServerErrors bool) idem.OutcomePolicy {
	base := idem.DefaultOutcomePolicy
	if storeServerErrors {
		base = idem.StoreServerErrorsPolicy
	}
	return func(status int) idem.Outcome {
		switch status {
		case http.StatusConflict, http.StatusServiceUnavailable:
			return idem.OutcomeRelease
		case http.StatusBadGateway, http.StatusGatewayTimeout:
			if policy == PolicyHold {
				return idem.OutcomeStore
			}
			return idem.OutcomeRelease
		}
		return base(status)
	}
}

// ServeHTTP routes a request: problem pages, key routes through idem, and
// everything else straight upstream.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if p.problems != nil && r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, p.cfg.ProblemTypeBase) {
		p.problems.ServeHTTP(w, r)
		return
	}
	for i, rt := range p.routes {
		if rt.matches(r) {
			a := &attempt{route: rt.label(), probe: p.probes[i]}
			p.guarded[rt.Policy].ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), attemptKey{}, a)))
			return
		}
	}
	p.pass.ServeHTTP(w, r)
}

// rewrite makes the outgoing request: the upstream's URL, hop-by-hop
// headers dropped (httputil.ReverseProxy drops them before Rewrite), and
// X-Forwarded-For, X-Forwarded-Host, X-Forwarded-Proto and Forwarded set.
func (p *Proxy) rewrite(pr *httputil.ProxyRequest) {
	if p.cfg.TrustForwarded {
		pr.Out.Header["X-Forwarded-For"] = pr.In.Header["X-Forwarded-For"]
		pr.Out.Header["Forwarded"] = pr.In.Header["Forwarded"]
	}
	pr.SetURL(p.cfg.Upstream)
	pr.SetXForwarded()
	pr.Out.Header.Add("Forwarded", forwardedElement(pr.In))
}

// forwardedElement is this hop's element of an RFC 7239 Forwarded header.
func forwardedElement(r *http.Request) string {
	var b strings.Builder
	if host, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		if strings.Contains(host, ":") {
			host = "[" + host + "]"
		}
		fmt.Fprintf(&b, "for=%q;", host)
	}
	if r.Host != "" && !strings.ContainsAny(r.Host, "\"\\") {
		fmt.Fprintf(&b, "host=%q;", r.Host)
	}
	proto := "http"
	if r.TLS != nil {
		proto = "https"
	}
	b.WriteString("proto=" + proto)
	return b.String()
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
