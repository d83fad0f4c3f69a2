package proxy

import (
	"fmt"
	"net/http"
	"strings"
)

// Policy is what the proxy does with a key whose outcome is unknown: the
// request reached the upstream, and the upstream's answer never came back
// (a timeout, a reset connection, or a 502, 503 or 504 from a load balancer
// in between).
type Policy string

const (
	// PolicyRetry releases the key: the client's retry with the same key is
	// forwarded again, with the same Idempotency-Key. Right for upstreams
	// that honour the key, which then do not repeat the operation.
	PolicyRetry Policy = "retry"
	// PolicyHold stores the outcome-unknown answer under the key: every
	// retry with the key gets it again, and nothing is forwarded, until an
	// operator deletes the key or it expires. Right for upstreams that do
	// not honour keys, where a second forward could repeat the operation.
	PolicyHold Policy = "hold"
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
}

// DefaultRoutes are the routes used when none are configured: every POST and
// every PATCH.
var defaultRoutes = []Route{{Method: http.MethodPost, Path: "/*"}, {Method: http.MethodPatch, Path: "/*"}}

// ParseRoute parses "METHOD PATH [POLICY]", such as "POST /v1/*" or
// "POST /v1/refunds hold".
func ParseRoute(s string) (Route, error) {
	f := strings.Fields(s)
	if len(f) < 2 || len(f) > 3 {
		return Route{}, fmt.Errorf("route %q: want \"METHOD /path [retry|hold]\", such as \"POST /v1/*\"", s)
	}
	rt := Route{Method: f[0], Path: f[1]}
	if len(f) == 3 {
		rt.Policy = Policy(f[2])
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
	case "", PolicyRetry, PolicyHold:
	default:
		return fmt.Errorf("route %s %s: unknown outcome-unknown policy %q: want retry or hold", rt.Method, rt.Path, rt.Policy)
	}
	return nil
}

// matches reports whether the route covers a request.
func (rt Route) matches(r *http.Request) bool {
	if r.Method != rt.Method {
		return false
	}
	if prefix, ok := strings.CutSuffix(rt.Path, "*"); ok {
		return strings.HasPrefix(r.URL.Path, prefix)
	}
	return r.URL.Path == rt.Path
}

// String returns the route as ParseRoute reads it.
func (rt Route) String() string {
	if rt.Policy == "" {
		return rt.Method + " " + rt.Path
	}
	return rt.Method + " " + rt.Path + " " + string(rt.Policy)
}
