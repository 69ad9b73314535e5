package results

import (
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/kpsim/kpsim/record"
)

// HistogramCheck is the verdict on one recorded histogram.
type HistogramCheck struct {
	Name   string            `json:"name"`
	Labels map[string]string `json:"labels,omitempty"`
	// Consistent is true when every check below passed.
	Consistent bool `json:"consistent"`
	// Samples names the raw samples the histogram was compared with
	// ("sync seconds, IPv4"), or is empty when kpsim has none for it.
	Samples string `json:"samples,omitempty"`
	// Checks lists what was verified, each with its outcome.
	Checks []string `json:"checks"`
	// Problems lists each failed check; empty when Consistent.
	Problems []string `json:"problems,omitempty"`
}

// CheckHistograms settles whether each recorded histogram can be trusted
// (one check per f.Metrics entry, in its order): cumulative buckets never
// decrease and never exceed the count
// (the incident's dashboard showed larger buckets with smaller counts), and,
// where the file holds the raw samples the histogram observed, count, sum and
// every bucket agree with them. Sync durations are matched against the
// syncs' Seconds, and failing that their wall time, since a histogram may
// observe either; the check says which one matched.
func CheckHistograms(f *record.File) []HistogramCheck {
	out := make([]HistogramCheck, 0, len(f.Metrics))
	for _, m := range f.Metrics {
		c := HistogramCheck{Name: m.Name, Labels: m.Labels}
		c.internal(m)
		if candidates := rawSamples(f, m); len(candidates) > 0 {
			c.againstSamples(m, candidates)
		}
		c.Consistent = len(c.Problems) == 0
		out = append(out, c)
	}
	return out
}

// LabelText is the histogram's labels as Prometheus writes them, sorted by name.
func (c *HistogramCheck) LabelText() string {
	keys := make([]string, 0, len(c.Labels))
	for k := range c.Labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s=%q", k, c.Labels[k])
	}
	return strings.Join(parts, ",")
}

func (c *HistogramCheck) fail(format string, a ...any) {
	c.Problems = append(c.Problems, fmt.Sprintf(format, a...))
}

func (c *HistogramCheck) internal(m record.Metric) {
	ok := true
	for i := 1; i < len(m.Buckets); i++ {
		prev, b := m.Buckets[i-1], m.Buckets[i]
		if b.UpperBound <= prev.UpperBound {
			c.fail("bucket bounds not increasing: le=%g after le=%g", b.UpperBound, prev.UpperBound)
			ok = false
		}
		if b.Count < prev.Count {
			c.fail("cumulative count falls: le=%g has %d, le=%g has %d", b.UpperBound, b.Count, prev.UpperBound, prev.Count)
			ok = false
		}
	}
	c.Checks = append(c.Checks, verdictText("buckets monotonic non-decreasing", ok))
	ok = true
	if n := len(m.Buckets); n > 0 && m.Buckets[n-1].Count > m.Count {
		c.fail("largest finite bucket le=%g holds %d, more than count %d (the +Inf bucket)", m.Buckets[n-1].UpperBound, m.Buckets[n-1].Count, m.Count)
		ok = false
	}
	if m.Count == 0 && m.Sum != 0 {
		c.fail("count is 0 but sum is %g", m.Sum)
		ok = false
	}
	c.Checks = append(c.Checks, verdictText("+Inf bucket (count) covers every finite bucket", ok))
}

// sampleSet is one candidate set of raw samples a histogram may have observed.
type sampleSet struct {
	what string
	xs   []float64
}

func (c *HistogramCheck) againstSamples(m record.Metric, candidates []sampleSet) {
	// Pick the first candidate whose count and sum agree; report against the
	// first when none does.
	chosen := candidates[0]
	for _, s := range candidates {
		if uint64(len(s.xs)) == m.Count && sumsAgree(m.Sum, s.xs) {
			chosen = s
			break
		}
	}
	c.Samples = chosen.what
	n := uint64(len(chosen.xs))
	if n != m.Count {
		c.fail("count %d, but the file holds %d raw samples (%s)", m.Count, n, chosen.what)
	}
	c.Checks = append(c.Checks, verdictText(fmt.Sprintf("count equals %d raw samples", n), n == m.Count))
	s := sum(chosen.xs)
	if !sumsAgree(m.Sum, chosen.xs) {
		c.fail("sum %g, but the raw samples sum to %g (%s)", m.Sum, s, chosen.what)
	}
	c.Checks = append(c.Checks, verdictText("sum equals the raw samples' sum", sumsAgree(m.Sum, chosen.xs)))
	sorted := append([]float64(nil), chosen.xs...)
	sort.Float64s(sorted)
	ok := true
	for _, b := range m.Buckets {
		// Prometheus counts an observation v in every bucket with v <= le.
		want := uint64(sort.Search(len(sorted), func(i int) bool { return sorted[i] > b.UpperBound }))
		if want != b.Count {
			c.fail("bucket le=%g holds %d, the raw samples put %d there", b.UpperBound, b.Count, want)
			ok = false
		}
	}
	c.Checks = append(c.Checks, verdictText("every bucket equals the raw samples at or below its bound", ok))
}

// rawSamples returns the candidate raw samples for m, or nil if kpsim does
// not record what m observed.
func rawSamples(f *record.File, m record.Metric) []sampleSet {
	family, hasFamily := m.Labels[record.LabelFamily]
	suffix := ""
	if hasFamily {
		suffix = ", " + family
	}
	keep := func(s *record.Sync) bool { return !hasFamily || string(s.Family) == family }
	var seconds, wall []float64
	switch m.Name {
	case record.MetricSyncDuration:
		for i := range f.Syncs {
			if s := &f.Syncs[i]; keep(s) {
				seconds = append(seconds, s.Seconds)
				wall = append(wall, s.Wall)
			}
		}
		return []sampleSet{{"sync seconds" + suffix, seconds}, {"sync wall seconds" + suffix, wall}}
	case record.MetricSyncPhaseDuration:
		phase := m.Labels[record.LabelPhase]
		for i := range f.Syncs {
			if s := &f.Syncs[i]; keep(s) {
				for _, p := range s.Phases {
					if p.Name == phase {
						seconds = append(seconds, p.Seconds)
						wall = append(wall, p.Wall)
					}
				}
			}
		}
		what := "phase " + phase + " seconds" + suffix
		return []sampleSet{{what, seconds}, {"phase " + phase + " wall seconds" + suffix, wall}}
	case record.MetricNetworkProgramming:
		for i := range f.Syncs {
			if s := &f.Syncs[i]; keep(s) {
				for _, p := range s.Programmed {
					seconds = append(seconds, p.Seconds)
				}
			}
		}
		return []sampleSet{{"network programming seconds" + suffix, seconds}}
	}
	return nil
}

func verdictText(check string, ok bool) string {
	if ok {
		return check + ": ok"
	}
	return check + ": FAILED"
}

func sum(xs []float64) float64 {
	var s float64
	for _, x := range xs {
		s += x
	}
	return s
}

// closeTo tolerates the rounding of summing float64s in a different order.
// sumsAgree reports whether a histogram's sum is its raw samples' sum, up
// to a nanosecond per sample: a release's samples are differences of its
// histogram's running sum, each off by a rounding of that sum (25 samples
// summing to 2.4 s were measured 1e-8 apart).
func sumsAgree(histogramSum float64, xs []float64) bool {
	return math.Abs(histogramSum-sum(xs)) <= 1e-9*float64(len(xs)+1)+1e-9*math.Abs(histogramSum)
}
