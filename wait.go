package idem

import (
	"bytes"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/idemkit/idem/idemstore"
)

// HeaderPreferenceApplied is the response header (RFC 7240) that says a
// request's Prefer: wait was honoured, as wait=N in seconds.
const HeaderPreferenceApplied = "Preference-Applied"

// Pauses between the claims of a request that waits for its key's holder.
const (
	waitPauseFirst = 10 * time.Millisecond
	waitPauseMax   = 250 * time.Millisecond
)

// claimOnce claims the key once, at the middleware's clock.
func (m *Middleware) claimOnce(c *call) (idemstore.ClaimResult, error) {
	ctx := c.r.Context()
	now := m.cfg.Now()
	started := now // time.Now's, with its monotonic reading
	if m.claimsTimed && !m.wallClock {
		started = time.Now()
	}
	sctx, span := ctx, untraced
	if m.tracing.tracer != nil { // see untraced
		sctx, span = m.startSpan(ctx, c, StepClaim, 0, nil)
	}
	claimCtx := m.storeCalls.WithTimeout(sctx)
	res, err := m.store.Claim(claimCtx, idemstore.ClaimParams{
		Scope: c.scope, Method: c.r.Method, Path: c.path,
		RequestHash: c.fp.Sum[:], RequestFields: c.fields,
		TwoPhase: m.cfg.Mode == ModeTwoPhase, Now: now, LockTimeout: m.cfg.LockTimeout, Retention: m.cfg.Retention,
		Speculative: m.speculative(c), TraceContext: c.traceContext,
	})
	claimCtx.Stop()
	if m.tracing.tracer != nil {
		end := SpanEnd{Err: err}
		if err == nil && res.Lease != nil {
			end.Token = res.Lease.Info().Token
		}
		span.End(end)
	}
	if m.claimsTimed {
		m.cfg.Metrics.Claim(ctx, time.Since(started), err)
	}
	return res, err
}

// speculative reports whether the claim of c may go out late, with the
// handler's first statement (see [idemstore.ClaimParams.Speculative]): in ModeAtomic,
// unless the request prefers to wait, which needs to know at once whether
// the key is in flight, or its key was claimed here lately, which makes it
// likely to exist: a retry, or a duplicate in flight, is then answered
// without running its handler.
func (m *Middleware) speculative(c *call) bool {
	if m.cfg.Mode != ModeAtomic {
		return false
	}
	seen := m.recent.Seen(c.scope)
	return !seen && preferredWait(c.r.Header, m.cfg.MaxPreferWait) <= 0
}

// claimWaiting claims the key. When the key is in flight for the same
// request and the request sent Prefer: wait=N, it claims again after pauses
// that grow from 10 ms to 250 ms (with jitter), until the key is no longer
// in flight or N seconds, at most Config.MaxPreferWait, have passed. The
// answer then says Preference-Applied: wait=N. It returns the last claim's
// result, which claim answers as usual: the stored response, a lease when
// the holder released the key, or 409 when the wait ran out.
func (m *Middleware) claimWaiting(c *call) (idemstore.ClaimResult, error) {
	res, err := m.claimOnce(c)
	wait := preferredWait(c.r.Header, m.cfg.MaxPreferWait)
	if wait <= 0 || !waitable(c, res, err) {
		return res, err
	}
	c.w.Header().Set(HeaderPreferenceApplied, "wait="+strconv.Itoa(int(wait/time.Second)))
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	for attempt := 0; ; attempt++ {
		pause := time.NewTimer(waitPause(attempt))
		select {
		case <-pause.C:
		case <-deadline.C:
			pause.Stop()
			return res, err
		case <-c.r.Context().Done():
			pause.Stop()
			return res, err
		}
		res, err = m.claimOnce(c)
		if !waitable(c, res, err) {
			return res, err
		}
	}
}

// waitable reports whether a claim found the key in flight for the same
// request, which a request that prefers to wait waits for.
func waitable(c *call, res idemstore.ClaimResult, err error) bool {
	rec := res.Record
	return err == nil && rec != nil && rec.Status == idemstore.StatusInFlight &&
		(len(rec.RequestHash) == 0 || bytes.Equal(rec.RequestHash, c.fp.Sum[:]))
}

// waitPause is the pause before the claim after attempt (0 for the first),
// between half and all of a bound that doubles from waitPauseFirst to
// waitPauseMax.
func waitPause(attempt int) time.Duration {
	d := waitPauseMax
	if attempt < 5 {
		d = min(waitPauseMax, waitPauseFirst<<attempt)
	}
	return d/2 + rand.N(d/2+1)
}

// preferredWait returns the wait a request asks for with Prefer: wait=N
// (RFC 7240), in whole seconds and at most limit; 0 when it asks for none.
func preferredWait(h http.Header, limit time.Duration) time.Duration {
	if limit <= 0 {
		return 0
	}
	for _, field := range h.Values("Prefer") {
		for _, pref := range strings.Split(field, ",") {
			token, _, _ := strings.Cut(pref, ";") // parameters do not matter here
			name, value, ok := strings.Cut(strings.TrimSpace(token), "=")
			if !ok || !strings.EqualFold(strings.TrimSpace(name), "wait") {
				continue
			}
			n, err := strconv.Atoi(strings.Trim(strings.TrimSpace(value), `"`))
			if err != nil || n <= 0 {
				return 0
			}
			return min(time.Duration(n)*time.Second, limit.Truncate(time.Second))
		}
	}
	return 0
}
