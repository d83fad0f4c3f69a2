package idemprom

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemkit/idem"
)

var (
	_ idem.CompleterMetrics = (*CompleterMetrics)(nil)
	_ prometheus.Collector  = (*CompleterMetrics)(nil)
)

// CompleterMetrics is an idem.CompleterMetrics that is also a
// prometheus.Collector. Metrics (with the default namespace "idem"):
//
//	idem_completer_passes_total{led}            counter; led is false for a pass skipped because another instance held the lock
//	idem_completer_keys_total{outcome}          counter; completed, released (passed no recovery point), failed or skipped
//	idem_completer_oldest_unfinished_seconds    gauge; age of the oldest key the last led pass left unfinished, 0 for none
//	idem_completer_gave_up_keys                 gauge; keys the last led pass listed and left to an operator after MaxAttempts runs; alert above 0
type CompleterMetrics struct {
	passes *prometheus.CounterVec
	keys   *prometheus.CounterVec
	oldest prometheus.Gauge
	gaveUp prometheus.Gauge
}

// NewCompleterMetrics builds the collectors of a completer. A nil cfg uses
// the defaults; ClaimBuckets is not used.
func NewCompleterMetrics(cfg *Config) *CompleterMetrics {
	c := Config{}
	if cfg != nil {
		c = *cfg
	}
	if c.Namespace == "" {
		c.Namespace = NamespaceDefault
	}
	m := &CompleterMetrics{
		passes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: c.Namespace, Subsystem: "completer", Name: "passes_total", ConstLabels: c.ConstLabels,
			Help: "Passes of the idem completer; led=false when another instance held its lock.",
		}, []string{"led"}),
		keys: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: c.Namespace, Subsystem: "completer", Name: "keys_total", ConstLabels: c.ConstLabels,
			Help: "Unfinished keys the idem completer worked on, by outcome (completed, released, failed, skipped).",
		}, []string{"outcome"}),
		oldest: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: c.Namespace, Subsystem: "completer", Name: "oldest_unfinished_seconds", ConstLabels: c.ConstLabels,
			Help: "Age of the oldest unfinished key that the last pass of the idem completer left unfinished; 0 for none.",
		}),
		gaveUp: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: c.Namespace, Subsystem: "completer", Name: "gave_up_keys", ConstLabels: c.ConstLabels,
			Help: "Unfinished keys that the last pass of the idem completer listed and left to an operator, after its MaxAttempts runs did not finish them.",
		}),
	}
	for _, led := range []string{"true", "false"} {
		m.passes.WithLabelValues(led)
	}
	for _, o := range []string{"completed", "released", "failed", "skipped"} {
		m.keys.WithLabelValues(o)
	}
	return m
}

// CompleterPass implements idem.CompleterMetrics.
func (m *CompleterMetrics) CompleterPass(_ context.Context, r idem.CompleterResult) {
	if !r.Led {
		m.passes.WithLabelValues("false").Inc()
		return
	}
	m.passes.WithLabelValues("true").Inc()
	m.keys.WithLabelValues("completed").Add(float64(r.Completed))
	m.keys.WithLabelValues("released").Add(float64(r.Released))
	m.keys.WithLabelValues("failed").Add(float64(r.Failed))
	m.keys.WithLabelValues("skipped").Add(float64(r.Skipped))
	m.oldest.Set(r.Oldest.Seconds())
	m.gaveUp.Set(float64(r.GaveUp))
}

// Describe implements prometheus.Collector.
func (m *CompleterMetrics) Describe(ch chan<- *prometheus.Desc) {
	m.passes.Describe(ch)
	m.keys.Describe(ch)
	m.oldest.Describe(ch)
	m.gaveUp.Describe(ch)
}

// Collect implements prometheus.Collector.
func (m *CompleterMetrics) Collect(ch chan<- prometheus.Metric) {
	m.passes.Collect(ch)
	m.keys.Collect(ch)
	m.oldest.Collect(ch)
	m.gaveUp.Collect(ch)
}
