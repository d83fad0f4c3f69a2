package payments

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/idemkit/idem"
)

// ProcessorClient charges cards at a processord (or any processor with the
// same API: POST /v1/charges behind the Idempotency-Key contract).
type ProcessorClient struct {
	base   string
	client *http.Client
}

var _ Processor = (*ProcessorClient)(nil)

// NewProcessorClient returns a client for the processor at base. A nil
// client means one with a 10 s timeout.
func NewProcessorClient(base string, client *http.Client) *ProcessorClient {
	if client == nil {
		client = &http.Client{Timeout: 10 * time.Second}
	}
	return &ProcessorClient{base: strings.TrimSuffix(base, "/"), client: client}
}

// Charge asks the processor to charge p once for key.
func (c *ProcessorClient) Charge(ctx context.Context, key string, p Params) (string, error) {
	body, _ := json.Marshal(map[string]any{"amount": p.Amount, "currency": p.Currency, "customer": p.Customer})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+"/v1/charges", bytes.NewReader(body))
	if err != nil {
		return "", fmt.Errorf("payments: charge: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(idem.HeaderKey, `"`+key+`"`)
	req.Header.Set("Authorization", "Bearer paymentsd")
	resp, err := c.client.Do(req)
	if err != nil {
		return "", fmt.Errorf("payments: charge: %w", err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return "", fmt.Errorf("payments: charge: read: %w", err)
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
