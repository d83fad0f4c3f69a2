package idemoutbox_test

import (
	"strings"
	"testing"

	"github.com/idemkit/idem/idemoutbox"
)

// The relay's delivery, retries, dead events, purge and concurrency are
// tested on real stores by idemtest.RunOutboxTests, run from idempg and
// idemsqlite; these are its constructor's checks.
func TestNewRelayRejects(t *testing.T) {
	t.Parallel()
	wh, err := idemoutbox.NewWebhook(&idemoutbox.WebhookConfig{URL: "http://127.0.0.1:1", Secret: idemoutbox.NewSecret()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := idemoutbox.NewRelay(nil, wh, nil); err == nil {
		t.Error("NewRelay without a store succeeded")
	}
	for name, cfg := range map[string]idemoutbox.RelayConfig{
		"NegativeBatchSize":   {BatchSize: -1},
		"NegativeParallelism": {Parallelism: -1},
		"NegativeMaxAttempts": {MaxAttempts: -1},
		"NegativeRetention":   {Retention: -1},
	} {
		// The configuration is checked before the store and deliverer.
		if _, err := idemoutbox.NewRelay(nil, wh, &cfg); err == nil || !strings.Contains(err.Error(), "negative") {
			t.Errorf("%s: NewRelay = %v, want the configuration refused", name, err)
		}
	}
}
