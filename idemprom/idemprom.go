// Package idemprom reports what the idem middleware does as Prometheus
// metrics. It builds collectors; the application registers them on its own
// registry, so there are no global registrations:
//
//	m := idemprom.New(nil)
//	registry.MustRegister(m)
//	mw, err := idem.New(store, &idem.Config{ClientID: clientOf, Metrics: m})
//
// Metrics (with the default namespace "idem"):
//
//	idem_requests_total{result}             counter, one of idem's Result values
//	idem_claim_duration_seconds{outcome}    histogram of Store.Claim, outcome ok or error
//	idem_purge_deleted_total                counter of keys deleted by the idem.Purger
//	idem_purge_batches_total{outcome}       counter of purge batches, outcome ok or error
//	idem_purge_runs_total{outcome}          counter of purge runs, outcome ok or error
//	idem_purge_run_duration_seconds         histogram of purge runs
//	idem_purge_last_success_timestamp_seconds  gauge, Unix time of the last run that succeeded
//	idem_purge_leader                       gauge, 1 while this instance holds the purge lock
//	idem_keys_started                       gauge, started keys (read by the instance that purges)
//	idem_keys_stuck                         gauge, started keys whose lease expired (same)
//	idem_keys_oldest_started_age_seconds    gauge, age of the oldest started key's lease (same)
//	idem_resumer_passes_total{led}          counter of the idem.Resumer's passes; led is false for a pass skipped because another instance held the lock
//	idem_resumer_keys_total{outcome}        counter of keys it worked on: completed, released (passed no recovery point), failed or skipped
//	idem_resumer_oldest_unfinished_seconds  gauge, age of the oldest key the last led pass left unfinished, 0 for none
//	idem_resumer_gave_up_keys               gauge, keys the last led pass left to an operator after MaxAttempts runs; alert above 0
package idemprom

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemkit/idem"
)

// resultNames are the values of the result label: idem's Results.
var resultNames = func() []string {
	var names []string
	for _, r := range idem.Results() {
		names = append(names, string(r))
	}
	return names
}()

// NamespaceDefault is the default metric namespace.
const NamespaceDefault = "idem"

// Config configures the collectors.
type Config struct {
	// Namespace prefixes every metric name. Defaults to NamespaceDefault.
	Namespace string
	// ConstLabels are added to every metric, such as the service name.
	// Defaults to none.
	ConstLabels prometheus.Labels
	// ClaimBuckets are the histogram buckets of claim durations, in
	// seconds. Defaults to 0.25 ms to 2.5 s, exponential.
	ClaimBuckets []float64
}

var (
	_ idem.Metrics         = (*Metrics)(nil)
	_ idem.PurgeMetrics    = (*Metrics)(nil)
	_ idem.KeyStatsMetrics = (*Metrics)(nil)
	_ prometheus.Collector = (*Metrics)(nil)
)

// Metrics is an idem.Metrics and an idem.PurgeMetrics that is also a
// prometheus.Collector.
type Metrics struct {
	requests *prometheus.CounterVec
	claims   *prometheus.HistogramVec
	purge    purgeMetrics
	resumer  resumerMetrics
}

// New builds the collectors. A nil cfg uses the defaults.
func New(cfg *Config) *Metrics {
	c := Config{}
	if cfg != nil {
		c = *cfg
	}
	if c.Namespace == "" {
		c.Namespace = NamespaceDefault
	}
	if c.ClaimBuckets == nil {
		c.ClaimBuckets = prometheus.ExponentialBuckets(0.00025, 2.5, 10)
	}
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: c.Namespace, Name: "requests_total", ConstLabels: c.ConstLabels,
			Help: "Requests handled by the idem middleware, by result (" + strings.Join(resultNames, ", ") + ").",
		}, []string{"result"}),
		claims: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: c.Namespace, Name: "claim_duration_seconds", ConstLabels: c.ConstLabels,
			Help:    "Time of Store.Claim calls, by outcome (ok or error).",
			Buckets: c.ClaimBuckets,
		}, []string{"outcome"}),
	}
	// Every result exists from the start, so rates and alerts need no
	// special case for a series that has not appeared yet.
	for _, r := range resultNames {
		m.requests.WithLabelValues(r)
	}
	m.purge = newPurgeMetrics(c)
	m.resumer = newResumerMetrics(c)
	return m
}

// Request implements idem.Metrics.
func (m *Metrics) Request(_ context.Context, r idem.Result) {
	m.requests.WithLabelValues(string(r)).Inc()
}

// Claim implements idem.Metrics. A claim abandoned because the client went
// away counts as ok: the store did not fail.
func (m *Metrics) Claim(_ context.Context, d time.Duration, err error) {
	outcome := "ok"
	if err != nil && !errors.Is(err, context.Canceled) {
		outcome = "error"
	}
	m.claims.WithLabelValues(outcome).Observe(d.Seconds())
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	m.requests.Describe(ch)
	m.claims.Describe(ch)
	m.purge.describe(ch)
	m.resumer.describe(ch)
}

// Collect implements prometheus.Collector.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	m.requests.Collect(ch)
	m.claims.Collect(ch)
	m.purge.collect(ch)
	m.resumer.collect(ch)
}
