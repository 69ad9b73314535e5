// Package compare compares the results files of two builds or settings,
// metric by metric, with a verdict on each: exact where a seed makes a
// figure deterministic, statistical where it is not.
package compare

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"

	"golang.org/x/perf/benchmath"

	"github.com/kpsim/kpsim/proxier/dataplane"

	"github.com/kpsim/kpsim/results"
)

// Class says how a metric is compared.
type Class string

const (
	// Timing metrics (latencies, disruption, CPU, RSS) vary from run to run;
	// they are compared statistically.
	Timing Class = "timing"
	// Exact metrics (kernel operation counts) are deterministic for a fixed
	// scenario seed; any difference is real.
	Exact Class = "exact"
)

// Verdict is the outcome for one metric.
type Verdict string

const (
	Improved  Verdict = "improved"
	Regressed Verdict = "regressed"
	NoChange  Verdict = "no significant change"
	Same      Verdict = "same"
	Different Verdict = "exact-different"
)

// Options set the significance rules.
type Options struct {
	// Alpha is the p-value below which a difference is significant.
	Alpha float64
	// Threshold is the change, in percent, below which a significant
	// difference is still called no change: too small to act on.
	Threshold float64
	// Confidence is the level of the reported intervals (0.95).
	Confidence float64
	// MinDeltaSeconds is the smallest absolute change of a duration that can
	// count: phases that take a microsecond jitter by tens of percent, and
	// such a change is significant to the U test but to nobody else.
	MinDeltaSeconds float64
}

// DefaultOptions are the defaults of `kpsim compare`.
func DefaultOptions() Options {
	return Options{Alpha: 0.05, Threshold: 10, Confidence: 0.95, MinDeltaSeconds: 50e-6}
}

// Comparison is base against head, metric by metric.
type Comparison struct {
	Base, Head []string // labels of the files on each side
	Options    Options
	// PerSync is set when each side had a single file and the sync and phase
	// distributions were compared over their per-sync samples.
	PerSync bool
	Metrics []MetricComparison
	// Notes are warnings about the comparison as a whole (different
	// scenarios, too few runs to ever reach significance).
	Notes []string
}

// MetricComparison is one row.
type MetricComparison struct {
	Name  string // sync/p99, phase/ipset-entries/p50, ops/ipset-add, ...
	Unit  string // s, ops, attempts, bytes
	Class Class
	Basis string // measured, modeled or counted
	// Samples says what one sample of the test is: "file" (each file's
	// value) or "sync" (each sync of the single file per side).
	Samples    string
	Base, Head Estimate
	// DeltaPct is (head-base)/base in percent; NaN when base is 0 and head is not.
	DeltaPct float64
	P        float64 // Mann-Whitney U p-value; NaN for exact metrics
	Verdict  Verdict
	Warnings []string
}

// Estimate is one side's value: the median and its confidence interval
// (infinite bounds when there are too few samples for one).
type Estimate struct {
	Center, Lo, Hi float64
	N              int
}

// Regressions returns the rows whose verdict is Regressed or, for exact
// metrics, Different.
func (c *Comparison) Regressions(class Class) []MetricComparison {
	var out []MetricComparison
	for _, m := range c.Metrics {
		if m.Class == class && (m.Verdict == Regressed || m.Verdict == Different) {
			out = append(out, m)
		}
	}
	return out
}

// Compare compares files of the same scenario: base against head, several
// files per side being repetitions. Files must be summarized.
//
// Each file's metric value is one sample, compared with the Mann-Whitney U
// test (benchmath.AssumeNothing): with n files per side, at least 4 are
// needed for any p-value below 0.05. With exactly one file per side, the
// sync and phase distributions are instead compared over their per-sync
// samples (every sync a sample); their quantile rows (p50, p99, max) take
// the p-value of that distribution test, and the other timing metrics,
// having one sample per side, can never be significant.
//
// Kernel operation counts are compared exactly: with a fixed seed a change
// in them is a change in behaviour, never noise.
func Compare(base, head []*results.File, baseLabels, headLabels []string, o Options) *Comparison {
	c := &Comparison{Base: baseLabels, Head: headLabels, Options: o, PerSync: len(base) == 1 && len(head) == 1}
	if names := scenarioNames(base, head); len(names) > 1 {
		c.Notes = append(c.Notes, fmt.Sprintf("the files come from different scenarios (%v): differences may not be the build's", names))
	}
	if !c.PerSync && min(len(base), len(head)) < 4 {
		c.Notes = append(c.Notes, fmt.Sprintf("%d+%d runs: timing metrics need at least 4 runs per side to reach significance at alpha %g",
			len(base), len(head), o.Alpha))
	}
	timingB := results.CommonBasis(append(slices.Clone(base), head...))
	disruptB := disruptionBasis(base, head)
	// With one file per side, each distribution's per-sync test, by group.
	perSync := map[string]*benchmath.Comparison{}
	var varying []string
	for _, d := range Catalog(append(slices.Clone(base), head...)) {
		if d.Class == Exact {
			m := c.exact(d, base, head)
			if len(m.Warnings) > 0 {
				varying = append(varying, m.Name)
			}
			c.Metrics = append(c.Metrics, m)
			continue
		}
		basis := timingB
		switch d.Basis {
		case "disruption":
			basis = disruptB
		case results.Measured:
			basis = results.Measured
		}
		var ps *benchmath.Comparison
		if c.PerSync && d.Raw != nil {
			if _, done := perSync[d.Group]; !done {
				perSync[d.Group] = nil
				bs, hs := d.Raw(base[0]), d.Raw(head[0])
				if len(bs) > 0 && len(hs) > 0 {
					cmp := benchmath.AssumeNothing.Compare(sample(bs, o), sample(hs, o))
					perSync[d.Group] = &cmp
				}
			}
			ps = perSync[d.Group]
		}
		c.Metrics = append(c.Metrics, c.timing(d, basis, collect(base, d.Value), collect(head, d.Value), ps))
	}
	if len(varying) > 0 {
		c.Notes = append(c.Notes, fmt.Sprintf("kernel operation counts differ between runs with the same seed (%s): the runs are not deterministic, so those counts were compared statistically",
			strings.Join(varying, ", ")))
	}
	return c
}

