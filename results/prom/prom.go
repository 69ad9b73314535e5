// Package prom reads a Prometheus registry into the results file's
// histograms. It is apart from package results so that the results schema,
// which the proxier imports for its sync records, stays free of the
// Prometheus client and its protobuf runtime.
package prom

import (
	"fmt"
	"math"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/kpsim/kpsim/record"
)

// Histograms returns every classic histogram g exports, as they stand: the
// final state a results file records so that the histogram a dashboard would
// have drawn can be checked against the raw samples later.
func Histograms(g prometheus.Gatherer) ([]record.Metric, error) {
	mfs, err := g.Gather()
	if err != nil {
		return nil, fmt.Errorf("gather metrics: %w", err)
	}
	var out []record.Metric
	for _, mf := range mfs {
		if mf.GetType() != dto.MetricType_HISTOGRAM {
			continue
		}
		for _, m := range mf.GetMetric() {
			h := m.GetHistogram()
			if h == nil {
				continue
			}
			mt := record.Metric{Name: mf.GetName(), Count: h.GetSampleCount(), Sum: h.GetSampleSum(), Buckets: []record.Bucket{}}
			if len(m.GetLabel()) > 0 {
				mt.Labels = map[string]string{}
				for _, lp := range m.GetLabel() {
					mt.Labels[lp.GetName()] = lp.GetValue()
				}
			}
			for _, b := range h.GetBucket() {
				// The +Inf bucket equals Count and cannot be encoded in JSON.
				if math.IsInf(b.GetUpperBound(), +1) {
					continue
				}
				mt.Buckets = append(mt.Buckets, record.Bucket{UpperBound: b.GetUpperBound(), Count: b.GetCumulativeCount()})
			}
			out = append(out, mt)
		}
	}
	return out, nil
}
