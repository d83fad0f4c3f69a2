package payments

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/idemkit/idem/idemclient"
	"github.com/idemkit/idem/internal/bearer"
)

// ProcessorClient charges cards at a processord (or any processor with the
// same API: POST /v1/charges behind the Idempotency-Key contract). It is an
// idemclient: a lost answer, a 5xx or a 409 is retried with the same key.
type ProcessorClient struct {
	base   string
	token  string
	client *idemclient.Client
}

var _ Processor = (*ProcessorClient)(nil)

// NewProcessorClient returns a client for the processor at base that
// authenticates with the bearer token. A nil cfg means idemclient's
// defaults with a 10 s total deadline.
func NewProcessorClient(base, token string, cfg *idemclient.Config) (*ProcessorClient, error) {
	if !bearer.IsToken68(token) {
		return nil, errors.New("payments: the processor token is empty or not token68")
	}
	if cfg == nil {
		cfg = &idemclient.Config{MaxElapsed: 10 * time.Second}
	}
	client, err := idemclient.New(cfg)
	if err != nil {
		return nil, err
	}
	return &ProcessorClient{base: strings.TrimSuffix(base, "/"), token: token, client: client}, nil
}

// ErrRefused is wrapped by a *RefusedError: the processor refused the
// charge request itself, so nothing was charged.
var ErrRefused = errors.New("payments: the processor refused the charge request")

// RefusedError is a processor's answer that refuses the charge request
// itself, before any charge: nothing was charged, and the same request
// would be refused again. It is not a decline of the card (ErrDeclined).
type RefusedError struct {
	// Status is the processor's HTTP status.
	Status int
	// Detail is the start of the processor's answer, for the log.
	Detail string
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("payments: the processor refused the charge request: it answered %d: %.200s", e.Status, e.Detail)
}

func (e *RefusedError) Unwrap() error { return ErrRefused }

// refusals are the statuses by which a processor (processord, or one with
// its API) refuses a charge request itself: nothing was charged, and a
// retry of the same request gets the same answer.
//
//   - 400 Bad Request, 413 Content Too Large, 415 Unsupported Media Type:
//     the processor does not accept the request's body (processord answers
//     400 for a body it cannot read or a parameter it refuses);
//   - 401 Unauthorized, 403 Forbidden: the processor refuses paymentsd's
//     credentials (processord checks the token before anything else);
//   - 404 Not Found, 405 Method Not Allowed: there is no charges endpoint
//     at the processor's address (a wrong -processor URL);
//   - 422 Unprocessable Content: processord's answer for a charge key
//     already used with other parameters ("nothing was charged").
//
// Every other answer but 201 and 402 leaves the charge unknown, and the
// phase is retried with the same key: 409 (processord: a request with
// this key is in progress), 408 and 429 (try later), 5xx, a timeout, a
// lost answer, and any status not listed here.
var refusals = map[int]bool{
	http.StatusBadRequest:            true,
	http.StatusUnauthorized:          true,
	http.StatusForbidden:             true,
	http.StatusNotFound:              true,
	http.StatusMethodNotAllowed:      true,
	http.StatusRequestEntityTooLarge: true,
	http.StatusUnsupportedMediaType:  true,
	http.StatusUnprocessableEntity:   true,
}

// Charge asks the processor to charge p once for key. A 402 answer is a
// decline: the error wraps ErrDeclined. An answer that refuses the request
// itself (see refusals) is a *RefusedError: nothing was charged. Any other
// error leaves the charge unknown.
func (c *ProcessorClient) Charge(ctx context.Context, key string, p Params) (string, error) {
	body, _ := json.Marshal(map[string]any{"amount": p.Amount, "currency": p.Currency, "customer": p.Customer})
	req, err := http.NewRequestWithContext(idemclient.WithKey(ctx, key), http.MethodPost, c.base+"/v1/charges", bytes.NewReader(body))
	if err != nil {
		return "", fmt.Errorf("payments: charge: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+c.token)
	resp, err := c.client.Do(req)
	if err != nil {
		return "", fmt.Errorf("payments: charge: %w", err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return "", fmt.Errorf("payments: charge: read: %w", err)
	}
	if resp.StatusCode == http.StatusPaymentRequired {
		return "", fmt.Errorf("%w: the processor answered 402: %.200s", ErrDeclined, raw)
	}
	if refusals[resp.StatusCode] {
		return "", &RefusedError{Status: resp.StatusCode, Detail: string(raw)}
	}
	if resp.StatusCode != http.StatusCreated {
		return "", fmt.Errorf("payments: charge: processor answered %d: %.200s", resp.StatusCode, raw)
	}
	var charge struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(raw, &charge); err != nil || charge.ID == "" {
		return "", fmt.Errorf("payments: charge: processor answered without a charge id")
	}
	return charge.ID, nil
}