// MetricDef is one comparable figure of a results file.
type MetricDef struct {
	Name  string
	Unit  string
	Class Class
	// Basis is Measured for process figures, "disruption" for figures on
	// the probes' basis, and empty for durations on the file's basis.
	Basis string
	Value func(*results.File) float64
	// Group and Raw, for quantiles of a per-sync distribution, name the
	// distribution and return its per-sync samples.
	Group string
	Raw   func(*results.File) []float64
}

// Catalog lists the metrics that comparisons (and their benchstat output)
// cover for the given files: the phases and operation kinds any of them has.
func Catalog(files []*results.File) []MetricDef {
	var defs []MetricDef
	quantile := func(group string, dist func(*results.File) results.Dist, raw func(*results.File) []float64, withMax bool) {
		qs := []struct {
			name string
			get  func(results.Dist) float64
		}{{"p50", func(d results.Dist) float64 { return d.P50 }}, {"p99", func(d results.Dist) float64 { return d.P99 }}}
		if withMax {
			qs = append(qs, struct {
				name string
				get  func(results.Dist) float64
			}{"max", func(d results.Dist) float64 { return d.Max }})
		}
		for _, q := range qs {
			defs = append(defs, MetricDef{Name: group + "/" + q.name, Unit: "s", Class: Timing, Group: group, Raw: raw,
				Value: func(f *results.File) float64 { return q.get(dist(f)) }})
		}
	}
	quantile("sync", func(f *results.File) results.Dist { return f.Summary.Sync }, syncSeconds, true)
	for _, ph := range results.PhaseNames(files) {
		quantile("phase/"+ph, func(f *results.File) results.Dist { return f.Summary.Phases[ph] },
			func(f *results.File) []float64 { return phaseSeconds(f, ph) }, false)
	}
	defs = append(defs,
		MetricDef{Name: "programming/p50", Unit: "s", Class: Timing, Value: func(f *results.File) float64 { return f.Summary.Programming.P50 }},
		MetricDef{Name: "programming/p99", Unit: "s", Class: Timing, Value: func(f *results.File) float64 { return f.Summary.Programming.P99 }},
		MetricDef{Name: "disruption/seconds", Unit: "s", Class: Timing, Basis: "disruption",
			Value: func(f *results.File) float64 { return f.Summary.Disruption.Seconds }},
		MetricDef{Name: "disruption/failed-attempts", Unit: "attempts", Class: Timing, Basis: "disruption",
			Value: func(f *results.File) float64 { return float64(f.Summary.Disruption.FailedAttempts) }},
		MetricDef{Name: "process/cpu", Unit: "s", Class: Timing, Basis: results.Measured, Value: func(f *results.File) float64 { return f.Totals.CPUSeconds }},
		MetricDef{Name: "process/peak-rss", Unit: "bytes", Class: Timing, Basis: results.Measured, Value: func(f *results.File) float64 { return float64(f.Totals.PeakRSS) }},
	)
	var ops, readded dataplane.Ops
	for _, f := range files {
		ops.Add(&f.Totals.Ops)
		readded.Add(&f.Totals.Readded)
	}
	for _, op := range dataplane.AllOps() {
		if ops[op] != 0 {
			defs = append(defs, MetricDef{Name: "ops/" + op.String(), Unit: "ops", Class: Exact,
				Value: func(f *results.File) float64 { return float64(f.Totals.Ops[op]) }})
		}
	}
	defs = append(defs, MetricDef{Name: "ops/writes", Unit: "ops", Class: Exact,
		Value: func(f *results.File) float64 { return float64(f.Totals.Ops.Writes()) }})
	for _, op := range dataplane.AllOps() {
		if readded[op] != 0 {
			defs = append(defs, MetricDef{Name: "readded/" + op.String(), Unit: "ops", Class: Exact,
				Value: func(f *results.File) float64 { return float64(f.Totals.Readded[op]) }})
		}
	}
	return defs
}

