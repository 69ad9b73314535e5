package observed

import (
	"fmt"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/kpsim/kpsim/record"
)

// metricsRead is what a sync record needs of the release's registry at one
// instant, for one family.
type metricsRead struct {
	syncs         uint64  // observations of the sync-duration histogram
	seconds       float64 // their sum
	partial       uint64  // observations of the partial-sync histogram (nftables mode)
	lastSync      float64 // the last successful sync, Unix seconds
	programmed    uint64  // network programming observations
	programmedSum float64
}

// readMetrics gathers the release's registry: the family's series of its
// sync metrics (ip_family="IPv4"), or the unlabelled ones of a release
// whose metrics carry no family.
func (f *Family) readMetrics() (metricsRead, error) {
	mfs, err := f.g.metrics.Gather()
	if err != nil {
		return metricsRead{}, fmt.Errorf("read kube-proxy's metrics: %w", err)
	}
	var r metricsRead
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			if !f.ours(m) {
				continue
			}
			switch mf.GetName() {
			case record.MetricSyncDuration:
				r.syncs, r.seconds = m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum()
			case record.MetricPartialSyncDuration:
				r.partial = m.GetHistogram().GetSampleCount()
			case record.MetricNetworkProgramming:
				r.programmed, r.programmedSum = m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum()
			case record.MetricLastSync:
				r.lastSync = m.GetGauge().GetValue()
			}
		}
	}
	return r, nil
}

// ours reports whether a series is the family's.
func (f *Family) ours(m *dto.Metric) bool {
	for _, l := range m.GetLabel() {
		if l.GetName() == record.LabelFamily {
			return f.g.labelled && l.GetValue() == string(f.family)
		}
	}
	return !f.g.labelled
}

// Prefixed is g with only the metric families whose names start with
// prefix: a release's own metrics ("kubeproxy_"), without the Go runtime's
// and the process's its registry also holds.
func Prefixed(g prometheus.Gatherer, prefix string) prometheus.Gatherer {
	return prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) {
		mfs, err := g.Gather()
		out := mfs[:0]
		for _, mf := range mfs {
			if strings.HasPrefix(mf.GetName(), prefix) {
				out = append(out, mf)
			}
		}
		return out, err
	})
}
