package proxier

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kpsim/kpsim/record"
)

// Metrics are kube-proxy's sync metrics (pkg/proxy/metrics, with the
// ip_family label they carry since 1.33) plus kpsim's per-phase histogram.
// One Metrics is shared by every proxier of a run, so a restarted proxier
// keeps adding to the same series, as a scraped kube-proxy would look.
type Metrics struct {
	SyncDuration        *prometheus.HistogramVec
	NetworkProgramming  *prometheus.HistogramVec
	LastTimestamp       *prometheus.GaugeVec
	LastQueuedTimestamp *prometheus.GaugeVec
	EndpointChangesPend *prometheus.GaugeVec
	EndpointChangesTot  *prometheus.CounterVec
	ServiceChangesPend  *prometheus.GaugeVec
	ServiceChangesTot   *prometheus.CounterVec
	RestoreFailures     *prometheus.CounterVec
	PhaseDuration       *prometheus.HistogramVec
}

// SyncBuckets are kube-proxy's sync duration buckets: 1 ms doubling to 16.384 s.
var SyncBuckets = prometheus.ExponentialBuckets(0.001, 2, 15)

// ProgrammingBuckets are kube-proxy's network programming latency buckets.
var ProgrammingBuckets = func() []float64 {
	b := []float64{0.25, 0.5}
	b = append(b, prometheus.LinearBuckets(1, 1, 59)...)
	b = append(b, prometheus.LinearBuckets(60, 5, 12)...)
	return append(b, prometheus.LinearBuckets(120, 30, 7)...)
}()

// NewMetrics creates the metrics and registers them with reg (which may be nil).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	fam := []string{record.LabelFamily}
	m := &Metrics{
		SyncDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: record.MetricSyncDuration, Help: "SyncProxyRules latency in seconds",
			Buckets: SyncBuckets,
		}, fam),
		NetworkProgramming: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: record.MetricNetworkProgramming, Help: "In Cluster Network Programming Latency in seconds",
			Buckets: ProgrammingBuckets,
		}, fam),
		LastTimestamp: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: record.MetricLastSync, Help: "The last time proxy rules were successfully synced",
		}, fam),
		LastQueuedTimestamp: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: record.MetricLastQueued, Help: "The last time a sync of proxy rules was queued",
		}, fam),
		EndpointChangesPend: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: record.MetricEndpointChangesPending, Help: "Pending proxy rules Endpoint changes",
		}, fam),
		EndpointChangesTot: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: record.MetricEndpointChangesTotal, Help: "Cumulative proxy rules Endpoint changes",
		}, fam),
		ServiceChangesPend: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: record.MetricServiceChangesPending, Help: "Pending proxy rules Service changes",
		}, fam),
		ServiceChangesTot: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: record.MetricServiceChangesTotal, Help: "Cumulative proxy rules Service changes",
		}, fam),
		RestoreFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: record.MetricRestoreFailures, Help: "Cumulative proxy iptables restore failures",
		}, fam),
		PhaseDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: record.MetricSyncPhaseDuration, Help: "Duration of one named phase of syncProxyRules in seconds",
			Buckets: SyncBuckets,
		}, []string{record.LabelPhase}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{
			m.SyncDuration, m.NetworkProgramming, m.LastTimestamp, m.LastQueuedTimestamp,
			m.EndpointChangesPend, m.EndpointChangesTot, m.ServiceChangesPend, m.ServiceChangesTot,
			m.RestoreFailures, m.PhaseDuration,
		} {
			reg.MustRegister(c)
		}
	}
	return m
}
