package check

import (
	"context"
	"fmt"
	"net/http"
)

// checkMissingKey sends a valid request without Idempotency-Key; the draft
// answers that with 400.
func (r *runner) checkMissingKey(ctx context.Context) Result {
	ex := r.send(ctx, r.clientA(MissingKey, r.cfg.Body))
	var res Result
	switch {
	case ex.err != nil:
		res = newResult(Fail, "no answer to a request without Idempotency-Key")
	case ex.status == http.StatusBadRequest:
		res = newResult(Pass, "a request without Idempotency-Key is rejected with 400")
	case ex.is2xx():
		res = newResult(Fail, "a request without Idempotency-Key was accepted with %d, want 400: the key is not required", ex.status)
	default:
		res = newResult(Fail, "a request without Idempotency-Key got %d, want 400", ex.status)
	}
	res.addf("no Idempotency-Key → %s", ex)
	if ct := ex.header.Get("Content-Type"); ex.err == nil && ct != "" {
		res.addf("Content-Type: %s", ct)
	}
	return res
}

// malformedCase is one key value (or set of fields) the endpoint must reject.
type malformedCase struct {
	name   string
	values []string // Idempotency-Key field values, one field each
}

// malformedCases builds the malformed keys around fresh random parts, so a
// server that wrongly accepts one never replays an earlier run's result.
// Every value is one Go's client can send: no CR, LF, NUL or DEL.
func malformedCases() []malformedCase {
	a, b := newKey(), newKey()
	return []malformedCase{
		{"unterminated sf-string", []string{`"` + a}},
		{"sf-list of two strings", []string{`"` + a + `", "` + b + `"`}},
		{"unquoted key with spaces", []string{a[:8] + " " + a[9:13] + " " + a[14:]}},
		{"tab inside the key", []string{`"` + a[:8] + "\t" + a[9:] + `"`}},
		{"non-ASCII byte in the key", []string{`"` + a[:8] + "\xe9" + a[9:] + `"`}},
		{"empty sf-string", []string{`""`}},
		{"two Idempotency-Key fields", []string{`"` + a + `"`, `"` + b + `"`}},
	}
}

// checkMalformedKey sends keys that are not one valid sf-string; each must get 400.
func (r *runner) checkMalformedKey(ctx context.Context) Result {
	cases := malformedCases()
	var evidence []string
	rejected := 0
	for _, c := range cases {
		ex := r.send(ctx, r.clientA(MalformedKey, r.cfg.Body, c.values...))
		verdict := "ok"
		if ex.err == nil && ex.status == http.StatusBadRequest {
			rejected++
		} else {
			verdict = "want 400"
		}
		sent := showKey(c.values[0])
		for _, v := range c.values[1:] {
			sent += " + " + showKey(v)
		}
		line := fmt.Sprintf("%s %s → %s (%s)", c.name, sent, shortStatus(ex), verdict)
		if verdict != "ok" && len(ex.body) > 0 {
			line += ": " + excerpt(ex.body)
		}
		evidence = append(evidence, line)
	}
	res := newResult(Pass, "all %d malformed keys are rejected with 400", len(cases))
	if rejected < len(cases) {
		res = newResult(Fail, "%d of %d malformed keys were not rejected with 400", len(cases)-rejected, len(cases))
	}
	res.Evidence = evidence
	return res
}

// checkLongKey sends a key one character over the documented maximum, which
// must get 400, and a key of exactly the maximum, which should be accepted.
func (r *runner) checkLongKey(ctx context.Context) Result {
	n := r.cfg.MaxKeyLength
	over := r.send(ctx, r.clientA(LongKey, r.cfg.Body, r.wire(newKeyOfLength(n+1))))
	var res Result
	switch {
	case over.err != nil:
		res = newResult(Fail, "no answer to a %d-character key", n+1)
	case over.status == http.StatusBadRequest:
		res = newResult(Pass, "a %d-character key is rejected with 400", n+1)
	default:
		res = newResult(Fail, "a %d-character key got %d, want 400 (documented maximum %d)", n+1, over.status, n)
	}
	res.addf("%d-character key → %s", n+1, shortStatus(over))

	at := r.send(ctx, r.clientA(LongKey, r.cfg.Body, r.wire(newKeyOfLength(n))))
	res.addf("%d-character key → %s", n, shortStatus(at))
	if !at.is2xx() && res.Outcome == Pass {
		res.Outcome = Warn
		res.Summary += fmt.Sprintf(", but a key of exactly %d characters was not accepted either: is the documented maximum right?", n)
	}
	return res
}

// shortStatus describes an exchange by its status alone.
func shortStatus(ex exchange) string {
	if ex.err != nil {
		return "request failed: " + ex.err.Error()
	}
	return statusText(ex.status)
}
