//go:build chaosbroken

package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"

	"github.com/idemkit/idem/cmd/internal/brokenstore"
	"github.com/idemkit/idem/cmd/internal/proxy"
)

// Built only for the chaos harness's tests: IDEM_CHAOS_BREAK breaks the
// proxy on purpose.
//
//   - forward-held turns every hold route into a retry route, so that a
//     key whose forward's outcome is unknown is released and forwarded
//     again to an upstream that does not honour keys: the double execution
//     hold exists to prevent.
//   - probe-unknown-forwards makes the probe routes take every answer of
//     the status URL but "completed" (the upstream still running, a 404
//     without the promise), and a probe that got no answer at all, for
//     "not received": the retry is forwarded although the first forward
//     may have arrived. The proxy's classification is not touched; its
//     transport rewrites those answers into the "not received" one, which
//     has the same effect.
//   - retry-new-key makes each instance forward, on retry routes, a key it
//     forwarded before under a key of its own (the key with a suffix), as a
//     proxy that makes a retried forward unique to get past the upstream's
//     409 for a key in flight would: the upstream, which honours keys,
//     does not know the retry for the same operation and executes it
//     again.
func init() {
	breakConfig = func(cfg *proxy.Config) {
		switch os.Getenv(brokenstore.EnvBreak) {
		case brokenstore.ForwardHeld:
			for i := range cfg.Routes {
				if cfg.Routes[i].Policy == proxy.PolicyHold {
					cfg.Routes[i].Policy = proxy.PolicyRetry
				}
			}
		case brokenstore.ProbeUnknownForwards:
			prefix, _, _ := strings.Cut(cfg.ProbeURL, "{key}")
			cfg.Transport = &probeUnknownForwards{base: baseTransport(cfg), prefix: prefix}
		case brokenstore.RetryNewKey:
			var paths []string
			for _, rt := range cfg.Routes {
				if rt.Policy == proxy.PolicyRetry {
					paths = append(paths, rt.Path)
				}
			}
			cfg.Transport = &retryNewKey{base: baseTransport(cfg), paths: paths, sent: map[string]int{}}
		}
	}
}

// baseTransport is the transport the proxy would use.
func baseTransport(cfg *proxy.Config) http.RoundTripper {
	if cfg.Transport != nil {
		return cfg.Transport
	}
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.DisableCompression = true
	return t
}

// probeUnknownForwards answers every probe (a GET of a path under the
// status URL's) that did not say "completed" with "not received".
type probeUnknownForwards struct {
	base   http.RoundTripper
	prefix string // the status URL's path before {key}
}

func (t *probeUnknownForwards) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.base.RoundTrip(req)
	if req.Method != http.MethodGet || t.prefix == "" || !strings.HasPrefix(req.URL.Path, t.prefix) {
		return resp, err
	}
	if err == nil {
		if (resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusCreated) &&
			strings.EqualFold(resp.Header.Get(proxy.ProbeStatusHeader), proxy.ProbeStatusCompleted) {
			return resp, nil
		}
		resp.Body.Close()
	}
	h := http.Header{}
	h.Set(proxy.ProbeStatusHeader, proxy.ProbeStatusNotReceived)
	return &http.Response{
		Status: "404 Not Found", StatusCode: http.StatusNotFound, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: h, Body: io.NopCloser(strings.NewReader("")), Request: req,
	}, nil
}

// retryNewKey forwards a key this instance forwarded before, on a retry
// route, under the key with a suffix.
type retryNewKey struct {
	base  http.RoundTripper
	paths []string // the retry routes' paths

	mu   sync.Mutex
	sent map[string]int // forwards by client and key
}

// keyField is how the proxy spells the forwarded key (see forwarder).
const keyField = "idempotency-key"

func (t *retryNewKey) RoundTrip(req *http.Request) (*http.Response, error) {
	//lint:ignore SA1008 the forwarder stores the key under its lower-case spelling, not the canonical one
	keys := req.Header[keyField]
	if req.Method != http.MethodPost || len(keys) != 1 || !t.onRetryRoute(req.URL.Path) {
		return t.base.RoundTrip(req)
	}
	id := req.Header.Get("Authorization") + "\x00" + keys[0]
	t.mu.Lock()
	n := t.sent[id]
	t.sent[id]++
	t.mu.Unlock()
	if n > 0 {
		req = req.Clone(req.Context())
		req.Header[keyField] = []string{fmt.Sprintf("%s.retry-%d", keys[0], n)}
	}
	return t.base.RoundTrip(req)
}

func (t *retryNewKey) onRetryRoute(path string) bool {
	for _, p := range t.paths {
		if prefix, ok := strings.CutSuffix(p, "*"); ok && strings.HasPrefix(path, prefix) || path == p {
			return true
		}
	}
	return false
}
