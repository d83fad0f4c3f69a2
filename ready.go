package idem

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/idemkit/idem/idemstore"
)

// NewReadyHandler returns a readiness check for load balancers, for GET
// /readyz: 200 when the store answers within the timeout and its schema is
// at the version this build needs ([idemstore.Readier]), otherwise 503 with a
// store-unavailable problem that says which. A liveness check (/healthz)
// must not call it: a database outage is no reason to restart the process.
func NewReadyHandler(store idemstore.Readier, cfg *Config) (http.Handler, error) {
	if store == nil {
		return nil, errors.New("idem: a Readier is required")
	}
	c, err := build(cfg)
	if err != nil {
		return nil, err
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), c.ReadyTimeout)
		defer cancel()
		err := store.Ready(ctx)
		if err == nil {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			w.Header().Set("Cache-Control", "no-store")
			w.Write([]byte("ready\n"))
			return
		}
		if r.Context().Err() != nil {
			return // the prober went away
		}
		c.Logger.WarnContext(r.Context(), "idem: not ready", "err", err)
		var sv *idemstore.SchemaVersionError
		detail := "The idempotency store did not answer; no request can be processed."
		switch {
		case errors.As(err, &sv):
			detail = fmt.Sprintf("The idempotency store's schema is at version %d and this build needs version %d: apply the migrations.", sv.Have, sv.Want)
		case ctx.Err() != nil:
			detail = fmt.Sprintf("The idempotency store did not answer within %s.", c.ReadyTimeout)
		}
		WriteProblem(w, ProblemUnavailable.Kind().New(c.ProblemTypeBase, detail), unavailableRetryAfter)
	}), nil
}
