package idemprom

import (
	"context"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemkit/idem/idemconsume"
)

var (
	_ idemconsume.Metrics  = (*ConsumerMetrics)(nil)
	_ prometheus.Collector = (*ConsumerMetrics)(nil)
)

// ConsumerMetrics is an idemconsume.Metrics that is also a
// prometheus.Collector. Metrics (with the default namespace "idem"):
//
//	idem_consumer_messages_total{consumer,outcome,redelivered}  counter
//
// outcome is an idemconsume.Outcome: duplicates absorbed are
// outcome="duplicate", dead letters outcome="mismatch", "rejected" or
// "malformed"; redelivered is the broker's flag ("true", "false"), so
// that redeliveries are counted whatever became of them.
type ConsumerMetrics struct {
	messages *prometheus.CounterVec
}

// NewConsumer builds the consumers' collectors. A nil cfg uses the
// defaults; ClaimBuckets is not used.
func NewConsumer(cfg *Config) *ConsumerMetrics {
	c := Config{}
	if cfg != nil {
		c = *cfg
	}
	if c.Namespace == "" {
		c.Namespace = NamespaceDefault
	}
	var outcomes []string
	for _, o := range idemconsume.Outcomes() {
		outcomes = append(outcomes, string(o))
	}
	return &ConsumerMetrics{
		messages: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: c.Namespace, Subsystem: "consumer", Name: "messages_total", ConstLabels: c.ConstLabels,
			Help: "Messages handled by idempotent consumers, by consumer, outcome (" + strings.Join(outcomes, ", ") + ") and the broker's redelivered flag.",
		}, []string{"consumer", "outcome", "redelivered"}),
	}
}

// Message implements idemconsume.Metrics.
func (m *ConsumerMetrics) Message(_ context.Context, consumer string, r idemconsume.Result, redelivered bool) {
	m.messages.WithLabelValues(consumer, string(r.Outcome), strconv.FormatBool(redelivered)).Inc()
}

// Describe implements prometheus.Collector.
func (m *ConsumerMetrics) Describe(ch chan<- *prometheus.Desc) { m.messages.Describe(ch) }

// Collect implements prometheus.Collector.
func (m *ConsumerMetrics) Collect(ch chan<- prometheus.Metric) { m.messages.Collect(ch) }
