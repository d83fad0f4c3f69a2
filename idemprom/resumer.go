package idemprom

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemkit/idem"
)

var _ idem.ResumerMetrics = (*Metrics)(nil)

// resumerMetrics are the collectors of the idem.Resumer's passes.
type resumerMetrics struct {
	passes *prometheus.CounterVec
	keys   *prometheus.CounterVec
	oldest prometheus.Gauge
	gaveUp prometheus.Gauge
}

func newResumerMetrics(c Config) resumerMetrics {
	m := resumerMetrics{
		passes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: c.Namespace, Subsystem: "resumer", Name: "passes_total", ConstLabels: c.ConstLabels,
			Help: "Passes of the idem resumer; led=false when another instance held its lock.",
		}, []string{"led"}),
		keys: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: c.Namespace, Subsystem: "resumer", Name: "keys_total", ConstLabels: c.ConstLabels,
			Help: "Unfinished keys the idem resumer worked on, by outcome (completed, released, failed, skipped).",
		}, []string{"outcome"}),
		oldest: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: c.Namespace, Subsystem: "resumer", Name: "oldest_unfinished_seconds", ConstLabels: c.ConstLabels,
			Help: "Age of the oldest unfinished key that the last pass of the idem resumer left unfinished; 0 for none.",
		}),
		gaveUp: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: c.Namespace, Subsystem: "resumer", Name: "gave_up_keys", ConstLabels: c.ConstLabels,
			Help: "Unfinished keys that the last pass of the idem resumer listed and left to an operator, after its MaxAttempts runs did not finish them.",
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

// ResumerPass implements idem.ResumerMetrics.
func (mm *Metrics) ResumerPass(_ context.Context, r idem.ResumerResult) {
	m := &mm.resumer
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

func (m *resumerMetrics) describe(ch chan<- *prometheus.Desc) {
	m.passes.Describe(ch)
	m.keys.Describe(ch)
	m.oldest.Describe(ch)
	m.gaveUp.Describe(ch)
}

func (m *resumerMetrics) collect(ch chan<- prometheus.Metric) {
	m.passes.Collect(ch)
	m.keys.Collect(ch)
	m.oldest.Collect(ch)
	m.gaveUp.Collect(ch)
}
