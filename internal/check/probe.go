package check

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/idemkit/idem/internal/keyspec"
)

// userAgent identifies the checker's probes in the endpoint's logs; each probe
// appends the name of the check that sent it, as in "idem-check (check=replay)".
const userAgent = "idem-check"

// runner holds what the checks share during one Run.
type runner struct {
	cfg      Config
	target   *url.URL
	probes   *http.Client // never follows redirects: a 3xx is evidence
	fetches  *http.Client // follows redirects, for published documents
	headerB  http.Header  // client B's headers; nil when client-scope is off
	changed  []byte       // the mismatch body; nil when none could be derived
	change   string       // how changed differs from the body, or why there is none
	first    *exchange    // the first-request exchange, once it succeeded
	firstKey string       // the key of first, as sent
	mu       sync.Mutex   // guards found
	found    []docLink    // documentation links seen in responses, in order
	seenLink map[string]bool
}

func newRunner(cfg Config) *runner {
	target, _ := url.Parse(cfg.URL) // validated
	r := &runner{
		cfg:    cfg,
		target: target,
		probes: &http.Client{
			Transport:     cfg.Transport,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
		fetches:  &http.Client{Transport: cfg.Transport},
		seenLink: make(map[string]bool),
	}
	if len(cfg.SecondClientHeader) > 0 {
		r.headerB = cfg.Header.Clone()
		if r.headerB == nil {
			r.headerB = http.Header{}
		}
		for name, values := range cfg.SecondClientHeader {
			r.headerB[http.CanonicalHeaderKey(name)] = values
		}
	}
	r.changed, r.change = cfg.MismatchBody, "the configured mismatch body"
	if r.changed == nil {
		var err error
		r.changed, r.change, err = changedBody(cfg.ContentType, cfg.Body)
		if err != nil {
			r.changed, r.change = nil, err.Error()
		}
	}
	return r
}

// probe is one request to the endpoint under test.
type probe struct {
	check  string      // the check sending it, for the User-Agent and the log
	header http.Header // the client's headers (A or B)
	keys   []string    // Idempotency-Key field values as sent, one field each
	body   []byte
}

// exchange is what one probe got back.
type exchange struct {
	status    int
	header    http.Header
	body      []byte
	truncated bool // body holds only the first MaxBodyBytes
	err       error
}

func (e exchange) is2xx() bool { return e.err == nil && e.status >= 200 && e.status < 300 }

// sameAs reports whether e and o carry the same status and body, byte for byte.
func (e exchange) sameAs(o exchange) bool {
	return e.err == nil && o.err == nil && e.status == o.status && bytes.Equal(e.body, o.body)
}

// String describes the exchange in a line of evidence: status, size and an excerpt.
func (e exchange) String() string {
	if e.err != nil {
		return "request failed: " + e.err.Error()
	}
	size := fmt.Sprintf("%d bytes", len(e.body))
	if e.truncated {
		size = fmt.Sprintf("more than %d bytes", len(e.body))
	}
	if len(e.body) == 0 {
		return statusText(e.status) + ", empty body"
	}
	return fmt.Sprintf("%s, %s: %s", statusText(e.status), size, excerpt(e.body))
}

// clientA returns a probe with client A's headers.
func (r *runner) clientA(check string, body []byte, keys ...string) probe {
	return probe{check: check, header: r.cfg.Header, keys: keys, body: body}
}

// clientB returns a probe with client B's headers.
func (r *runner) clientB(check string, body []byte, keys ...string) probe {
	return probe{check: check, header: r.headerB, keys: keys, body: body}
}

// newRequest builds the request for p without sending it.
func (r *runner) newRequest(ctx context.Context, p probe) (*http.Request, error) {
	var body io.Reader
	if len(p.body) > 0 {
		body = bytes.NewReader(p.body)
	}
	req, err := http.NewRequestWithContext(ctx, r.cfg.Method, r.cfg.URL, body)
	if err != nil {
		return nil, fmt.Errorf("build request: %w", err)
	}
	for name, values := range p.header {
		for _, v := range values {
			req.Header.Add(name, v)
		}
	}
	if len(p.body) > 0 {
		req.Header.Set("Content-Type", r.cfg.ContentType)
	}
	if req.Header.Get("User-Agent") == "" {
		req.Header.Set("User-Agent", userAgent+" (check="+p.check+")")
	}
	for _, k := range p.keys {
		req.Header.Add("Idempotency-Key", k)
	}
	return req, nil
}

// do sends req under the per-request timeout and reads a bounded response.
func (r *runner) do(req *http.Request, p probe) exchange {
	ctx, cancel := context.WithTimeout(req.Context(), r.cfg.Timeout)
	defer cancel()
	ex := r.roundTrip(r.probes, req.WithContext(ctx), r.cfg.MaxBodyBytes)
	if errors.Is(ex.err, context.DeadlineExceeded) {
		ex.err = fmt.Errorf("no complete response within %s: %w", r.cfg.Timeout, ex.err)
	}
	r.cfg.Logger.DebugContext(ctx, "idem check probe", "check", p.check, "keys", len(p.keys),
		"status", ex.status, "bytes", len(ex.body), "error", ex.err)
	if ex.err == nil {
		r.collectLinks(p.check, ex)
	}
	return ex
}

// send builds and sends one probe.
func (r *runner) send(ctx context.Context, p probe) exchange {
	req, err := r.newRequest(ctx, p)
	if err != nil {
		return exchange{err: err}
	}
	return r.do(req, p)
}

func (r *runner) roundTrip(c *http.Client, req *http.Request, limit int64) exchange {
	resp, err := c.Do(req)
	if err != nil {
		return exchange{err: err}
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	ex := exchange{status: resp.StatusCode, header: resp.Header, body: body, err: err}
	if err != nil {
		ex.err = fmt.Errorf("read response: %w", err)
	}
	if int64(len(body)) > limit {
		ex.body, ex.truncated = body[:limit], true
	}
	return ex
}

// docLink is a URL that may lead to the endpoint's published idempotency
// specification, and where the checker saw it.
type docLink struct {
	url    string
	source string
}

// collectLinks remembers the Link targets with rel help or describedby and the
// problem type URI of a response, for the retention-published check.
func (r *runner) collectLinks(check string, ex exchange) {
	var found []docLink
	for _, l := range parseLinks(ex.header.Values("Link")) {
		if l.hasRel("help") || l.hasRel("describedby") {
			found = append(found, docLink{url: l.uri, source: fmt.Sprintf("Link rel=%q in a %d response to %s", strings.Join(l.rels, " "), ex.status, check)})
		}
	}
	if t := problemType(ex); t != "" {
		found = append(found, docLink{url: t, source: fmt.Sprintf("problem type in a %d response to %s", ex.status, check)})
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, f := range found {
		u, err := r.target.Parse(f.url)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") {
			continue
		}
		u.Fragment = ""
		f.url = u.String()
		if !r.seenLink[f.url] {
			r.seenLink[f.url] = true
			r.found = append(r.found, f)
		}
	}
}

// problemType returns the type member of a JSON (problem details) response
// body, or "" when there is none or it is about:blank.
func problemType(ex exchange) string {
	mt, _, _ := mime.ParseMediaType(ex.header.Get("Content-Type"))
	if mt != "application/problem+json" && mt != jsonContentType {
		return ""
	}
	var p struct {
		Type string `json:"type"`
	}
	if json.Unmarshal(ex.body, &p) != nil || p.Type == "about:blank" {
		return ""
	}
	return p.Type
}

// newKey returns a fresh random key: a version 4 UUID, as the draft recommends.
func newKey() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b) // never fails
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b)
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

