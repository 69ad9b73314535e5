package results_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/kpsim/kpsim/dataplane"
	"github.com/kpsim/kpsim/record"
	"github.com/kpsim/kpsim/results"
	"github.com/kpsim/kpsim/results/prom"
	"github.com/kpsim/kpsim/results/resultstest"
)

func TestNewDist(t *testing.T) {
	tests := []struct {
		name string
		xs   []float64
		want record.Dist
	}{
		{"empty", nil, record.Dist{}},
		{"one", []float64{2}, record.Dist{N: 1, Mean: 2, P50: 2, P90: 2, P99: 2, Max: 2}},
		{"unsorted hundred", hundred(), record.Dist{N: 100, Mean: 50.5, P50: 50, P90: 90, P99: 99, Max: 100}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, results.NewDist(tt.xs))
		})
	}
}

func hundred() []float64 {
	xs := make([]float64, 100)
	for i := range xs {
		xs[i] = float64((i*37)%100 + 1)
	}
	return xs
}

func TestSummarizeSlowest(t *testing.T) {
	f := &record.File{Syncs: []record.Sync{
		{Proxier: 0, Family: dataplane.IPv4, Seq: 1, Seconds: 1, Phases: []record.Phase{{Name: "a", Seconds: 0.2}, {Name: "b", Seconds: 0.8}}},
		{Proxier: 1, Family: dataplane.IPv4, Seq: 1, Seconds: 15.4, Phases: []record.Phase{{Name: "ipset-entries", Seconds: 13.3}, {Name: "b", Seconds: 2.1}},
			Programmed: []record.Programmed{{Object: "ns/a", Seconds: 27.5}}},
		{Proxier: 1, Family: dataplane.IPv4, Seq: 2, Seconds: 0.4, Phases: []record.Phase{{Name: "a", Seconds: 0.4}}},
	}}
	results.Summarize(f)
	require.Equal(t, 3, f.Summary.Syncs)
	require.Equal(t, &record.SlowestSync{Proxier: 1, Family: dataplane.IPv4, Seq: 1, Seconds: 15.4, Phase: "ipset-entries", PhaseSeconds: 13.3}, f.Summary.Slowest)
	require.Equal(t, 2, f.Summary.Phases["a"].N)
	require.Equal(t, 0.4, f.Summary.Phases["a"].Max)
	require.Equal(t, 1, f.Summary.Programming.N)
	require.Equal(t, 27.5, f.Summary.Programming.P99)
	require.Equal(t, 15.4, f.Summary.Sync.Max)
}

func TestDisrupt(t *testing.T) {
	t0 := resultstest.Epoch
	at := func(target int, ms int) record.Failure {
		return record.Failure{Target: target, Time: t0.Add(time.Duration(ms) * time.Millisecond), Outcome: "refused"}
	}
	timedOut := func(target int, ms int, seconds float64) record.Failure {
		f := at(target, ms)
		f.Outcome, f.Seconds = "timeout", seconds
		return f
	}
	targets := []record.Target{{Service: "ns/a:http"}, {Service: "ns/b:http"}, {Service: "ns/a:https"}}
	tests := []struct {
		name     string
		failures []record.Failure
		interval float64
		windows  int
		seconds  float64
		longest  float64
		services int
	}{
		{name: "no failures", interval: 0.1},
		{name: "one failure is one interval", failures: []record.Failure{at(0, 0)}, interval: 0.1, windows: 1, seconds: 0.1, longest: 0.1, services: 1},
		{name: "consecutive failures one window", failures: []record.Failure{at(0, 0), at(0, 100), at(0, 200)}, interval: 0.1, windows: 1, seconds: 0.3, longest: 0.3, services: 1},
		{name: "jittered attempts still consecutive", failures: []record.Failure{at(0, 0), at(0, 140), at(0, 260)}, interval: 0.1, windows: 1, seconds: 0.36, longest: 0.36, services: 1},
		{name: "a gap means a success in between", failures: []record.Failure{at(0, 0), at(0, 100), at(0, 400)}, interval: 0.1, windows: 2, seconds: 0.3, longest: 0.2, services: 1},
		{name: "overlapping targets union", failures: []record.Failure{at(0, 0), at(0, 100), at(1, 100), at(1, 200), at(1, 300)}, interval: 0.1, windows: 2, seconds: 0.4, longest: 0.3, services: 2},
		{name: "unsorted input", failures: []record.Failure{at(2, 200), at(2, 0), at(2, 100)}, interval: 0.1, windows: 1, seconds: 0.3, longest: 0.3, services: 1},
		{name: "a timeout ends its window when it gave up", failures: []record.Failure{timedOut(0, 0, 0.5), timedOut(0, 500, 0.5)}, interval: 0.1, windows: 1, seconds: 1, longest: 1, services: 1},
		{name: "unknown interval joins everything", failures: []record.Failure{at(0, 0), at(0, 5000)}, windows: 1, seconds: 5, longest: 5, services: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := &record.Probes{Basis: record.Modeled, Interval: tt.interval, Targets: targets, Attempts: 100, Failures: tt.failures}
			d := results.Disrupt(p)
			require.Len(t, d.Windows, tt.windows)
			require.InDelta(t, tt.seconds, d.Seconds, 1e-9)
			require.InDelta(t, tt.longest, d.LongestGap, 1e-9)
			require.Equal(t, tt.services, d.ServicesAffected)
			require.Equal(t, len(tt.failures), d.FailedAttempts)
			require.Equal(t, record.Modeled, d.Basis)
			total := 0
			for _, w := range d.Windows {
				total += w.Failures
			}
			require.Equal(t, len(tt.failures), total)
		})
	}
	require.Equal(t, record.Disruption{Windows: []record.Window{}}, results.Disrupt(nil))
}

