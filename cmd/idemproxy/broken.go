//go:build chaosbroken

package main

import (
	"os"

	"github.com/idemkit/idem/cmd/internal/brokenstore"
	"github.com/idemkit/idem/cmd/internal/proxy"
)

// Built only for the chaos harness's tests: IDEM_CHAOS_BREAK=forward-held
// turns every hold route into a retry route, so that a key whose forward's
// outcome is unknown is released and forwarded again to an upstream that
// does not honour keys: the double execution hold exists to prevent.
func init() {
	breakRoutes = func(routes []proxy.Route) {
		if os.Getenv(brokenstore.EnvBreak) != brokenstore.ForwardHeld {
			return
		}
		for i := range routes {
			if routes[i].Policy == proxy.PolicyHold {
				routes[i].Policy = proxy.PolicyRetry
			}
		}
	}
}
