package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"

	"github.com/idemkit/idem/cmd/internal/database"
	"github.com/idemkit/idem/idemoutbox"
)

// webhookOptions are processord's flags of webhook delivery.
type webhookOptions struct {
	url    string
	secret string
}

// newRelay returns the relay that posts the charge events of db's outbox
// to -webhook-url, signed as Standard Webhooks, or nil when there is no
// URL.
func newRelay(o webhookOptions, db *database.DB, logger *slog.Logger) (*idemoutbox.Relay, error) {
	if o.url == "" {
		return nil, nil
	}
	u, err := url.Parse(o.url)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, errors.New("-webhook-url: want an http:// or https:// URL")
	}
	if o.secret == "" {
		return nil, errors.New("-webhook-secret (or PROCESSORD_WEBHOOK_SECRET) is required with -webhook-url")
	}
	wh, err := idemoutbox.NewWebhook(&idemoutbox.WebhookConfig{URL: o.url, Secret: o.secret})
	if err != nil {
		return nil, fmt.Errorf("-webhook-secret: %w", err) // never repeats the secret
	}
	return idemoutbox.NewRelay(db.Outbox(), wh, &idemoutbox.RelayConfig{Logger: logger})
}

// runRelay runs relay until ctx ends, and returns a function that waits
// for it to stop; with no relay, it does nothing.
func runRelay(ctx context.Context, relay *idemoutbox.Relay) (wait func()) {
	if relay == nil {
		return func() {}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		relay.Run(ctx)
	}()
	return func() { <-done }
}
