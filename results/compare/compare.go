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

	"github.com/kpsim/kpsim/results"
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
	Class results.Class
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

// Gate says which changes fail a comparison.
type Gate struct {
	// Timing makes a significant timing regression fail; otherwise timing
	// is only reported, since it varies with the machine.
	Timing bool
	// AllowChanges declares changes of exact figures that have no worse
	// direction (kernel operation counts, modeled kernel time) as expected.
	AllowChanges bool
}

// Failures are the rows that fail the comparison under g: exact figures
// that got worse (more failed syncs) always, exact figures that changed
// unless declared, and timing regressions when gated.
func (c *Comparison) Failures(g Gate) []MetricComparison {
	var out []MetricComparison
	for _, m := range c.Metrics {
		switch {
		case m.Verdict == Different && !g.AllowChanges,
			m.Verdict == Regressed && (m.Class == results.Exact || g.Timing):
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
	all := append(slices.Clone(base), head...)
	// With one file per side, each distribution's per-sync test, by group.
	perSync := map[string]*benchmath.Comparison{}
	var varying []string
	for _, d := range Catalog(all) {
		if d.Class == results.Exact {
			m := c.exact(d, base, head)
			if len(m.Warnings) > 0 {
				varying = append(varying, m.Name)
			}
			c.Metrics = append(c.Metrics, m)
			continue
		}
		var ps *benchmath.Comparison
		if c.PerSync && d.PerSync != nil {
			if _, done := perSync[d.Group]; !done {
				perSync[d.Group] = nil
				bs, hs := values(d.PerSync(base[0])), values(d.PerSync(head[0]))
				if len(bs) > 0 && len(hs) > 0 {
					cmp := benchmath.AssumeNothing.Compare(sample(bs, o), sample(hs, o))
					perSync[d.Group] = &cmp
				}
			}
			ps = perSync[d.Group]
		}
		c.Metrics = append(c.Metrics, c.timing(d, commonBasis(all, d.Basis), collect(base, d.Value), collect(head, d.Value), ps))
	}
	if len(varying) > 0 {
		c.Notes = append(c.Notes, fmt.Sprintf("kernel operation counts differ between runs with the same seed (%s): the runs are not deterministic, so those counts were compared statistically",
			strings.Join(varying, ", ")))
	}
	return c
}

// MetricDef is one compared number: a figure of the table
// (results.Figures), or one quantile of a distribution figure.
type MetricDef struct {
	Name          string
	Unit          string
	Class         results.Class
	HigherIsWorse bool
	Basis         func(*results.File) string
	Value         func(*results.File) float64
	// Group and PerSync, for quantiles of a per-sync distribution, name
	// the distribution and return its samples sync by sync.
	Group   string
	PerSync func(*results.File) []results.SyncValue
}

// Catalog lists the metrics that comparisons (and their benchstat output)
// cover for the given files: every compared figure of the table, a
// distribution by its quantiles.
func Catalog(files []*results.File) []MetricDef {
	var defs []MetricDef
	for _, fg := range results.Figures(files...) {
		if fg.Class == "" {
			continue
		}
		d := MetricDef{Name: fg.Name, Unit: fg.Unit, Class: fg.Class, HigherIsWorse: fg.HigherIsWorse, Basis: fg.Basis, Value: fg.Value}
		if fg.Dist == nil {
			defs = append(defs, d)
			continue
		}
		for _, q := range fg.Quantiles {
			qd := d
			qd.Name, qd.Group, qd.PerSync = fg.Name+"/"+q.Name, fg.Name, fg.PerSync
			qd.Value = func(f *results.File) float64 { return q.Of(fg.Dist(f)) }
			defs = append(defs, qd)
		}
	}
	return defs
}

func (c *Comparison) timing(d MetricDef, basis string, bs, hs []float64, perSync *benchmath.Comparison) MetricComparison {
	o := c.Options
	m := MetricComparison{Name: d.Name, Unit: d.Unit, Class: results.Timing, Basis: basis, Samples: "file"}
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
	if m.Unit == results.UnitSeconds && math.Abs(m.Head.Center-m.Base.Center) < o.MinDeltaSeconds {
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
	m := MetricComparison{Name: d.Name, Unit: d.Unit, Class: results.Exact, Basis: commonBasis(append(slices.Clone(base), head...), d.Basis),
		Samples: "file", P: math.NaN()}
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
			m.Verdict = d.changed(m.Base.Center, m.Head.Center)
		}
		return m
	}
	m.Warnings = append(m.Warnings, "counts vary between repetitions with the same seed: compared statistically, not exactly")
	m.Verdict = NoChange
	cmp := benchmath.AssumeNothing.Compare(sample(collect(base, d.Value), c.Options), sample(collect(head, d.Value), c.Options))
	m.P = cmp.P
	if m.P < c.Options.Alpha {
		m.Verdict = d.changed(m.Base.Center, m.Head.Center)
	}
	return m
}

// changed is the verdict on an exact figure that changed: by its direction
// when it has a worse one, and otherwise a change to be declared.
func (d *MetricDef) changed(base, head float64) Verdict {
	switch {
	case !d.HigherIsWorse:
		return Different
	case head > base:
		return Regressed
	}
	return Improved
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

func values(svs []results.SyncValue) []float64 {
	out := make([]float64, len(svs))
	for i, sv := range svs {
		out[i] = sv.Value
	}
	return out
}

// commonBasis is the basis the files share for a figure, or "mixed"; files
// without one (no probes) do not count.
func commonBasis(fs []*results.File, basis func(*results.File) string) string {
	b := ""
	for _, f := range fs {
		switch fb := basis(f); {
		case fb == "":
		case b == "":
			b = fb
		case fb != b:
			return "mixed"
		}
	}
	return b
}
