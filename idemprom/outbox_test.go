package idemprom_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/idemkit/idem/idemoutbox"
	"github.com/idemkit/idem/idemprom"
)

func TestOutboxMetrics(t *testing.T) {
	t.Parallel()
	m := idemprom.NewOutbox(nil)
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(m)
	ctx := context.Background()
	m.Delivery(ctx, idemoutbox.ResultDelivered)
	m.Delivery(ctx, idemoutbox.ResultDelivered)
	m.Delivery(ctx, idemoutbox.ResultRetried)
	m.Backlog(ctx, 7, 90*time.Second, 2)
	want := `
# HELP idem_outbox_dead_events Outbox events parked as dead after their last attempt.
# TYPE idem_outbox_dead_events gauge
idem_outbox_dead_events 2
# HELP idem_outbox_deliveries_total Outbox delivery attempts, by result (delivered, retried, dead).
# TYPE idem_outbox_deliveries_total counter
idem_outbox_deliveries_total{result="dead"} 0
idem_outbox_deliveries_total{result="delivered"} 2
idem_outbox_deliveries_total{result="retried"} 1
# HELP idem_outbox_oldest_pending_age_seconds Age of the oldest pending outbox event; 0 when none is pending.
# TYPE idem_outbox_oldest_pending_age_seconds gauge
idem_outbox_oldest_pending_age_seconds 90
# HELP idem_outbox_pending_events Outbox events not delivered yet and not dead.
# TYPE idem_outbox_pending_events gauge
idem_outbox_pending_events 7
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
		t.Fatal(err)
	}
}
