package proxy

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemstore"
)

// Defaults of Config.
const (
	UpstreamTimeoutDefault = 30 * time.Second
	LockTimeoutDefault     = 60 * time.Second
	ProblemTypeBaseDefault = "/idemproxy/problems/"
	MaxStoredBytesDefault  = 1 << 20
	MaxPreferWaitDefault   = 10 * time.Second
	// IdleConnsDefault is how many idle connections to the upstream the
	// default Transport keeps.
	IdleConnsDefault = 100
)

// NoPreferWait, as Config.Idem.MaxPreferWait, ignores Prefer: wait:
// duplicates get 409 at once.
const NoPreferWait = -1

// Config configures a Proxy.
type Config struct {
	// Upstream is the base URL requests are forwarded to. Required.
	Upstream *url.URL

	// Store keeps the keys. Required.
	Store idemstore.Store

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
	// Name PolicyRetry, here or on a route, only for an upstream that
	// honours the forwarded Idempotency-Key: it forwards a key again after
	// an unknown outcome. Defaults to PolicyHold, which never forwards a
	// key twice, as an API that cannot change does not deduplicate by key.
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
	// Idem.LockTimeout must be longer than UpstreamTimeout and ProbeTimeout
	// together when a route probes. Defaults to ProbeTimeoutDefault (5 s).
	ProbeTimeout time.Duration

	// ProbeHeaders are the request headers copied from the client's retry
	// onto its probe, so that the upstream answers for the client whose key
	// it is, as it would for the request itself. Defaults to
	// Authorization.
	ProbeHeaders []string

	// ReleaseServerErrors releases the key on the upstream's own 5xx
	// answers (500, 501, 505 and up) on retry and probe routes, so that a
	// retry is forwarded again with the same key, instead of storing and
	// replaying them as Stripe does. Hold routes always store them: their
	// upstream could repeat the operation. 502 and 504, and 503 without
	// Retry-After, are never taken for the upstream's answer to the request
	// (see Policy); a 503 with Retry-After is passed on and releases the
	// key. Defaults to false: 5xx answers are stored.
	ReleaseServerErrors bool

	// UpstreamTimeout bounds a forward of a key route, from sending the
	// request to the end of the response. Defaults to
	// UpstreamTimeoutDefault (30 s).
	UpstreamTimeout time.Duration

	// Idem holds the idem settings the proxy's middleware and purger are
	// built from: retention, lock timeout, body limit, Prefer: wait, replay
	// headers, problem type base, logger, metrics, clock. ClientID,
	// Require, Mode and Outcome are set by the proxy: ClientID from
	// Identity, Require to every request of a key route, Mode to
	// idem.ModeTwoPhase, Outcome from each route's policy. The proxy reads
	// some of them itself, and some of its defaults differ from idem's:
	//
	//   - LockTimeout is how long a key's lease lasts before another
	//     request may take it over; it must be longer than
	//     UpstreamTimeout, so that a forward in progress is never
	//     overtaken. Defaults to LockTimeoutDefault (60 s).
	//   - MaxPreferWait is the longest a duplicate that arrives while its
	//     key is in flight waits for the first request's response when it
	//     sends Prefer: wait=N. Defaults to MaxPreferWaitDefault (10 s);
	//     NoPreferWait turns waiting off.
	//   - ProblemTypeBase prefixes the type URIs of problem documents; when
	//     it is a path, the proxy serves the problem pages there (GET)
	//     instead of forwarding it. Defaults to ProblemTypeBaseDefault.
	//   - ReplayHeaders are upstream response headers stored and replayed
	//     in addition to Content-Type, Content-Language and Location.
	//   - Retention is published on the problem pages.
	//   - Logger receives forwarding failures too.
	//
	// MaxBodyBytes bounds the request body on a key route. The other fields
	// default as in idem.Config.
	Idem idem.Config

	// MaxStoredBytes is the longest response body stored for replay.
	// Responses are streamed to the client whatever their size; a longer one
	// is stored as the problem idempotency-response-not-retained with its
	// status and Location, which retries get instead of a second forward.
	// Defaults to MaxStoredBytesDefault (1 MiB).
	MaxStoredBytes int64

	// TrustForwarded keeps the X-Forwarded-For and Forwarded headers of
	// incoming requests and appends to them. Set it only behind a load
	// balancer that sets them. Defaults to false: they are replaced.
	TrustForwarded bool

	// Transport sends requests upstream. It must not retry requests on its
	// own. Defaults to a clone of http.DefaultTransport without
	// compression that keeps up to IdleConnsDefault idle connections to
	// the upstream (http.DefaultTransport keeps 2 per host, so that a
	// proxy with more requests in flight would dial and close a
	// connection for most of them).
	Transport http.RoundTripper

	// Forwards receives the result of every forward of a key route.
	// Defaults to none.
	Forwards ForwardMetrics

	// Probes receives the result of every probe. Defaults to none.
	Probes ProbeMetrics
}