func (c *Comparison) timing(d MetricDef, basis string, bs, hs []float64, perSync *benchmath.Comparison) MetricComparison {
	o := c.Options
	m := MetricComparison{Name: d.Name, Unit: d.Unit, Class: Timing, Basis: basis, Samples: "file"}
	bsmp, hsmp := sample(bs, o), sample(hs, o)
	m.Base, m.Head = estimate(bsmp, o), estimate(hsmp, o)
	cmp := benchmath.AssumeNothing.Compare(bsmp, hsmp)
	if perSync != nil {
		cmp = *perSync
		m.Samples = "sync"
	}
	m.P = cmp.P
	for _, w := range cmp.Warnings {
		m.Warnings = append(m.Warnings, w.Error())
	}
	m.DeltaPct = deltaPct(m.Base.Center, m.Head.Center)
	m.Verdict = NoChange
	beyond := math.IsNaN(m.DeltaPct) || math.Abs(m.DeltaPct) > o.Threshold
	if m.Unit == "s" && math.Abs(m.Head.Center-m.Base.Center) < o.MinDeltaSeconds {
		beyond = false
	}
	if m.P < o.Alpha && beyond && m.Base.Center != m.Head.Center {
		if m.Head.Center > m.Base.Center {
			m.Verdict = Regressed
		} else {
			m.Verdict = Improved
		}
	}
	return m
}

// exact compares deterministic counts: any difference is a change in
// behaviour. If repetitions of one side disagree, the counts depend on
// timing (how changes were batched into syncs) and cannot be compared
// exactly; they are then compared like a timing metric, with the U test,
// and any significant difference (whatever its size) is still reported as
// Different.
func (c *Comparison) exact(d MetricDef, base, head []*results.File) MetricComparison {
	m := MetricComparison{Name: d.Name, Unit: d.Unit, Class: Exact, Basis: "counted", Samples: "file", P: math.NaN()}
	side := func(fs []*results.File) (Estimate, bool) {
		vals := collect(fs, d.Value)
		sort.Float64s(vals)
		if len(vals) == 0 {
			return Estimate{}, true
		}
		return Estimate{Center: vals[len(vals)/2], Lo: vals[0], Hi: vals[len(vals)-1], N: len(vals)}, vals[0] == vals[len(vals)-1]
	}
	var bOK, hOK bool
	m.Base, bOK = side(base)
	m.Head, hOK = side(head)
	m.DeltaPct = deltaPct(m.Base.Center, m.Head.Center)
	m.Verdict = Same
	if bOK && hOK {
		if m.Base.Center != m.Head.Center {
			m.Verdict = Different
		}
		return m
	}
	m.Warnings = append(m.Warnings, "counts vary between repetitions with the same seed: compared statistically, not exactly")
	m.Verdict = NoChange
	cmp := benchmath.AssumeNothing.Compare(sample(collect(base, d.Value), c.Options), sample(collect(head, d.Value), c.Options))
	m.P = cmp.P
	if m.P < c.Options.Alpha {
		m.Verdict = Different
	}
	return m
}

func sample(xs []float64, o Options) *benchmath.Sample {
	return benchmath.NewSample(slices.Clone(xs), &benchmath.Thresholds{CompareAlpha: o.Alpha})
}

func estimate(s *benchmath.Sample, o Options) Estimate {
	if len(s.Values) == 0 {
		return Estimate{Center: math.NaN(), Lo: math.NaN(), Hi: math.NaN()}
	}
	sum := benchmath.AssumeNothing.Summary(s, o.Confidence)
	return Estimate{Center: sum.Center, Lo: sum.Lo, Hi: sum.Hi, N: len(s.Values)}
}

func deltaPct(base, head float64) float64 {
	switch {
	case base == head:
		return 0
	case base == 0:
		return math.NaN()
	}
	return (head/base - 1) * 100
}

func collect(fs []*results.File, get func(*results.File) float64) []float64 {
	out := make([]float64, len(fs))
	for i, f := range fs {
		out[i] = get(f)
	}
	return out
}

func syncSeconds(f *results.File) []float64 {
	out := make([]float64, len(f.Syncs))
	for i, s := range f.Syncs {
		out[i] = s.Seconds
	}
	return out
}

func phaseSeconds(f *results.File, name string) []float64 {
	var out []float64
	for _, s := range f.Syncs {
		for _, p := range s.Phases {
			if p.Name == name {
				out = append(out, p.Seconds)
			}
		}
	}
	return out
}

func scenarioNames(sides ...[]*results.File) []string {
	seen := map[string]bool{}
	var names []string
	for _, fs := range sides {
		for _, f := range fs {
			if n := results.ScenarioName(f); !seen[n] {
				seen[n] = true
				names = append(names, n)
			}
		}
	}
	return names
}

func disruptionBasis(sides ...[]*results.File) string {
	b := ""
	for _, fs := range sides {
		for _, f := range fs {
			if f.Probes == nil {
				continue
			}
			if b == "" {
				b = f.Probes.Basis
			} else if f.Probes.Basis != b {
				return "mixed"
			}
		}
	}
	return b
}
