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

func TestCompleterMetrics(t *testing.T) {
	t.Parallel()
	m := idemprom.NewCompleterMetrics(nil)
	ctx := context.Background()
	m.CompleterPass(ctx, idem.CompleterResult{Led: true, Completed: 3, Released: 2, Failed: 1, GaveUp: 4, Oldest: 90 * time.Second})
	m.CompleterPass(ctx, idem.CompleterResult{Led: false})
	want := `
# HELP idem_completer_gave_up_keys Unfinished keys that the last pass of the idem completer listed and left to an operator, after its MaxAttempts runs did not finish them.
# TYPE idem_completer_gave_up_keys gauge
idem_completer_gave_up_keys 4
# HELP idem_completer_keys_total Unfinished keys the idem completer worked on, by outcome (completed, released, failed, skipped).
# TYPE idem_completer_keys_total counter
idem_completer_keys_total{outcome="completed"} 3
idem_completer_keys_total{outcome="failed"} 1
idem_completer_keys_total{outcome="released"} 2
idem_completer_keys_total{outcome="skipped"} 0
# HELP idem_completer_oldest_unfinished_seconds Age of the oldest unfinished key that the last pass of the idem completer left unfinished; 0 for none.
# TYPE idem_completer_oldest_unfinished_seconds gauge
idem_completer_oldest_unfinished_seconds 90
# HELP idem_completer_passes_total Passes of the idem completer; led=false when another instance held its lock.
# TYPE idem_completer_passes_total counter
idem_completer_passes_total{led="false"} 1
idem_completer_passes_total{led="true"} 1
`
	if err := testutil.CollectAndCompare(m, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
}
