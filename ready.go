package idem

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/idemkit/idem/idemstore"
)

// ReadyTimeoutDefault is the default of [ReadyConfig.Timeout].
const ReadyTimeoutDefault = 2 * time.Second

// ReadyConfig configures [NewReadyHandler].
type ReadyConfig struct {
	// Timeout is how long the store has to answer. Defaults to
	// ReadyTimeoutDefault (2 s).
	Timeout time.Duration
	// ProblemTypeBase prefixes the problem type URIs. Defaults to
	// ProblemTypeBaseDefault ("/problems/").
	ProblemTypeBase string
	// Logger receives the reason of every 503. Defaults to slog.Default().
	Logger *slog.Logger
}

// NewReadyHandler returns a readiness check for load balancers, for GET
// /readyz: 200 when the store answers within the timeout and its schema is
// at the version this build needs ([idemstore.Readier]), otherwise 503 with a
// store-unavailable problem that says which. A liveness check (/healthz)
// must not call it: a database outage is no reason to restart the process.
func NewReadyHandler(store idemstore.Readier, cfg *ReadyConfig) (http.Handler, error) {
	if store == nil {
		return nil, errors.New("idem: a Readier is required")
	}
	c := ReadyConfig{}
	if cfg != nil {
		c = *cfg
	}
	if c.Timeout < 0 {
		return nil, errors.New("idem: ReadyConfig.Timeout must not be negative")
	}
	if c.Timeout == 0 {
		c.Timeout = ReadyTimeoutDefault
	}
	if c.ProblemTypeBase == "" {
		c.ProblemTypeBase = ProblemTypeBaseDefault
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), c.Timeout)
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
			detail = fmt.Sprintf("The idempotency store did not answer within %s.", c.Timeout)
		}
		WriteProblem(w, ProblemUnavailable.Kind().New(c.ProblemTypeBase, detail), unavailableRetryAfter)
	}), nil
}
