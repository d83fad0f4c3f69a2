package proxy

import (
	"fmt"
	"net/http"
	"path"
	"strings"
)

// Policy is what the proxy does with a key whose outcome is unknown: the
// request reached the upstream, and the upstream's answer never came back
// (a timeout, a reset connection, or a 502, 503 or 504 from a load balancer
// in between).
type Policy string

const (
	// PolicyRetry releases the key: the client's retry with the same key is
	// forwarded again, with the Idempotency-Key field value the first
	// forward sent. Only for upstreams that honour the key, which then do
	// not repeat the operation.
	PolicyRetry Policy = "retry"
	// PolicyHold never forwards a key twice once a forward may have reached
	// the upstream: it stores the outcome-unknown answer under the key, and
	// a retry that takes over the key of a proxy that died, or whose store
	// failed, mid-forward gets that answer too. Every retry with the key
	// gets it, and nothing is forwarded, until an operator deletes the key
	// or it expires. The default: right for upstreams that do not honour
	// keys, where a second forward could repeat the operation.
	PolicyHold Policy = "hold"
	// PolicyProbe keeps the key unknown and lets the client's retry ask the
	// upstream's status URL what became of the key (see probe.go and
	// docs/proxy.md for the contract): the retry gets the operation's
	// response if the upstream has one, is forwarded if the upstream never
	// received the key, and gets the outcome-unknown problem again
	// otherwise. Only for routes whose upstream keeps its own table of keys
	// and promises that contract; never a default.
	PolicyProbe Policy = "probe"
)

// Route is a set of requests that must carry an Idempotency-Key.
type Route struct {
	// Method is the request method, such as POST.
	Method string
	// Path is a request path; one ending in "*" matches every path that
	// starts with what comes before the "*".
	Path string
	// Policy is applied when the outcome of a forward is unknown. Empty
	// means the proxy's default (see Config.DefaultPolicy).
	Policy Policy
	// ProbeURL is the status URL template of a PolicyProbe route (see
	// Config.ProbeURL). Empty means Config.ProbeURL.
	ProbeURL string
}

// DefaultRoutes are the routes used when none are configured: every POST and
// every PATCH.
var defaultRoutes = []Route{{Method: http.MethodPost, Path: "/*"}, {Method: http.MethodPatch, Path: "/*"}}

// ParseRoute parses "METHOD PATH [POLICY [PROBE-URL]]", such as
// "POST /v1/*", "POST /v1/refunds hold" or
// "POST /v1/refunds probe /v1/requests/{key}".
func ParseRoute(s string) (Route, error) {
	f := strings.Fields(s)
	if len(f) < 2 || len(f) > 4 || (len(f) == 4 && f[2] != string(PolicyProbe)) {
		return Route{}, fmt.Errorf("route %q: want \"METHOD /path [retry|hold|probe [URL]]\", such as \"POST /v1/*\"", s)
	}
	rt := Route{Method: f[0], Path: f[1]}
	if len(f) >= 3 {
		rt.Policy = Policy(f[2])
	}
	if len(f) == 4 {
		rt.ProbeURL = f[3]
	}
	return rt, rt.validate()
}

func (rt Route) validate() error {
	switch rt.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodPut, http.MethodDelete, http.MethodTrace, http.MethodConnect:
		return fmt.Errorf("route %s %s: %s is idempotent by definition and always passes through; key routes are for POST, PATCH and other non-idempotent methods", rt.Method, rt.Path, rt.Method)
	case "":
		return fmt.Errorf("route with path %q has no method", rt.Path)
	}
	if strings.ToUpper(rt.Method) != rt.Method {
		return fmt.Errorf("route %s %s: methods are case-sensitive; write %s", rt.Method, rt.Path, strings.ToUpper(rt.Method))
	}
	if !strings.HasPrefix(rt.Path, "/") {
		return fmt.Errorf("route %s %s: the path must start with /", rt.Method, rt.Path)
	}
	if i := strings.IndexByte(rt.Path, '*'); i >= 0 && i != len(rt.Path)-1 {
		return fmt.Errorf("route %s %s: \"*\" may only end the path", rt.Method, rt.Path)
	}
	switch rt.Policy {
	case "", PolicyRetry, PolicyHold, PolicyProbe:
	default:
		return fmt.Errorf("route %s %s: unknown outcome-unknown policy %q: want retry, hold or probe", rt.Method, rt.Path, rt.Policy)
	}
	if rt.ProbeURL != "" {
		if rt.Policy != PolicyProbe {
			return fmt.Errorf("route %s %s: a probe URL needs the probe policy", rt.Method, rt.Path)
		}
		if _, err := parseProbeURL(rt.ProbeURL); err != nil {
			return fmt.Errorf("route %s %s: %w", rt.Method, rt.Path, err)
		}
	}
	return nil
}

// matches reports whether the route covers a request: its path as sent
// (decoded), or as an upstream that cleans paths reads it, without dot
// segments and repeated slashes, so that /v2/../v1/charges and
// //v1/charges need the key that /v1/charges needs.
func (rt Route) matches(r *http.Request) bool {
	if r.Method != rt.Method {
		return false
	}
	return rt.matchesPath(r.URL.Path) || rt.matchesPath(cleanPath(r.URL.Path))
}

func (rt Route) matchesPath(p string) bool {
	if prefix, ok := strings.CutSuffix(rt.Path, "*"); ok {
		return strings.HasPrefix(p, prefix)
	}
	return p == rt.Path
}

// cleanPath is p with dot segments and repeated slashes removed, and its
// trailing slash kept.
func cleanPath(p string) string {
	c := path.Clean("/" + p)
	if strings.HasSuffix(p, "/") && c != "/" {
		c += "/"
	}
	return c
}

// String returns the route as ParseRoute reads it.
func (rt Route) String() string {
	if rt.ProbeURL != "" {
		return rt.label() + " " + rt.ProbeURL
	}
	return rt.label()
}

// label names the route in metrics and logs: its method, path and policy.
func (rt Route) label() string {
	if rt.Policy == "" {
		return rt.Method + " " + rt.Path
	}
	return rt.Method + " " + rt.Path + " " + string(rt.Policy)
}
