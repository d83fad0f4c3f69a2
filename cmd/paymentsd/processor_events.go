package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/cmd/internal/database"
	"github.com/idemkit/idem/cmd/internal/payments"
)

// processorEvents returns the receiver of the processor's webhooks, or nil
// without -processor-webhook-secret.
func processorEvents(ctx context.Context, o *options, db *database.DB, ic idem.Config, logger *slog.Logger) (http.Handler, error) {
	if o.processorWebhookSecrets == "" {
		return nil, nil
	}
	var secrets []string
	for s := range strings.SplitSeq(o.processorWebhookSecrets, ",") {
		if s = strings.TrimSpace(s); s != "" {
			secrets = append(secrets, s)
		}
	}
	ic.Mode = idem.ModeAtomic // the event's record and its charge commit together
	h, err := payments.NewProcessorEvents(ctx, payments.ProcessorEventsConfig{DB: db, Secrets: secrets, Idem: ic, Logger: logger})
	if err != nil {
		return nil, fmt.Errorf("-processor-webhook-secret: %w", err) // never repeats a secret
	}
	return h, nil
}