// newKeyOfLength returns a fresh random key of exactly n characters.
func newKeyOfLength(n int) string {
	b := make([]byte, (n+1)/2)
	_, _ = rand.Read(b) // never fails
	return hex.EncodeToString(b)[:n]
}

// wire returns a key as the configured wire format carries it. Keys from
// newKey and newKeyOfLength are hex digits and dashes, valid in both forms.
func (r *runner) wire(key string) string {
	if r.cfg.BareKeys {
		return key
	}
	return keyspec.Quote(key)
}

// statusText renders a status such as "422 Unprocessable Entity".
func statusText(code int) string {
	if t := http.StatusText(code); t != "" {
		return strconv.Itoa(code) + " " + t
	}
	return strconv.Itoa(code)
}

// excerptMax is how many bytes of a body a line of evidence shows.
const excerptMax = 96

// excerpt renders the start of a body on one printable line.
func excerpt(b []byte) string {
	var sb strings.Builder
	space := false
	for i := 0; i < len(b); {
		if i >= excerptMax {
			sb.WriteString("…")
			break
		}
		c, size := utf8.DecodeRune(b[i:])
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			if !space {
				sb.WriteByte(' ')
			}
		case c == utf8.RuneError && size == 1:
			fmt.Fprintf(&sb, `\x%02x`, b[i])
		case c < 0x20 || c == 0x7f:
			fmt.Fprintf(&sb, `\x%02x`, c)
		default:
			sb.WriteRune(c)
		}
		space = c == ' ' || c == '\t' || c == '\n' || c == '\r'
		i += size
	}
	return strings.TrimSpace(sb.String())
}

// digest is a short fingerprint of a body for evidence lines.
func digest(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:6])
}

// showKey renders a key field value exactly as sent, quotes included, with
// tabs and non-printable or non-ASCII bytes escaped, shortened when long.
func showKey(v string) string {
	const keep = 40
	var sb strings.Builder
	for i := range min(len(v), keep) {
		switch c := v[i]; {
		case c == '\t':
			sb.WriteString(`\t`)
		case c < 0x20 || c >= 0x7f:
			fmt.Fprintf(&sb, `\x%02x`, c)
		default:
			sb.WriteByte(c)
		}
	}
	if len(v) > keep {
		fmt.Fprintf(&sb, "… (%d chars)", len(v))
	}
	return sb.String()
}