func (c *Config) withDefaults() *Config {
	out := Config{}
	if c != nil {
		out = *c
	}
	if out.Routes == nil {
		out.Routes = defaultRoutes
	}
	if out.DefaultPolicy == "" {
		out.DefaultPolicy = PolicyHold
	}
	if out.UpstreamTimeout == 0 {
		out.UpstreamTimeout = UpstreamTimeoutDefault
	}
	if out.Idem.LockTimeout == 0 {
		out.Idem.LockTimeout = LockTimeoutDefault
	}
	switch out.Idem.MaxPreferWait {
	case 0:
		out.Idem.MaxPreferWait = MaxPreferWaitDefault
	case NoPreferWait:
		out.Idem.MaxPreferWait = 0
	}
	if out.MaxStoredBytes == 0 {
		out.MaxStoredBytes = MaxStoredBytesDefault
	}
	if out.Idem.ProblemTypeBase == "" {
		out.Idem.ProblemTypeBase = ProblemTypeBaseDefault
	}
	if out.Transport == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.DisableCompression = true // pass bodies through byte for byte
		t.MaxIdleConns = max(t.MaxIdleConns, IdleConnsDefault)
		t.MaxIdleConnsPerHost = IdleConnsDefault
		out.Transport = t
	}
	if out.Idem.Logger == nil {
		out.Idem.Logger = slog.Default()
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

// Validate reports whether c, with its defaults, makes a proxy, apart
// from Store, which New requires too: binaries call it before they open or
// migrate a store.
func (c *Config) Validate() error {
	return c.withDefaults().validateSettings()
}

func (c *Config) validate() error {
	if c.Store == nil {
		return errors.New("proxy: Config.Store is required")
	}
	return c.validateSettings()
}

func (c *Config) validateSettings() error {
	switch {
	case c.Upstream == nil || c.Upstream.Host == "" || (c.Upstream.Scheme != "http" && c.Upstream.Scheme != "https"):
		return errors.New("proxy: Config.Upstream must be an absolute http or https URL")
	case c.Identity == nil:
		return errors.New("proxy: Config.Identity is required")
	case c.UpstreamTimeout < 0 || c.MaxStoredBytes < 0 || c.ProbeTimeout < 0:
		return errors.New("proxy: Config.UpstreamTimeout, ProbeTimeout and MaxStoredBytes must not be negative")
	case c.Idem.LockTimeout <= c.UpstreamTimeout:
		return fmt.Errorf("proxy: the lock timeout (%s) must be longer than the upstream timeout (%s), or a forward in progress could be taken over and sent twice", c.Idem.LockTimeout, c.UpstreamTimeout)
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
		case c.Idem.LockTimeout <= c.UpstreamTimeout+c.ProbeTimeout:
			return fmt.Errorf("proxy: the lock timeout (%s) must be longer than the upstream timeout (%s) and the probe timeout (%s) together, or a retry that probes and forwards could be taken over", c.Idem.LockTimeout, c.UpstreamTimeout, c.ProbeTimeout)
		}
	}
	return nil
}
