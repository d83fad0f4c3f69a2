package check

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
)

// checkConcurrency releases a burst of requests with one fresh key and the same
// body at once. The operation must execute exactly once: every 2xx carries the
// same body, every other answer is 409, nothing is 5xx, and a retry afterwards
// replays that one body.
func (r *runner) checkConcurrency(ctx context.Context) Result {
	n := r.cfg.Concurrency
	key := r.wire(newKey())
	p := r.clientA(Concurrency, r.cfg.Body, key)

	// Build every request first, then release them together through the
	// barrier so they reach the endpoint as close together as possible.
	results := make([]exchange, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		req, err := r.newRequest(ctx, p)
		if err != nil {
			results[i] = exchange{err: err}
			continue
		}
		wg.Go(func() {
			<-start
			results[i] = r.do(req, p)
		})
	}
	close(start)
	wg.Wait()

	hist := make(map[string]int)
	var bodies []exchange // distinct 2xx responses, in order of appearance
	counts := make(map[int]int)
	var failures []string
	replayed := 0
	for _, ex := range results {
		switch {
		case ex.err != nil:
			hist["error"]++
			failures = append(failures, ex.err.Error())
			continue
		case ex.is2xx():
			i := slices.IndexFunc(bodies, ex.sameAs)
			if i < 0 {
				i = len(bodies)
				bodies = append(bodies, ex)
			}
			counts[i]++
			if isReplayedTrue(ex.header.Get("Idempotent-Replayed")) {
				replayed++
			}
		}
		hist[statusText(ex.status)]++
	}

	var res Result
	serverErrors, others := 0, 0
	for _, ex := range results {
		if ex.err == nil && ex.status >= 500 {
			serverErrors++
		} else if ex.err == nil && !ex.is2xx() && ex.status != http.StatusConflict {
			others++
		}
	}
	switch {
	case len(bodies) > 1:
		res = newResult(Fail, "the operation executed %d times: %d distinct 2xx bodies for one key", len(bodies), len(bodies))
	case hist["error"] > 0:
		res = newResult(Fail, "%d of %d simultaneous requests got no answer", hist["error"], n)
	case serverErrors > 0:
		res = newResult(Fail, "%d of %d simultaneous requests got a 5xx, want 409 or the one result", serverErrors, n)
	case others > 0:
		res = newResult(Fail, "%d of %d simultaneous requests got a status other than 2xx or 409", others, n)
	default:
		res = newResult(Pass, "%d simultaneous requests with one key executed once", n)
	}
	res.addf("burst of %d simultaneous requests with key %s: %s", n, showKey(key), histogram(hist))
	res.addf("distinct 2xx bodies: %d", len(bodies))
	for i, ex := range bodies {
		if i == 3 {
			res.addf("… and %d more distinct bodies", len(bodies)-i)
			break
		}
		res.addf("2xx body #%d ×%d: %s %s", i+1, counts[i], digest(ex.body), excerpt(ex.body))
	}
	if replayed > 0 {
		res.addf("%d 2xx responses carried Idempotent-Replayed: true", replayed)
	}
	for _, f := range uniq(failures) {
		res.addf("error: %s", f)
	}

	// Every response is in; whatever executed has finished, so a retry must
	// now replay it.
	retry := r.send(ctx, p)
	switch {
	case !retry.is2xx():
		res.addf("follow-up retry → %s (want the stored 2xx)", retry)
		if res.Outcome == Pass {
			res = Result{Outcome: Fail, Summary: "the follow-up retry did not replay a stored 2xx response", Evidence: res.Evidence}
		}
	case len(bodies) == 1 && !retry.sameAs(bodies[0]):
		res.addf("follow-up retry → %s, %s: differs from the burst's 2xx body", retry, digest(retry.body))
		if res.Outcome == Pass {
			res = Result{Outcome: Fail, Summary: "the follow-up retry returned a different body than the burst: the operation executed again", Evidence: res.Evidence}
		}
	case len(bodies) == 1:
		res.addf("follow-up retry → %s, identical to the burst's 2xx body", statusText(retry.status))
	default:
		res.addf("follow-up retry → %s, %s", statusText(retry.status), digest(retry.body))
	}
	return res
}

// histogram renders status counts as "1×201 Created, 7×409 Conflict".
func histogram(h map[string]int) string {
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%d×%s", h[k], k)
	}
	return strings.Join(parts, ", ")
}

// uniq returns the distinct strings of s in order.
func uniq(s []string) []string {
	var out []string
	for _, v := range s {
		if !slices.Contains(out, v) {
			out = append(out, v)
		}
	}
	return out
}
