package idemprom_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemprom"
)

func TestResumerMetrics(t *testing.T) {
	t.Parallel()
	m := idemprom.New(nil)
	ctx := context.Background()
	m.ResumerPass(ctx, idem.ResumerResult{Led: true, Completed: 3, Released: 2, Failed: 1, GaveUp: 4, Oldest: 90 * time.Second})
	m.ResumerPass(ctx, idem.ResumerResult{Led: false})
	want := `
# HELP idem_resumer_gave_up_keys Unfinished keys that the last pass of the idem resumer listed and left to an operator, after its MaxAttempts runs did not finish them.
# TYPE idem_resumer_gave_up_keys gauge
idem_resumer_gave_up_keys 4
# HELP idem_resumer_keys_total Unfinished keys the idem resumer worked on, by outcome (completed, released, failed, skipped).
# TYPE idem_resumer_keys_total counter
idem_resumer_keys_total{outcome="completed"} 3
idem_resumer_keys_total{outcome="failed"} 1
idem_resumer_keys_total{outcome="released"} 2
idem_resumer_keys_total{outcome="skipped"} 0
# HELP idem_resumer_oldest_unfinished_seconds Age of the oldest unfinished key that the last pass of the idem resumer left unfinished; 0 for none.
# TYPE idem_resumer_oldest_unfinished_seconds gauge
idem_resumer_oldest_unfinished_seconds 90
# HELP idem_resumer_passes_total Passes of the idem resumer; led=false when another instance held its lock.
# TYPE idem_resumer_passes_total counter
idem_resumer_passes_total{led="false"} 1
idem_resumer_passes_total{led="true"} 1
`
	if err := testutil.CollectAndCompare(m, strings.NewReader(want),
		"idem_resumer_gave_up_keys", "idem_resumer_keys_total", "idem_resumer_oldest_unfinished_seconds", "idem_resumer_passes_total"); err != nil {
		t.Error(err)
	}
}
