package idemclient

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/idemkit/idem/internal/keyspec"
)

// Header names used by the Idempotency-Key protocol.
const (
	// HeaderKey is the request header that carries the idempotency key.
	HeaderKey = "Idempotency-Key"
	// HeaderReplayed is the response header a server sets to "true" when it
	// replays a stored response instead of executing the request again.
	HeaderReplayed = "Idempotent-Replayed"
)

// Defaults for [Config].
const (
	// MaxAttemptsDefault is the default Config.MaxAttempts.
	MaxAttemptsDefault = 5
	// BaseDelayDefault is the default Config.BaseDelay.
	BaseDelayDefault = 100 * time.Millisecond
	// MaxDelayDefault is the default Config.MaxDelay.
	MaxDelayDefault = 5 * time.Second
	// MaxElapsedDefault is the default Config.MaxElapsed.
	MaxElapsedDefault = 30 * time.Second
	// AttemptTimeoutDefault is the default Config.AttemptTimeout.
	AttemptTimeoutDefault = 10 * time.Second
	// MaxBodyBytesDefault is the default Config.MaxBodyBytes: 10 MiB.
	MaxBodyBytesDefault = 10 << 20
)

// ErrInvalidConfig is returned by [New] for a [Config] it cannot use.
var ErrInvalidConfig = errors.New("idemclient: invalid config")

// Config configures a [Client]. The zero value is ready to use.
type Config struct {
	// Transport sends each single attempt. Defaults to http.DefaultTransport.
	Transport http.RoundTripper

	// MaxAttempts is the most attempts made for one logical operation,
	// counting the first; 1 disables retries. Defaults to MaxAttemptsDefault (5).
	MaxAttempts int

	// BaseDelay is the ceiling of the wait before the first retry; the
	// ceiling doubles with every retry. Defaults to BaseDelayDefault (100ms).
	BaseDelay time.Duration

	// MaxDelay caps the ceiling of the computed wait between attempts. It
	// does not cap a server's Retry-After. Defaults to MaxDelayDefault (5s).
	MaxDelay time.Duration

	// MaxElapsed bounds the time from the start of the first attempt to the
	// start of the last: no wait is started that would end after it, so
	// idemclient returns the last response or error instead. An attempt in
	// flight is bounded by AttemptTimeout, not by MaxElapsed.
	// Defaults to MaxElapsedDefault (30s).
	MaxElapsed time.Duration

	// AttemptTimeout bounds each attempt, from sending the request until the
	// response body is closed, like http.Client.Timeout. A timed-out attempt
	// is retried with the same key. A negative value disables the per-attempt
	// timeout. Defaults to AttemptTimeoutDefault (10s).
	AttemptTimeout time.Duration

	// MaxBodyBytes is the largest request body buffered for replay when the
	// request has no GetBody; a larger body fails with ErrBodyTooLarge before
	// anything is sent. Defaults to MaxBodyBytesDefault (10 MiB).
	MaxBodyBytes int64

	// RetryPolicy decides whether an attempt is retried.
	// Defaults to DefaultRetryPolicy.
	RetryPolicy RetryPolicy

	// Backoff computes the wait between attempts when the server sends no
	// Retry-After. Defaults to DefaultBackoff.
	Backoff Backoff

	// BareKey sends keys that idemclient formats (from NewKey or WithKey)
	// unquoted, as Stripe's SDKs do, instead of as the quoted sf-string the
	// draft requires. A bare key may hold only letters, digits and
	// "_-.:~/+="; a key from WithKey with any other character is refused
	// with ErrInvalidKey, not quoted. A caller-supplied header is always
	// sent as it is. Defaults to false.
	BareKey bool

	// Logger receives a Debug record for every retry. Defaults to slog.Default().
	Logger *slog.Logger

	// now and sleep are the clock; tests in this package replace them.
	now   func() time.Time
	sleep func(ctx context.Context, d time.Duration) error
}

