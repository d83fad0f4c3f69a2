package idemprom

import (
	"context"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemkit/idem/idemoutbox"
)

var (
	_ idemoutbox.Metrics   = (*OutboxMetrics)(nil)
	_ prometheus.Collector = (*OutboxMetrics)(nil)
)

// OutboxMetrics is an idemoutbox.Metrics that is also a
// prometheus.Collector. Metrics (with the default namespace "idem"):
//
//	idem_outbox_deliveries_total{result}       counter: delivered, retried, dead
//	idem_outbox_pending_events                 gauge: the backlog
//	idem_outbox_oldest_pending_age_seconds     gauge: 0 when nothing is pending
//	idem_outbox_dead_events                    gauge: events parked after their last attempt
//
// The gauges are set by the relay after each poll.
type OutboxMetrics struct {
	deliveries *prometheus.CounterVec
	pending    prometheus.Gauge
	oldest     prometheus.Gauge
	dead       prometheus.Gauge
}

// NewOutbox builds the outbox's collectors. A nil cfg uses the defaults;
// ClaimBuckets is not used.
func NewOutbox(cfg *Config) *OutboxMetrics {
	c := Config{}
	if cfg != nil {
		c = *cfg
	}
	if c.Namespace == "" {
		c.Namespace = NamespaceDefault
	}
	var results []string
	for _, r := range idemoutbox.Results() {
		results = append(results, string(r))
	}
	gauge := func(name, help string) prometheus.Gauge {
		return prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: c.Namespace, Subsystem: "outbox", Name: name, ConstLabels: c.ConstLabels, Help: help,
		})
	}
	m := &OutboxMetrics{
		deliveries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: c.Namespace, Subsystem: "outbox", Name: "deliveries_total", ConstLabels: c.ConstLabels,
			Help: "Outbox delivery attempts, by result (" + strings.Join(results, ", ") + ").",
		}, []string{"result"}),
		pending: gauge("pending_events", "Outbox events not delivered yet and not dead."),
		oldest:  gauge("oldest_pending_age_seconds", "Age of the oldest pending outbox event; 0 when none is pending."),
		dead:    gauge("dead_events", "Outbox events parked as dead after their last attempt."),
	}
	for _, r := range results {
		m.deliveries.WithLabelValues(r)
	}
	return m
}

// Delivery implements idemoutbox.Metrics.
func (m *OutboxMetrics) Delivery(_ context.Context, r idemoutbox.Result) {
	m.deliveries.WithLabelValues(string(r)).Inc()
}

// Backlog implements idemoutbox.Metrics.
func (m *OutboxMetrics) Backlog(_ context.Context, pending int64, oldest time.Duration, dead int64) {
	m.pending.Set(float64(pending))
	m.oldest.Set(oldest.Seconds())
	m.dead.Set(float64(dead))
}

// Describe implements prometheus.Collector.
func (m *OutboxMetrics) Describe(ch chan<- *prometheus.Desc) {
	m.deliveries.Describe(ch)
	m.pending.Describe(ch)
	m.oldest.Describe(ch)
	m.dead.Describe(ch)
}

// Collect implements prometheus.Collector.
func (m *OutboxMetrics) Collect(ch chan<- prometheus.Metric) {
	m.deliveries.Collect(ch)
	m.pending.Collect(ch)
	m.oldest.Collect(ch)
	m.dead.Collect(ch)
}
