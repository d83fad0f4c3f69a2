package idemoutbox

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"
)

// Deliverer sends one event to its destination. A nil error means the
// event was delivered; any error makes the relay retry it later.
type Deliverer interface {
	Deliver(ctx context.Context, e Event) error
}

// WebhookTimeoutDefault is the default of [WebhookConfig.Timeout].
const WebhookTimeoutDefault = 10 * time.Second

// WebhookConfig configures a [Webhook].
type WebhookConfig struct {
	// URL receives events whose Destination is "". Defaults to "": such
	// events then fail and are retried until they are dead.
	URL string
	// Secret signs every request, written "whsec_" followed by the base64
	// of 24 to 64 bytes (see [NewSecret] and [ParseSecret]). Required.
	Secret string
	// Timeout bounds one attempt, from sending the request to reading the
	// response's status. Defaults to WebhookTimeoutDefault (10 s).
	Timeout time.Duration
	// Client sends the requests. Defaults to a client of its own that
	// does not follow redirects.
	Client *http.Client
	// Now is the clock of the webhook-timestamp header. Defaults to
	// time.Now.
	Now func() time.Time
}

// Webhook is a [Deliverer] that posts events as Standard Webhooks.
type Webhook struct {
	cfg WebhookConfig
	key []byte
}

var _ Deliverer = (*Webhook)(nil)

// NewWebhook returns a webhook deliverer.
func NewWebhook(cfg *WebhookConfig) (*Webhook, error) {
	if cfg == nil {
		return nil, errors.New("idemoutbox: WebhookConfig.Secret is required")
	}
	c := *cfg
	key, err := ParseSecret(c.Secret)
	if err != nil {
		return nil, fmt.Errorf("idemoutbox: WebhookConfig.Secret: %w", err)
	}
	if c.Timeout < 0 {
		return nil, errors.New("idemoutbox: WebhookConfig.Timeout must not be negative")
	}
	if c.Timeout == 0 {
		c.Timeout = WebhookTimeoutDefault
	}
	if c.Client == nil {
		c.Client = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return &Webhook{cfg: c, key: key}, nil
}

// Body returns the request body that delivers e, as Standard Webhooks
// recommends: {"type", "timestamp", "data"}, with the event's creation time
// (RFC 3339) and its payload, byte for byte, as data.
func Body(e Event) ([]byte, error) {
	if !json.Valid(e.Payload) {
		return nil, errors.New("idemoutbox: the event's payload is not JSON")
	}
	typ, err := json.Marshal(e.Type)
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	b.WriteString(`{"type":`)
	b.Write(typ)
	b.WriteString(`,"timestamp":"`)
	b.WriteString(e.CreatedAt.UTC().Format(time.RFC3339Nano))
	b.WriteString(`","data":`)
	b.Write(e.Payload)
	b.WriteString(`}`)
	return b.Bytes(), nil
}

// StatusError is the error of a delivery that got a response other than 2xx.
type StatusError struct {
	StatusCode int
}

func (e *StatusError) Error() string {
	return "idemoutbox: webhook answered " + strconv.Itoa(e.StatusCode)
}

// Deliver posts e, signed, to its Destination or to the configured URL,
// and reports success for a 2xx response. Redirects are not followed.
func (w *Webhook) Deliver(ctx context.Context, e Event) error {
	url := e.Destination
	if url == "" {
		url = w.cfg.URL
	}
	if url == "" {
		return errors.New("idemoutbox: the event has no destination and the webhook no URL")
	}
	body, err := Body(e)
	if err != nil {
		return fmt.Errorf("idemoutbox: encode event: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, w.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("idemoutbox: webhook request: %w", err)
	}
	ts := w.cfg.Now()
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(HeaderID, e.ID)
	req.Header.Set(HeaderTimestamp, strconv.FormatInt(ts.Unix(), 10))
	req.Header.Set(HeaderSignature, Sign(w.key, e.ID, ts, body))
	resp, err := w.cfg.Client.Do(req)
	if err != nil {
		return fmt.Errorf("idemoutbox: webhook: %w", err)
	}
	// Drain a little so the connection can be reused.
	io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return &StatusError{StatusCode: resp.StatusCode}
	}
	return nil
}