func TestWriteRead(t *testing.T) {
	dir := t.TempDir()
	f := resultstest.File(resultstest.Options{Seed: 1, Syncs: 6, Probes: true, Metrics: true, Noise: 0.05})
	path := filepath.Join(dir, "sub", "r.json")
	require.NoError(t, results.Write(path, f))
	g, err := results.Read(path)
	require.NoError(t, err)
	require.Equal(t, f.Syncs, g.Syncs)
	require.Equal(t, f.Summary.Sync, g.Summary.Sync)
	require.Equal(t, f.Totals, g.Totals)
	require.Equal(t, f.Metrics, g.Metrics)
	left, err := filepath.Glob(filepath.Join(dir, "sub", ".*"))
	require.NoError(t, err)
	require.Empty(t, left, "temporary files left behind")

	tests := []struct{ name, body, errContains string }{
		{"newer schema", `{"schemaVersion": 99}`, "schemaVersion 99, this kpsim reads versions 1 to 3"},
		{"no schema", `{"syncs": []}`, "no schemaVersion"},
		{"not json", `<html>`, "not a kpsim results file"},
		{"bad op name", `{"schemaVersion": 1, "totals": {"ops": {"teleport": 1}}}`, `unknown kernel operation "teleport"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := filepath.Join(dir, tt.name+".json")
			require.NoError(t, os.WriteFile(p, []byte(tt.body), 0o644))
			_, err := results.Read(p)
			require.ErrorContains(t, err, tt.errContains)
			require.ErrorContains(t, err, p)
		})
	}
	_, err = results.Read(filepath.Join(dir, "missing.json"))
	require.ErrorContains(t, err, "missing.json")
}

func TestPrintSummary(t *testing.T) {
	f := resultstest.File(resultstest.Options{Name: "smoke", Seed: 1, Syncs: 8, Probes: true, IPSetExec: true, Metrics: true})
	var b bytes.Buffer
	require.NoError(t, results.PrintSummary(&b, f))
	out := b.String()
	for _, want := range []string{"kpsim smoke", "syncs", "8: p50", "(modeled)", "slowest phase ipset-entries",
		"kernel writes", "ipset-add", "(counted)", "deleted, re-added  33", "net programming", "disruption",
		"of 400 attempts failed", "2 services", "(measured)", "histograms         9 exported, all consistent"} {
		require.Contains(t, out, want)
	}

	empty := &record.File{Basis: record.Measured, Backend: "kernel"}
	results.Summarize(empty)
	b.Reset()
	require.NoError(t, results.PrintSummary(&b, empty))
	require.Contains(t, b.String(), "syncs              none")
	require.Contains(t, b.String(), "no probes ran")
	require.Contains(t, b.String(), "no changes with a trigger time")
}

func TestHistogramsAndChecks(t *testing.T) {
	f := resultstest.File(resultstest.Options{Seed: 3, Syncs: 10, DualStack: true, Metrics: true, Noise: 0.1})
	require.NotEmpty(t, f.Metrics)
	checks := results.CheckHistograms(f)
	require.Len(t, checks, len(f.Metrics))
	for _, c := range checks {
		require.True(t, c.Consistent, "%s %v: %v", c.Name, c.Labels, c.Problems)
		require.NotEmpty(t, c.Samples, "%s should be matched with raw samples", c.Name)
		require.Len(t, c.Checks, 5)
	}

	// Break the file the ways the incident's dashboard looked broken.
	idx := func(name, family, phase string) int {
		for i, m := range f.Metrics {
			if m.Name == name && m.Labels[record.LabelFamily] == family && m.Labels[record.LabelPhase] == phase {
				return i
			}
		}
		t.Fatalf("no metric %s %s %s", name, family, phase)
		return -1
	}
	tests := []struct {
		name    string
		mutate  func(m *record.Metric)
		problem string
	}{
		{"non-monotonic buckets", func(m *record.Metric) { m.Buckets[len(m.Buckets)-2].Count = m.Count + 3 }, "cumulative count falls"},
		{"count beyond +Inf", func(m *record.Metric) { m.Count-- }, "count"},
		{"sum disagrees", func(m *record.Metric) { m.Sum += 16 }, "sum"},
		{"bucket shifted", func(m *record.Metric) { m.Buckets[0].Count++ }, "the raw samples put"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := *f
			g.Metrics = append([]record.Metric(nil), f.Metrics...)
			i := idx(record.MetricSyncDuration, "IPv6", "")
			m := g.Metrics[i]
			m.Buckets = append([]record.Bucket(nil), m.Buckets...)
			tt.mutate(&m)
			g.Metrics[i] = m
			cs := results.CheckHistograms(&g)
			require.False(t, cs[i].Consistent)
			require.NotEmpty(t, cs[i].Problems)
			require.Contains(t, strings.Join(cs[i].Problems, "\n"), tt.problem)
			for j, c := range cs {
				if j != i {
					require.True(t, c.Consistent)
				}
			}
		})
	}

	// A histogram kpsim has no raw samples for is checked internally only.
	reg := prometheus.NewRegistry()
	h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "other_seconds", Buckets: []float64{1, 2}})
	reg.MustRegister(h, prometheus.NewCounter(prometheus.CounterOpts{Name: "not_a_histogram_total"}))
	h.Observe(0.5)
	h.Observe(3)
	ms, err := prom.Histograms(reg)
	require.NoError(t, err)
	require.Equal(t, []record.Metric{{Name: "other_seconds", Count: 2, Sum: 3.5,
		Buckets: []record.Bucket{{UpperBound: 1, Count: 1}, {UpperBound: 2, Count: 1}}}}, ms)
	cs := results.CheckHistograms(&record.File{Metrics: ms})
	require.True(t, cs[0].Consistent)
	require.Empty(t, cs[0].Samples)
	require.Len(t, cs[0].Checks, 2)
}

func TestSummarizeCountsFailedSyncsApart(t *testing.T) {
	f := &record.File{Syncs: []record.Sync{
		{Seq: 1, Seconds: 1},
		{Seq: 2, Seconds: 50, Error: "ipset add KUBE-CLUSTER-IP 10.0.0.1,tcp:80: set is full"},
		{Seq: 3, Seconds: 3},
	}}
	results.Summarize(f)
	require.Equal(t, 3, f.Summary.Syncs)
	require.Equal(t, 1, f.Summary.FailedSyncs)
	require.Equal(t, 2, f.Summary.Sync.N, "a failed sync's duration is not a sync duration")
	require.Equal(t, 3.0, f.Summary.Sync.Max)
}

func TestSummarizeReachable(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	fail := func(target int, ms ...int) []record.Failure {
		var out []record.Failure
		for _, m := range ms {
			out = append(out, record.Failure{Target: target, Time: at(m), Outcome: "no-destination"})
		}
		return out
	}
	p := &record.Probes{Interval: 0.1, Targets: []record.Target{
		// Fails from its first attempt for 2 s, then works.
		{Attempts: 30, First: t0, FirstOK: at(2000), Recovered: []time.Time{at(2000)}},
		// Works, breaks twice: 300 ms, then 100 ms.
		{Attempts: 30, First: t0, FirstOK: t0, Recovered: []time.Time{at(1300), at(2100)}},
		{Attempts: 30, First: t0},              // never reached
		{Attempts: 30, First: t0, FirstOK: t0}, // never broke: no sample
	}}
	var ms []int
	for m := 0; m < 2000; m += 100 {
		ms = append(ms, m)
	}
	p.Failures = append(p.Failures, fail(0, ms...)...)
	p.Failures = append(p.Failures, fail(1, 1000, 1100, 1200, 2000)...)
	p.Failures = append(p.Failures, fail(2, 0, 100, 200)...)
	f := &record.File{Start: t0, End: at(3000), Probes: p}
	results.Summarize(f)
	// One sample per window that recovered: 2 s, 300 ms, 100 ms; the
	// target that never succeeded is one window that never recovered.
	require.Equal(t, 3, f.Summary.Reachable.N)
	require.Equal(t, 2.0, f.Summary.Reachable.Max)
	require.InDelta(t, 0.3, f.Summary.Reachable.P50, 1e-9)
	require.Equal(t, 1, f.Summary.Unreachable)

	// A version 2 file has no recoveries: from each target's first attempt.
	f.SchemaVersion = 2
	results.Summarize(f)
	require.Equal(t, 3, f.Summary.Reachable.N)
	require.Equal(t, 0.0, f.Summary.Reachable.P50)
}

func TestPlural(t *testing.T) {
	for _, tc := range []struct {
		n    int
		want string
	}{{0, "syncs"}, {1, "sync"}, {2, "syncs"}, {-1, "syncs"}} {
		require.Equal(t, tc.want, results.Plural(tc.n, "sync", "syncs"), "%d", tc.n)
	}
	require.Equal(t, "none", results.ListSome(nil, 3))
	require.Equal(t, "a, b", results.ListSome([]string{"a", "b"}, 2))
	require.Equal(t, "a, b and 1 more", results.ListSome([]string{"a", "b", "c"}, 2))
}

// TestSummarySaysOneInTheSingular: a count of one takes the singular
// ("1 syncs", "1 services" and "1 windows" were printed).
func TestSummarySaysOneInTheSingular(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(f *record.File)
		want   string
	}{
		{"a segment's syncs", func(*record.File) {}, "restart proxier, at 1.05s): 1 sync, p99"},
		{"write kinds left out", func(*record.File) {}, "ipset-add 2, 1 more kind\n"},
		{"disruption", func(f *record.File) {
			d := &f.Summary.Disruption
			d.ServicesAffected, d.FailedAttempts, d.Attempts = 1, 1, 1
		}, "longest window 2.5s, 1 service, 1 of 1 attempt failed"},
		{"net programming", func(f *record.File) { f.Summary.Programming = results.NewDist([]float64{0.1}) }, "net programming    1 change: p50"},
		{"windows", func(f *record.File) { f.Summary.Reachable, f.Summary.Unreachable = results.NewDist([]float64{0.5}), 0 }, "over 1 window\n"},
		{"a window that never recovered", func(f *record.File) { f.Summary.Reachable, f.Summary.Unreachable = record.Dist{}, 1 },
			"never: none of 1 disruption window recovered"},
		{"targets of an old file", func(f *record.File) {
			f.SchemaVersion = 2
			f.Summary.Reachable, f.Summary.Unreachable = results.NewDist([]float64{0.5}), 0
		}, "over 1 target\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := resultstest.File(resultstest.Options{Name: "smoke", Seed: 1, Syncs: 2, Probes: true, Services: 1, FirstSuccess: true})
			tc.change(f)
			var b bytes.Buffer
			require.NoError(t, results.PrintSummary(&b, f))
			require.Contains(t, b.String(), tc.want)
			require.NotRegexp(t, `\b1 (syncs|services|attempts|changes|windows|targets|kinds)\b`, b.String())
		})
	}
}

// TestFormatSeconds: a duration in the unit a person would use, never in
// exponent notation (a 100,000-service first sync in nftables mode was
// printed "2.57e+03s").
func TestFormatSeconds(t *testing.T) {
	for s, want := range map[float64]string{
		0: "0", 4e-7: "400ns", 0.00025: "250µs", 0.0123: "12.3ms", 1.5: "1.5s", 999.4: "999s",
		999.6: "16m40s", 2570: "42m50s", 3599.4: "59m59s", 3599.6: "1h00m", 3860: "1h04m", 36000: "10h00m",
	} {
		require.Equal(t, want, results.FormatSeconds(s), "%g s", s)
	}
}