func (c Config) withDefaults() Config {
	if c.Transport == nil {
		c.Transport = http.DefaultTransport
	}
	if c.MaxAttempts == 0 {
		c.MaxAttempts = MaxAttemptsDefault
	}
	if c.BaseDelay == 0 {
		c.BaseDelay = BaseDelayDefault
	}
	if c.MaxDelay == 0 {
		c.MaxDelay = MaxDelayDefault
	}
	if c.MaxElapsed == 0 {
		c.MaxElapsed = MaxElapsedDefault
	}
	if c.AttemptTimeout == 0 {
		c.AttemptTimeout = AttemptTimeoutDefault
	}
	if c.MaxBodyBytes == 0 {
		c.MaxBodyBytes = MaxBodyBytesDefault
	}
	if c.RetryPolicy == nil {
		c.RetryPolicy = DefaultRetryPolicy
	}
	if c.Backoff == nil {
		c.Backoff = DefaultBackoff
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.now == nil {
		c.now = time.Now
	}
	if c.sleep == nil {
		c.sleep = sleep
	}
	return c
}

func (c Config) validate() error {
	switch {
	case c.MaxAttempts < 1:
		return fmt.Errorf("%w: MaxAttempts is %d; it must be at least 1", ErrInvalidConfig, c.MaxAttempts)
	case c.BaseDelay < 0:
		return fmt.Errorf("%w: BaseDelay is negative", ErrInvalidConfig)
	case c.MaxDelay < c.BaseDelay:
		return fmt.Errorf("%w: MaxDelay %s is less than BaseDelay %s", ErrInvalidConfig, c.MaxDelay, c.BaseDelay)
	case c.MaxElapsed < 0:
		return fmt.Errorf("%w: MaxElapsed is negative", ErrInvalidConfig)
	case c.MaxBodyBytes < 0:
		return fmt.Errorf("%w: MaxBodyBytes is negative", ErrInvalidConfig)
	}
	return nil
}

// Client sends requests with an Idempotency-Key per logical operation and
// retries them with the same key and body. It is safe for concurrent use.
type Client struct {
	rt *transport
	hc *http.Client
}

// New returns a Client configured by cfg; a nil cfg uses the defaults.
func New(cfg *Config) (*Client, error) {
	var c Config
	if cfg != nil {
		c = *cfg
	}
	c = c.withDefaults()
	if err := c.validate(); err != nil {
		return nil, err
	}
	rt := &transport{cfg: c}
	return &Client{rt: rt, hc: &http.Client{Transport: rt}}, nil
}

// Do sends req, following redirects like http.Client. A POST or PATCH gets
// an Idempotency-Key (see the package documentation) and is retried with
// that key and the same body; other methods are sent once, unchanged.
//
// Do returns the first response that is not retried, or the last response
// when attempts or time run out; the caller must close its body. A 422 to a
// keyed request is returned as a [*KeyReusedError] with no response. When the
// operation ends without any response, the error wraps a [*RetryError].
func (c *Client) Do(req *http.Request) (*http.Response, error) {
	if needsKey(req.Method) && len(req.Header.Values(HeaderKey)) == 0 {
		// Set the key on the outer request so that http.Client copies it to
		// a 307/308 redirect of the same operation.
		field, err := c.rt.keyField(req.Context())
		if err != nil {
			closeBody(req)
			return nil, err
		}
		req = req.Clone(req.Context())
		if req.Header == nil {
			req.Header = make(http.Header)
		}
		req.Header.Set(HeaderKey, field)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, err
	}
	if err := CheckResponse(resp); err != nil {
		return nil, err
	}
	return resp, nil
}

// Post sends body to url with a POST request of the given content type.
func (c *Client) Post(ctx context.Context, url, contentType string, body []byte) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("idemclient: building request: %w", err)
	}
	req.Header.Set("Content-Type", contentType)
	return c.Do(req)
}

// Transport returns the client's retrying RoundTripper, for use in an
// http.Client of the caller's own:
//
//	hc := &http.Client{Transport: c.Transport(), Jar: jar}
//
// Following the RoundTripper contract it returns a 422 as a response, not as
// an error; pass the response to [CheckResponse] to get the
// [*KeyReusedError] that [Client.Do] returns.
func (c *Client) Transport() http.RoundTripper { return c.rt }

// Replayed reports whether resp is a stored response that the server replayed
// (Idempotent-Replayed: true) rather than the outcome of a new execution.
func Replayed(resp *http.Response) bool {
	return resp != nil && strings.EqualFold(strings.TrimSpace(resp.Header.Get(HeaderReplayed)), "true")
}

// Attempts returns how many attempts idemclient made for the operation that
// produced resp, counting the first. It returns 0 for a response that did
// not come through the retry loop, such as the answer to a GET.
func Attempts(resp *http.Response) int {
	if resp == nil || resp.Request == nil {
		return 0
	}
	n, _ := resp.Request.Context().Value(attemptKey{}).(int)
	return n
}

// needsKey reports whether method is one that idemclient keys and retries:
// POST and PATCH, on which idem's middleware requires a key by default.
func needsKey(method string) bool { return keyspec.NonIdempotent(method) }

func closeBody(req *http.Request) {
	if req.Body != nil {
		req.Body.Close()
	}
}
