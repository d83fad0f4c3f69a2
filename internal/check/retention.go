package check

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"
)

// Bounds of the retention-published check.
const (
	specBytesMax = 8 << 20 // read at most this much of each document
	docURLsMax   = 12      // fetch at most this many documents
	nearBytes    = 160     // a retention word and a duration this close form a statement
	topicBytes   = 600     // a statement this close to "idempot…" is about idempotency keys
)

// wellKnownSpecPaths are tried on the endpoint's origin when no spec URL is set.
var wellKnownSpecPaths = []string{"/openapi.json", "/openapi.yaml", "/.well-known/openapi.json"}

var (
	// No word boundary around most words, so that camelCase names such as
	// idempotencyRetention and retentionDays count too.
	retentionWordRE = regexp.MustCompile(`(?i)retention|retain(?:s|ed|ing)?|expir(?:e|es|ed|y|ing|ation)|purg(?:e|es|ed|ing)|prun(?:e|es|ed|ing)|\b(?:kept for|stored for|deleted after|ttl)\b`)
	durationRE      = regexp.MustCompile(`(?i)\b(?:\d+(?:\.\d+)?|an?|one|two|three|four|five|six|seven|ten|twelve|fourteen|twenty-four|thirty|ninety)[\s-]*(?:seconds?|secs?|minutes?|mins?|hours?|hrs?|days?|weeks?|months?|years?)\b|\b\d+[smhdw]\b|\bP(?:\d+[YMWD])+(?:T(?:\d+[HMS])+)?\b|\bPT(?:\d+[HMS])+\b`)
	extensionRE     = regexp.MustCompile(`(?i)\bx-[a-z0-9_.-]*idempotency[a-z0-9_.-]*["']?\s*:`)
	topicRE         = regexp.MustCompile(`(?i)idempot`)
)

// retentionFinding is a published statement about how long keys are kept.
type retentionFinding struct {
	kind    string // "statement" or "extension"
	excerpt string
	onTopic bool // near a mention of idempotency
}

// findRetention searches a published document for retention statements: a
// retention word near a duration, or an OpenAPI extension whose name contains
// "idempotency". Findings about idempotency come first.
func findRetention(text string) []retentionFinding {
	var onTopic, offTopic []retentionFinding
	topics := topicRE.FindAllStringIndex(text, -1)
	nearTopic := func(lo, hi int) bool {
		for _, t := range topics {
			if t[0] < hi+topicBytes && t[1] > lo-topicBytes {
				return true
			}
		}
		return false
	}
	for _, m := range extensionRE.FindAllStringIndex(text, 3) {
		onTopic = append(onTopic, retentionFinding{kind: "extension", excerpt: snippet(text, m[0], m[1]+80), onTopic: true})
	}
	durations := durationRE.FindAllStringIndex(text, -1)
	lastEnd := -1
	for _, w := range retentionWordRE.FindAllStringIndex(text, -1) {
		if w[0] < lastEnd {
			continue // already inside the previous finding
		}
		for _, d := range durations {
			if d[0] >= w[1]+nearBytes || d[1] <= w[0]-nearBytes {
				continue
			}
			lo, hi := min(w[0], d[0]), max(w[1], d[1])
			f := retentionFinding{kind: "statement", excerpt: snippet(text, lo, hi), onTopic: nearTopic(lo, hi)}
			if f.onTopic {
				onTopic = append(onTopic, f)
			} else {
				offTopic = append(offTopic, f)
			}
			lastEnd = hi
			break
		}
	}
	return append(onTopic, offTopic...)
}

// snippet returns text[lo:hi] widened a little, on one line.
func snippet(text string, lo, hi int) string {
	const pad = 40
	lo, hi = max(0, lo-pad), min(len(text), hi+pad)
	s := excerpt([]byte(text[lo:hi]))
	if lo > 0 {
		s = "…" + s
	}
	if hi < len(text) && !strings.HasSuffix(s, "…") {
		s += "…"
	}
	return s
}

// checkRetention looks for the published idempotency specification and its
// expiry policy, which the draft requires a resource to publish. It is
// advisory: nothing found is a warning.
func (r *runner) checkRetention(ctx context.Context) Result {
	var docs []docLink
	if r.cfg.SpecURL != "" {
		docs = append(docs, docLink{url: r.cfg.SpecURL, source: "the configured spec URL"})
	} else {
		for _, p := range wellKnownSpecPaths {
			u := url.URL{Scheme: r.target.Scheme, Host: r.target.Host, Path: p}
			docs = append(docs, docLink{url: u.String(), source: "well-known location"})
		}
	}
	r.mu.Lock()
	docs = append(docs, r.found...)
	r.mu.Unlock()

	seen := make(map[string]bool)
	var tried, found, offTopic []string
	limited := false
	for _, d := range docs {
		if seen[d.url] {
			continue
		}
		seen[d.url] = true
		if len(seen) > docURLsMax {
			limited = true
			break
		}
		ex := r.fetch(ctx, d.url)
		if !ex.is2xx() {
			tried = append(tried, fmt.Sprintf("%s (%s) → %s", d.url, d.source, shortStatus(ex)))
			continue
		}
		findings := findRetention(string(ex.body))
		if len(findings) == 0 {
			tried = append(tried, fmt.Sprintf("%s (%s) → %s, no retention statement", d.url, d.source, statusText(ex.status)))
			continue
		}
		for _, f := range findings[:min(2, len(findings))] {
			line := fmt.Sprintf("%s (%s): %s: %s", d.url, d.source, f.kind, f.excerpt)
			if f.onTopic {
				found = append(found, line)
			} else {
				offTopic = append(offTopic, line)
			}
		}
	}

	var res Result
	switch {
	case len(found) > 0:
		res = newResult(Pass, "a retention policy for idempotency keys is published")
		res.Evidence = found
	case len(offTopic) > 0:
		res = newResult(Warn, "found retention wording, but none near a mention of idempotency: publish how long keys are kept")
		res.Evidence = offTopic
	default:
		res = newResult(Warn, "no published retention policy found: publish how long keys are kept (the draft requires it)")
	}
	for _, t := range tried {
		res.addf("tried %s", t)
	}
	if limited {
		res.addf("stopped after %d documents", docURLsMax)
	}
	return res
}

// fetch GETs a published document. Client A's headers go only to the
// endpoint's own origin, so credentials never leak to a documentation host.
func (r *runner) fetch(ctx context.Context, target string) exchange {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return exchange{err: err}
	}
	if req.URL.Scheme == r.target.Scheme && req.URL.Host == r.target.Host {
		for name, values := range r.cfg.Header {
			for _, v := range values {
				req.Header.Add(name, v)
			}
		}
	}
	req.Header.Del("Content-Type")
	req.Header.Set("Accept", "application/json, application/yaml, text/html;q=0.9, text/*;q=0.8, */*;q=0.5")
	if req.Header.Get("User-Agent") == "" {
		req.Header.Set("User-Agent", userAgent+" (check="+RetentionPublished+")")
	}
	ex := r.roundTrip(r.fetches, req, specBytesMax)
	r.cfg.Logger.DebugContext(ctx, "idem check fetch", "url", target, "status", ex.status, "bytes", len(ex.body), "error", ex.err)
	return ex
}
