package check

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"mime"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/idemkit/idem/internal/keyspec"
)

// Names of the checks, in the order Run performs them.
const (
	MissingKey         = "missing-key"
	MalformedKey       = "malformed-key"
	LongKey            = "long-key"
	FirstRequest       = "first-request"
	Replay             = "replay"
	Mismatch           = "mismatch"
	Concurrency        = "concurrency"
	ClientScope        = "client-scope"
	RetentionPublished = "retention-published"
)

// Defaults for the zero values of Config.
const (
	MethodDefault         = http.MethodPost
	MismatchStatusDefault = http.StatusUnprocessableEntity
	ConcurrencyDefault    = 8
	MaxKeyLengthDefault   = keyspec.MaxLength
	TimeoutDefault        = 10 * time.Second
	RunTimeoutDefault     = 2 * time.Minute
	MaxBodyBytesDefault   = 1 << 20
)

// Bounds that keep a run finite whatever the configuration says.
const (
	concurrencyMax  = 256
	maxKeyLengthMax = 64 << 10
)

// Content types the checker knows how to change for the mismatch check.
const (
	jsonContentType = "application/json"
	formContentType = "application/x-www-form-urlencoded"
)

// ErrInvalidConfig is wrapped by every error Run returns for a Config it cannot use.
var ErrInvalidConfig = errors.New("check: invalid config")

// Config describes the endpoint under test and how hard to probe it.
type Config struct {
	// URL is the endpoint under test, an absolute http or https URL such as
	// https://api.example.com/v1/payments. Required.
	URL string

	// Method is the HTTP method of every probe. Defaults to POST.
	Method string

	// Header holds the headers client A sends with every probe, typically
	// Authorization. It must not contain Idempotency-Key. Defaults to none.
	Header http.Header

	// SecondClientHeader holds the headers that identify a second client B,
	// typically another Authorization. They replace the same-named headers of
	// Header for B's probes. Setting it enables the client-scope check.
	// Defaults to none, which skips client-scope.
	SecondClientHeader http.Header

	// Body is the body of a valid request that the endpoint answers with a 2xx.
	// Defaults to an empty body.
	Body []byte

	// ContentType is the Content-Type of every probe. Defaults to the
	// Content-Type in Header if there is one, else
	// application/x-www-form-urlencoded when Body looks like a form and
	// application/json otherwise.
	ContentType string

	// MismatchBody is a valid body that differs from Body, sent with a used key
	// by the mismatch and client-scope checks. Defaults to Body with its first
	// numeric top-level field incremented by one, or else with "x" appended to
	// its first string field (JSON objects and forms only).
	MismatchBody []byte

	// MismatchStatus is the status the endpoint must answer when a used key
	// arrives with a different body. Defaults to 422.
	MismatchStatus int

	// Concurrency is the number of simultaneous requests with one key in the
	// concurrency check, at least 2 and at most 256. Defaults to 8.
	Concurrency int

	// MaxKeyLength is the longest key the endpoint documents as valid; the
	// long-key check expects a key one character longer to be rejected.
	// Defaults to 255.
	MaxKeyLength int

	// BareKeys sends keys as bare tokens (8e03978e-...) instead of the quoted
	// sf-strings ("8e03978e-...") that the draft requires. Defaults to false.
	BareKeys bool

	// SpecURL is where the endpoint's idempotency specification is published.
	// Defaults to trying /openapi.json, /openapi.yaml and
	// /.well-known/openapi.json on the endpoint's origin. Links with rel help or
	// describedby and problem type URIs seen in responses are tried as well.
	SpecURL string

	// Timeout bounds each request, including reading its response.
	// Defaults to 10s.
	Timeout time.Duration

	// RunTimeout bounds the whole run; checks that cannot start before it
	// expires are reported as skipped. Defaults to 2m.
	RunTimeout time.Duration

	// MaxBodyBytes is how much of each response body is read and compared.
	// Defaults to 1 MiB.
	MaxBodyBytes int64

	// Transport sends the requests. Defaults to a clone of
	// http.DefaultTransport sized for Concurrency connections.
	Transport http.RoundTripper

	// Logger receives one debug record per request. Defaults to slog.Default().
	Logger *slog.Logger
}

