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

// Charge asks the processor to charge p once for key. A 402 answer is a
// decline: the error wraps ErrDeclined.
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
