package idemprom_test

import (
	"context"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/idemkit/idem/idemconsume"
	"github.com/idemkit/idem/idemprom"
)

func TestConsumerMetrics(t *testing.T) {
	t.Parallel()
	m := idemprom.NewConsumer(nil)
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(m)
	ctx := context.Background()
	m.Message(ctx, "ledger", idemconsume.Result{Outcome: idemconsume.OutcomeExecuted, Action: idemconsume.Ack}, false)
	m.Message(ctx, "ledger", idemconsume.Result{Outcome: idemconsume.OutcomeDuplicate, Action: idemconsume.Ack}, true)
	m.Message(ctx, "ledger", idemconsume.Result{Outcome: idemconsume.OutcomeDuplicate, Action: idemconsume.Ack}, true)
	m.Message(ctx, "ledger", idemconsume.Result{Outcome: idemconsume.OutcomeMismatch, Action: idemconsume.DeadLetter}, false)
	want := `
# HELP idem_consumer_messages_total Messages handled by idempotent consumers, by consumer, outcome (executed, duplicate, in_flight, failed, unavailable, mismatch, rejected, malformed) and the broker's redelivered flag.
# TYPE idem_consumer_messages_total counter
idem_consumer_messages_total{consumer="ledger",outcome="duplicate",redelivered="true"} 2
idem_consumer_messages_total{consumer="ledger",outcome="executed",redelivered="false"} 1
idem_consumer_messages_total{consumer="ledger",outcome="mismatch",redelivered="false"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
		t.Fatal(err)
	}
}