func (c Config) withDefaults() Config {
	if c.Method == "" {
		c.Method = MethodDefault
	}
	if c.ContentType == "" {
		c.ContentType = c.Header.Get("Content-Type")
	}
	if c.ContentType == "" {
		c.ContentType = detectContentType(c.Body)
	}
	if c.MismatchStatus == 0 {
		c.MismatchStatus = MismatchStatusDefault
	}
	if c.Concurrency == 0 {
		c.Concurrency = ConcurrencyDefault
	}
	if c.MaxKeyLength == 0 {
		c.MaxKeyLength = MaxKeyLengthDefault
	}
	if c.Timeout == 0 {
		c.Timeout = TimeoutDefault
	}
	if c.RunTimeout == 0 {
		c.RunTimeout = RunTimeoutDefault
	}
	if c.MaxBodyBytes == 0 {
		c.MaxBodyBytes = MaxBodyBytesDefault
	}
	if c.Transport == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.MaxIdleConnsPerHost = c.Concurrency + 2
		c.Transport = t
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

func (c Config) validate() error {
	u, err := url.Parse(c.URL)
	switch {
	case c.URL == "":
		return fmt.Errorf("%w: URL is required", ErrInvalidConfig)
	case err != nil:
		return fmt.Errorf("%w: URL: %w", ErrInvalidConfig, err)
	case u.Scheme != "http" && u.Scheme != "https":
		return fmt.Errorf("%w: URL %q is not an absolute http or https URL", ErrInvalidConfig, c.URL)
	case u.Host == "":
		return fmt.Errorf("%w: URL %q has no host", ErrInvalidConfig, c.URL)
	}
	if !isToken(c.Method) {
		return fmt.Errorf("%w: method %q is not an HTTP token", ErrInvalidConfig, c.Method)
	}
	if _, _, err := mime.ParseMediaType(c.ContentType); err != nil {
		return fmt.Errorf("%w: content type %q: %w", ErrInvalidConfig, c.ContentType, err)
	}
	for name, h := range map[string]http.Header{"Header": c.Header, "SecondClientHeader": c.SecondClientHeader} {
		if len(h.Values("Idempotency-Key")) > 0 {
			return fmt.Errorf("%w: %s must not set Idempotency-Key; every check chooses its own keys", ErrInvalidConfig, name)
		}
	}
	if c.MismatchBody != nil && string(c.MismatchBody) == string(c.Body) {
		return fmt.Errorf("%w: MismatchBody equals Body", ErrInvalidConfig)
	}
	if c.MismatchStatus < 100 || c.MismatchStatus > 599 {
		return fmt.Errorf("%w: mismatch status %d is not an HTTP status", ErrInvalidConfig, c.MismatchStatus)
	}
	if c.Concurrency < 2 || c.Concurrency > concurrencyMax {
		return fmt.Errorf("%w: concurrency %d is outside [2, %d]", ErrInvalidConfig, c.Concurrency, concurrencyMax)
	}
	if c.MaxKeyLength < 1 || c.MaxKeyLength > maxKeyLengthMax {
		return fmt.Errorf("%w: max key length %d is outside [1, %d]", ErrInvalidConfig, c.MaxKeyLength, maxKeyLengthMax)
	}
	if c.SpecURL != "" {
		if s, err := url.Parse(c.SpecURL); err != nil || (s.Scheme != "http" && s.Scheme != "https") {
			return fmt.Errorf("%w: spec URL %q is not an absolute http or https URL", ErrInvalidConfig, c.SpecURL)
		}
	}
	if c.Timeout < 0 || c.RunTimeout < 0 || c.MaxBodyBytes < 0 {
		return fmt.Errorf("%w: timeouts and MaxBodyBytes must not be negative", ErrInvalidConfig)
	}
	return nil
}

// Run probes the endpoint described by cfg with every check and reports what it
// saw. It returns an error only when cfg is unusable (wrapping
// ErrInvalidConfig); a failing endpoint, an unreachable one and an expired run
// are all results in the Report.
func Run(ctx context.Context, cfg Config) (Report, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return Report{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.RunTimeout)
	defer cancel()

	r := newRunner(cfg)
	report := Report{URL: cfg.URL, Method: cfg.Method, StartedAt: time.Now()}
	steps := []struct {
		name     string
		required bool
		run      func(context.Context) Result
	}{
		{MissingKey, true, r.checkMissingKey},
		{MalformedKey, true, r.checkMalformedKey},
		{LongKey, true, r.checkLongKey},
		{FirstRequest, true, r.checkFirstRequest},
		{Replay, true, r.checkReplay},
		{Mismatch, true, r.checkMismatch},
		{Concurrency, true, r.checkConcurrency},
		{ClientScope, len(cfg.SecondClientHeader) > 0, r.checkClientScope},
		{RetentionPublished, false, r.checkRetention},
	}
	for _, step := range steps {
		var res Result
		if err := ctx.Err(); err != nil {
			res = skip("not run: %v", context.Cause(ctx))
		} else {
			res = step.run(ctx)
		}
		res.Name, res.Required = step.name, step.required
		report.Results = append(report.Results, res)
	}
	report.Duration = time.Since(report.StartedAt)
	return report, nil
}

// isToken reports whether s is a non-empty RFC 9110 token.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := range len(s) {
		if !isTokenChar(s[i]) {
			return false
		}
	}
	return true
}

func isTokenChar(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}
