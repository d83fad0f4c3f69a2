package check

import (
	"context"
	"net/http"
)

// checkClientScope verifies that keys are scoped per client: client B using a
// key that client A already used gets a new execution of its own, neither A's
// stored response nor a conflict with A's record.
func (r *runner) checkClientScope(ctx context.Context) Result {
	if r.headerB == nil {
		return skip("not enabled: set a second client's headers to check that keys are scoped per client")
	}
	res := newResult(Pass, "a key used by client A is a new key for client B")
	fail := func(format string, args ...any) {
		if res.Outcome == Pass {
			res.Outcome = Fail
			res.Summary = newResult(Fail, format, args...).Summary
		}
	}

	// Same key, same body: B must get its own execution.
	k1 := r.wire(newKey())
	a1 := r.send(ctx, r.clientA(ClientScope, r.cfg.Body, k1))
	res.addf("client A, key %s → %s", showKey(k1), a1)
	if !a1.is2xx() {
		fail("client A could not create with a fresh key, want 2xx")
		return res
	}
	b1 := r.send(ctx, r.clientB(ClientScope, r.cfg.Body, k1))
	res.addf("client B, same key, same body → %s", b1)
	switch {
	case b1.err != nil:
		fail("no answer to client B")
	case b1.sameAs(a1):
		fail("client B received client A's stored response: keys are not scoped per client")
	case b1.status == http.StatusConflict || b1.status == r.cfg.MismatchStatus || b1.status == http.StatusUnprocessableEntity:
		fail("client B got %d for a key only client A used: keys are not scoped per client", b1.status)
	case !b1.is2xx():
		fail("client B got %d, want 2xx (a new execution of its own)", b1.status)
	}
	if b1.err == nil && isReplayedTrue(b1.header.Get("Idempotent-Replayed")) {
		res.addf("client B's response carried Idempotent-Replayed: true")
	}

	// A's record must be untouched by B.
	a1r := r.send(ctx, r.clientA(ClientScope, r.cfg.Body, k1))
	if a1r.sameAs(a1) {
		res.addf("client A retry → %s, still A's response", statusText(a1r.status))
	} else {
		res.addf("client A retry → %s: no longer A's stored response", a1r)
		fail("client A's retry no longer replays A's response after client B used the key")
	}

	// Same key, changed body: B must not be compared with A's fingerprint.
	if r.changed == nil {
		res.addf("changed-body step not run: %s", r.change)
		return res
	}
	k2 := r.wire(newKey())
	a2 := r.send(ctx, r.clientA(ClientScope, r.cfg.Body, k2))
	res.addf("client A, key %s → %s", showKey(k2), shortStatus(a2))
	if !a2.is2xx() {
		fail("client A could not create with a fresh key, want 2xx")
		return res
	}
	b2 := r.send(ctx, r.clientB(ClientScope, r.changed, k2))
	res.addf("client B, same key, changed body (%s) → %s", r.change, b2)
	switch {
	case b2.err != nil:
		fail("no answer to client B")
	case b2.status == r.cfg.MismatchStatus || b2.status == http.StatusUnprocessableEntity:
		fail("client B's new body was refused with %d by client A's record: keys are not scoped per client", b2.status)
	case b2.status == http.StatusConflict:
		fail("client B got 409 for a key only client A used: keys are not scoped per client")
	case b2.sameAs(a2):
		fail("client B received client A's stored response: keys are not scoped per client")
	case !b2.is2xx():
		fail("client B got %d, want 2xx (a new execution of its own)", b2.status)
	}
	return res
}
