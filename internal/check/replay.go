package check

import (
	"context"
	"fmt"
	"net/http"
	"strings"
)

// checkFirstRequest sends the configured body with a fresh key; the endpoint
// must process it. Its response is what replay and mismatch compare against.
func (r *runner) checkFirstRequest(ctx context.Context) Result {
	key := r.wire(newKey())
	ex := r.send(ctx, r.clientA(FirstRequest, r.cfg.Body, key))
	if !ex.is2xx() {
		res := newResult(Fail, "a fresh key was not processed, want 2xx: check URL, headers and body")
		res.addf("key %s → %s", showKey(key), ex)
		if ex.err == nil && ex.status == http.StatusBadRequest && !r.cfg.BareKeys {
			res.addf("hint: if the endpoint rejects quoted sf-string keys, send bare keys")
		}
		return res
	}
	r.first, r.firstKey = &ex, key
	res := newResult(Pass, "a fresh key is processed with %d", ex.status)
	res.addf("key %s → %s", showKey(key), ex)
	res.addf("body %s", digest(ex.body))
	if loc := ex.header.Get("Location"); loc != "" {
		res.addf("Location: %s", loc)
	}
	if v := ex.header.Get("Idempotent-Replayed"); isReplayedTrue(v) {
		res.Outcome = Warn
		res.Summary += ", but the response claims to be a replay (Idempotent-Replayed: " + v + ") for a key never used before"
	}
	return res
}

// checkReplay retries the first request with the same key and body; the
// endpoint must answer with the stored status and body, byte for byte.
func (r *runner) checkReplay(ctx context.Context) Result {
	if r.first == nil {
		return skip("not run: needs a successful first-request")
	}
	first := *r.first
	ex := r.send(ctx, r.clientA(Replay, r.cfg.Body, r.firstKey))
	var res Result
	switch {
	case ex.err != nil:
		res = newResult(Fail, "no answer to the retry")
	case ex.status != first.status:
		res = newResult(Fail, "the retry got %d, the first request %d: the stored response is not replayed", ex.status, first.status)
	case !ex.sameAs(first):
		res = newResult(Fail, "the retry's body differs from the first response: the request was executed again or the replay is not faithful")
		res.addf("bodies differ at byte %d: first %s, retry %s", diffAt(first.body, ex.body),
			around(first.body, diffAt(first.body, ex.body)), around(ex.body, diffAt(first.body, ex.body)))
	default:
		res = newResult(Pass, "the retry returns the first response byte for byte")
	}
	res.addf("first → %s, %s", statusText(first.status), digest(first.body))
	res.addf("retry → %s", ex)
	if ex.err == nil {
		res.addf("retry body %s", digest(ex.body))
	}
	if res.Outcome != Pass {
		return res
	}
	switch v := ex.header.Get("Idempotent-Replayed"); {
	case v == "":
		res.Outcome = Warn
		res.Summary += ", but without Idempotent-Replayed: true"
		res.addf("Idempotent-Replayed: absent")
	case isReplayedTrue(v):
		res.addf("Idempotent-Replayed: %s", v)
	default:
		res.Outcome = Warn
		res.Summary += fmt.Sprintf(", but Idempotent-Replayed is %q, not true", v)
		res.addf("Idempotent-Replayed: %s", v)
	}
	if loc := first.header.Get("Location"); loc != "" && ex.header.Get("Location") != loc {
		res.Outcome = Warn
		res.Summary += ", but the Location header changed"
		res.addf("Location: first %q, retry %q", loc, ex.header.Get("Location"))
	}
	return res
}

// checkMismatch sends the used key with a different body; the endpoint must
// refuse it (422 by default) rather than replay or execute it.
func (r *runner) checkMismatch(ctx context.Context) Result {
	if r.first == nil {
		return skip("not run: needs a successful first-request")
	}
	if r.changed == nil {
		return skip("not run: %s; set a mismatch body", r.change)
	}
	ex := r.send(ctx, r.clientA(Mismatch, r.changed, r.firstKey))
	want := r.cfg.MismatchStatus
	var res Result
	switch {
	case ex.err != nil:
		res = newResult(Fail, "no answer to the used key with a changed body")
	case ex.status == want:
		res = newResult(Pass, "the used key with a changed body is refused with %d", want)
	case ex.sameAs(*r.first):
		res = newResult(Fail, "the used key with a changed body replayed the first response, want %d: requests are not fingerprinted", want)
	case ex.is2xx():
		res = newResult(Fail, "the used key with a changed body was executed with %d, want %d: requests are not fingerprinted", ex.status, want)
	default:
		res = newResult(Fail, "the used key with a changed body got %d, want %d", ex.status, want)
	}
	res.addf("changed body: %s", r.change)
	res.addf("same key %s, changed body → %s", showKey(r.firstKey), ex)
	return res
}

// isReplayedTrue reports whether an Idempotent-Replayed value means true,
// either Stripe's "true" or the structured-field boolean "?1".
func isReplayedTrue(v string) bool {
	v = strings.TrimSpace(v)
	return strings.EqualFold(v, "true") || v == "?1"
}

// diffAt returns the index of the first byte where a and b differ.
func diffAt(a, b []byte) int {
	n := min(len(a), len(b))
	for i := range n {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}

// around renders the bytes of b near index i for evidence.
func around(b []byte, i int) string {
	const window = 24
	lo, hi := max(0, i-window), min(len(b), i+window)
	s := excerpt(b[lo:hi])
	if lo > 0 {
		s = "…" + s
	}
	if hi < len(b) {
		s += "…"
	}
	return fmt.Sprintf("%q", s)
}
