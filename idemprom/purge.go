package idemprom

import (
	"context"
	"time"

	"github.com/idemkit/idem/idemstore"
	"github.com/prometheus/client_golang/prometheus"
)

// purgeMetrics are the collectors of the idem.Purger.
type purgeMetrics struct {
	deleted     prometheus.Counter
	batches     *prometheus.CounterVec
	runs        *prometheus.CounterVec
	runDuration prometheus.Histogram
	lastSuccess prometheus.Gauge
	leader      prometheus.Gauge

	started      prometheus.Gauge
	stuck        prometheus.Gauge
	oldestAgeSec prometheus.Gauge
}

func newPurgeMetrics(c Config) purgeMetrics {
	m := purgeMetrics{
		deleted: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: c.Namespace, Name: "purge_deleted_total", ConstLabels: c.ConstLabels,
			Help: "Keys past retention deleted by the purge.",
		}),
		batches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: c.Namespace, Name: "purge_batches_total", ConstLabels: c.ConstLabels,
			Help: "Purge batches, by outcome (ok or error).",
		}, []string{"outcome"}),
		runs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: c.Namespace, Name: "purge_runs_total", ConstLabels: c.ConstLabels,
			Help: "Purge runs (batches until one is not full), by outcome (ok or error).",
		}, []string{"outcome"}),
		runDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: c.Namespace, Name: "purge_run_duration_seconds", ConstLabels: c.ConstLabels,
			Help:    "Time of purge runs.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 10),
		}),
		lastSuccess: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: c.Namespace, Name: "purge_last_success_timestamp_seconds", ConstLabels: c.ConstLabels,
			Help: "Unix time at which the last purge run of this instance succeeded; 0 before the first.",
		}),
		leader: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: c.Namespace, Name: "purge_leader", ConstLabels: c.ConstLabels,
			Help: "1 while this instance holds the purge lock and purges, else 0.",
		}),
		started: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: c.Namespace, Name: "keys_started", ConstLabels: c.ConstLabels,
			Help: "Keys started and not completed (in flight, or left by a holder that died), counted after each purge run by the instance that purges; 0 on the others.",
		}),
		stuck: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: c.Namespace, Name: "keys_stuck", ConstLabels: c.ConstLabels,
			Help: "Started keys whose lease expired, counted after each purge run by the instance that purges; 0 on the others.",
		}),
		oldestAgeSec: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: c.Namespace, Name: "keys_oldest_started_age_seconds", ConstLabels: c.ConstLabels,
			Help: "Age of the lease of the oldest started key, read after each purge run by the instance that purges; 0 when there is none, and on the others.",
		}),
	}
	for _, o := range []string{"ok", "error"} {
		m.batches.WithLabelValues(o)
		m.runs.WithLabelValues(o)
	}
	return m
}

func outcome(err error) string {
	if err != nil {
		return "error"
	}
	return "ok"
}

// PurgeBatch implements idem.PurgeMetrics.
func (m *Metrics) PurgeBatch(_ context.Context, deleted int64, _ time.Duration, err error) {
	m.purge.deleted.Add(float64(deleted))
	m.purge.batches.WithLabelValues(outcome(err)).Inc()
}

// PurgeRun implements idem.PurgeMetrics.
func (m *Metrics) PurgeRun(_ context.Context, _ int64, d time.Duration, err error) {
	m.purge.runs.WithLabelValues(outcome(err)).Inc()
	m.purge.runDuration.Observe(d.Seconds())
	if err == nil {
		m.purge.lastSuccess.SetToCurrentTime()
	}
}

// PurgeLeader implements idem.PurgeMetrics.
func (m *Metrics) PurgeLeader(_ context.Context, leading bool) {
	v := 0.0
	if leading {
		v = 1
	}
	m.purge.leader.Set(v)
	if !leading {
		// Another instance reports the counts now.
		m.purge.started.Set(0)
		m.purge.stuck.Set(0)
		m.purge.oldestAgeSec.Set(0)
	}
}

// KeyStats implements idem.KeyStatsMetrics.
func (m *Metrics) KeyStats(_ context.Context, s idemstore.KeyStats, now time.Time) {
	m.purge.started.Set(float64(s.Started))
	m.purge.stuck.Set(float64(s.Stuck))
	age := 0.0
	if !s.OldestStarted.IsZero() {
		age = now.Sub(s.OldestStarted).Seconds()
	}
	m.purge.oldestAgeSec.Set(age)
}

func (p *purgeMetrics) describe(ch chan<- *prometheus.Desc) {
	p.deleted.Describe(ch)
	p.batches.Describe(ch)
	p.runs.Describe(ch)
	p.runDuration.Describe(ch)
	p.lastSuccess.Describe(ch)
	p.leader.Describe(ch)
	p.started.Describe(ch)
	p.stuck.Describe(ch)
	p.oldestAgeSec.Describe(ch)
}

func (p *purgeMetrics) collect(ch chan<- prometheus.Metric) {
	p.deleted.Collect(ch)
	p.batches.Collect(ch)
	p.runs.Collect(ch)
	p.runDuration.Collect(ch)
	p.lastSuccess.Collect(ch)
	p.leader.Collect(ch)
	p.started.Collect(ch)
	p.stuck.Collect(ch)
	p.oldestAgeSec.Collect(ch)
}
