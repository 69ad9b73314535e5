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
	// AllowDifferent compares runs that ran different scenarios, seeds or
	// settings (otherwise refused with a *DifferentError), and judges the
	// exact figures of runs that ended early as if they had not.
	AllowDifferent bool
}

// DefaultOptions are the defaults of `kpsim compare`.
func DefaultOptions() Options {
	return Options{Alpha: 0.05, Threshold: 10, Confidence: 0.95, MinDeltaSeconds: 50e-6}
}

// Verdict is the outcome for one metric.
type Verdict string

const (
	Improved  Verdict = "improved"
	Regressed Verdict = "regressed"
	NoChange  Verdict = "no significant change"
	Same      Verdict = "same"
	Different Verdict = "exact-different"
	// Incomplete is an exact figure that differs where a run that ended
	// early counts less: not judged, since the run did less.
	Incomplete Verdict = "not judged: incomplete run"
)

// Samples of a test: what one sample is.
const (
	SamplesFile   = "file"         // each file's value
	SamplesSync   = "sync"         // each sync of the single file per side
	SamplesPaired = "paired syncs" // each sync's head/base ratio
)

// Comparison is base against head, metric by metric.
type Comparison struct {
	Base, Head []string // labels of the files on each side
	Options    Options
	// Paired is set when the runs' syncs pair one to one (see pairSyncs):
	// the sync and phase distributions were compared sync by sync, with the
	// signed-rank test over head/base ratios, and per-sync figures (modeled
	// kernel time) were held exact sync by sync.
	Paired bool
	// PerSync is set when, unpaired, each side had a single file and the
	// sync and phase distributions were compared over their per-sync
	// samples with the U test.
	PerSync bool
	Metrics []MetricComparison
	// Warnings are what a reader must know before trusting any row: runs
	// that ended early, runs that differ in what they ran.
	Warnings []string
	// Notes explain the method's limits for these files (why syncs could
	// not be paired, too few runs to reach significance).
	Notes []string
}

// MetricComparison is one row.
type MetricComparison struct {
	Name  string // sync/p99, phase/ipset-entries/p50, ops/ipset-add, ...
	Unit  string // s, ops, attempts, bytes
	Class results.Class
	Basis string // measured, modeled or counted
	// Samples says what one sample of the test is (SamplesFile, SamplesSync, SamplesPaired).
	Samples    string
	Base, Head Estimate
	// DeltaPct is (head-base)/base in percent; NaN when base is 0 and head is not.
	DeltaPct float64
	// P is the test's p-value: Mann-Whitney U, or Wilcoxon signed-rank for
	// paired syncs; NaN for exact metrics.
	P float64
	// Pairs and Ratio, for paired syncs: how many pairs the test had, and
	// the median of their head/base ratios.
	Pairs   int
	Ratio   float64
	Verdict Verdict
	// Warnings qualify this row (counts that vary, syncs that differ).
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

// Compare compares runs of one scenario: base against head, several files
// per side being repetitions with the same seed. Files must be summarized;
// labels name them in messages.
//
// Runs that ran different things (scenario, seed, any setting recorded in
// the file) are refused with a *DifferentError unless o.AllowDifferent.
//
// Exact figures (kernel operation counts, modeled kernel time, failed
// syncs) are deterministic for a seed and compared exactly. A run that
// ended early counts less than a whole one: where its count is lower, the
// difference is not judged (Incomplete); where it is higher, it is real.
//
// Timing figures are tested. When the runs' syncs pair one to one (runs
// on the modeled clock of one scenario and seed, see pairSyncs), each
// sync and phase distribution is tested sync by sync: the Wilcoxon
// signed-rank test over the head/base ratio of each pair. Pairing removes
// what differs between syncs (a full initial sync against an incremental
// one), which swamps an unpaired test: a 5x slower ipset strategy gave
// p=0.17 with the U test over 15 mixed syncs. Otherwise each file's value
// is one sample of a Mann-Whitney U test (4 files per side are needed for
// p < 0.05), and with one file per side the distributions are compared
// over their per-sync samples. A distribution's quantile rows (p50, p99,
// max) take their distribution's p-value.
func Compare(base, head []*results.File, baseLabels, headLabels []string, o Options) (*Comparison, error) {
	c := &Comparison{Base: baseLabels, Head: headLabels, Options: o}
	runs := append(runsOf(base, baseLabels), runsOf(head, headLabels)...)
	diff, onlySome := differences(runs)
	if len(diff) > 0 && !o.AllowDifferent {
		return nil, &DifferentError{Differences: clip(diff)}
	}
	if len(diff) > 0 {
		c.Warnings = append(c.Warnings, "the runs ran different scenarios or settings, so differences may not be the build's: "+strings.Join(clip(diff), "; "))
	}
	if len(onlySome) > 0 {
		c.Notes = append(c.Notes, "settings recorded by only some runs (a newer kpsim records more): "+strings.Join(clip(onlySome), "; "))
	}
	for _, r := range runs {
		if why := incomplete(r.f); why != "" {
			judged := "exact figures it counts lower are not judged"
			if o.AllowDifferent {
				judged = "its exact figures are judged as if it had run to the end"
			}
			c.Warnings = append(c.Warnings, fmt.Sprintf("%s %s: it did less than a whole run, so %s", r.label, why, judged))
		}
	}

	keys, why := pairSyncs(runs)
	c.Paired = keys != nil
	c.PerSync = !c.Paired && len(base) == 1 && len(head) == 1
	if !c.Paired {
		c.Notes = append(c.Notes, "syncs not paired: "+why)
	}
	if !c.Paired && !c.PerSync && min(len(base), len(head)) < 4 {
		c.Notes = append(c.Notes, fmt.Sprintf("%d+%d runs: timing metrics need at least 4 runs per side to reach significance at alpha %g",
			len(base), len(head), o.Alpha))
	}
	all := append(slices.Clone(base), head...)
	// A proxier that records no phases (a kube-proxy release) has nothing
	// to hold against another's phases: its zeros are not a speed-up.
	var unphased []string
	for _, r := range runs {
		if len(r.f.Syncs) > 0 && !slices.ContainsFunc(r.f.Syncs, func(s results.Sync) bool { return len(s.Phases) > 0 }) {
			unphased = append(unphased, fmt.Sprintf("%s (%s)", r.label, r.f.Proxier))
		}
	}
	if len(unphased) > 0 {
		c.Notes = append(c.Notes, "phases not compared: not phased in "+strings.Join(unphased, ", "))
	}
	groups := map[string]*test{} // each distribution's test, by figure
	var varying []string
	for _, d := range Catalog(all) {
		if len(unphased) > 0 && strings.HasPrefix(d.Group, "phase/") {
			continue
		}
		if d.Class == results.Exact {
			m := c.exact(d, base, head, keys)
			if !math.IsNaN(m.P) {
				varying = append(varying, m.Name)
			}
			c.Metrics = append(c.Metrics, m)
			continue
		}
		t, ok := groups[d.Group]
		if !ok && d.PerSync != nil {
			t = c.distributionTest(d, base, head, keys)
			groups[d.Group] = t
		}
		c.Metrics = append(c.Metrics, c.timing(d, commonBasis(all, d.Basis), collect(base, d.Value), collect(head, d.Value), t))
	}
	if len(varying) > 0 {
		c.Notes = append(c.Notes, fmt.Sprintf("exact figures differ between runs with the same seed (%s): the runs are not deterministic, so those were compared statistically",
			strings.Join(varying, ", ")))
	}
	return c, nil
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
	// Group names the figure the metric reads (its distribution, for a
	// quantile), and PerSync gives the figure's samples sync by sync.
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
		d := MetricDef{Name: fg.Name, Unit: fg.Unit, Class: fg.Class, HigherIsWorse: fg.HigherIsWorse, Basis: fg.Basis,
			Value: fg.Value, Group: fg.Name, PerSync: fg.PerSync}
		if fg.Dist == nil {
			defs = append(defs, d)
			continue
		}
		for _, q := range fg.Quantiles {
			qd := d
			qd.Name = fg.Name + "/" + q.Name
			qd.Value = func(f *results.File) float64 { return q.Of(fg.Dist(f)) }
			defs = append(defs, qd)
		}
	}
	return defs
}

// test is the outcome of one distribution's test, shared by its quantiles.
type test struct {
	p        float64
	samples  string
	pairs    int
	ratio    float64 // median head/base ratio of the pairs
	shift    float64 // median head-base difference of the pairs
	warnings []string
}

// distributionTest tests a distribution sync by sync: paired when keys
// pair the runs' syncs, over the per-sync samples of the single file per
// side otherwise; nil when neither applies (each file is then a sample).
func (c *Comparison) distributionTest(d MetricDef, base, head []*results.File, keys []results.SyncKey) *test {
	switch {
	case c.Paired:
		b, h := perSync(base, d.PerSync), perSync(head, d.PerSync)
		var logs, diffs []float64
		for _, k := range keys {
			bv, bok := b[k]
			hv, hok := h[k]
			if bok && hok && bv > 0 && hv > 0 {
				logs = append(logs, math.Log(hv/bv))
				diffs = append(diffs, hv-bv)
			}
		}
		if len(logs) == 0 {
			return nil
		}
		p, n := signedRank(logs)
		sort.Float64s(logs)
		sort.Float64s(diffs)
		t := &test{p: p, samples: SamplesPaired, pairs: len(logs), ratio: math.Exp(logs[len(logs)/2]), shift: diffs[len(diffs)/2]}
		if n < 6 {
			// 2/2^5: five pairs that all moved one way are not yet significant at 0.05.
			t.warnings = append(t.warnings, fmt.Sprintf("only %d of %d pairs changed: too few for significance", n, len(logs)))
		}
		return t
	case c.PerSync:
		bs, hs := values(d.PerSync(base[0])), values(d.PerSync(head[0]))
		if len(bs) == 0 || len(hs) == 0 {
			return nil
		}
		cmp := benchmath.AssumeNothing.Compare(sample(bs, c.Options), sample(hs, c.Options))
		t := &test{p: cmp.P, samples: SamplesSync}
		for _, w := range cmp.Warnings {
			t.warnings = append(t.warnings, w.Error())
		}
		return t
	}
	return nil
}

func (c *Comparison) timing(d MetricDef, basis string, bs, hs []float64, t *test) MetricComparison {
	o := c.Options
	m := MetricComparison{Name: d.Name, Unit: d.Unit, Class: results.Timing, Basis: basis, Samples: SamplesFile}
	bsmp, hsmp := sample(bs, o), sample(hs, o)
	m.Base, m.Head = estimate(bsmp, o), estimate(hsmp, o)
	if t == nil {
		cmp := benchmath.AssumeNothing.Compare(bsmp, hsmp)
		t = &test{p: cmp.P, samples: SamplesFile}
		for _, w := range cmp.Warnings {
			t.warnings = append(t.warnings, w.Error())
		}
	}
	m.P, m.Samples, m.Pairs, m.Ratio = t.p, t.samples, t.pairs, t.ratio
	m.Warnings = append(m.Warnings, t.warnings...)
	m.DeltaPct = deltaPct(m.Base.Center, m.Head.Center)
	m.Verdict = NoChange
	beyond := math.IsNaN(m.DeltaPct) || math.Abs(m.DeltaPct) > o.Threshold
	if m.Unit == results.UnitSeconds && math.Abs(m.Head.Center-m.Base.Center) < o.MinDeltaSeconds {
		beyond = false
	}
	if t.samples == SamplesPaired {
		// Paired, the test is sensitive enough to find a shift of a few
		// per cent that the same build shows between two runs when the
		// proxier's time is measured on a busy machine. The typical sync
		// must itself have moved beyond the threshold and the smallest
		// duration that counts, and the way the quantile moved: a quantile
		// that moved the other way is not the change the test found.
		beyond = beyond && math.Abs(t.ratio-1)*100 > o.Threshold && (m.Head.Center > m.Base.Center) == (t.ratio > 1)
		if m.Unit == results.UnitSeconds && math.Abs(t.shift) < o.MinDeltaSeconds {
			beyond = false
		}
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

// exact compares deterministic figures: any difference is a change in
// behaviour. If repetitions of one side disagree, the figure depends on
// timing (how changes were batched into syncs) and cannot be compared
// exactly; it is then compared like a timing metric, with the U test, and
// any significant difference (whatever its size) still counts as a
// change. When the runs' syncs pair, a figure with per-sync samples
// (modeled kernel time) must also agree sync by sync: work moved from one
// sync to another is a change even when the total stays.
func (c *Comparison) exact(d MetricDef, base, head []*results.File, keys []results.SyncKey) MetricComparison {
	m := MetricComparison{Name: d.Name, Unit: d.Unit, Class: results.Exact, Basis: commonBasis(append(slices.Clone(base), head...), d.Basis),
		Samples: SamplesFile, P: math.NaN()}
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
	if !bOK || !hOK {
		m.Warnings = append(m.Warnings, "values vary between repetitions with the same seed: compared statistically, not exactly")
		m.Verdict = NoChange
		cmp := benchmath.AssumeNothing.Compare(sample(collect(base, d.Value), c.Options), sample(collect(head, d.Value), c.Options))
		m.P = cmp.P
		if m.P < c.Options.Alpha {
			m.Verdict = c.changed(d, m.Base.Center, m.Head.Center, base, head)
		}
		return m
	}
	if m.Base.Center != m.Head.Center {
		m.Verdict = c.changed(d, m.Base.Center, m.Head.Center, base, head)
	}
	if c.Paired && d.PerSync != nil {
		b, h := perSync(base, d.PerSync), perSync(head, d.PerSync)
		var moved []results.SyncKey
		for _, k := range keys {
			if b[k] != h[k] {
				moved = append(moved, k)
			}
		}
		if len(moved) > 0 {
			k := moved[0]
			m.Warnings = append(m.Warnings, fmt.Sprintf("%d of %d paired syncs differ, the first %s: %s -> %s",
				len(moved), len(keys), k, results.FormatValue(b[k], d.Unit), results.FormatValue(h[k], d.Unit)))
			if m.Verdict == Same {
				m.Verdict = c.changed(d, m.Base.Center, m.Head.Center, base, head)
			}
		}
	}
	return m
}

// changed is the verdict on an exact figure whose value differs: by its
// direction when it has a worse one, otherwise a change to be declared.
// A run that ended early did less: where such a run has the lower value,
// the difference may be only that, and is not judged.
func (c *Comparison) changed(d MetricDef, base, head float64, baseFiles, headFiles []*results.File) Verdict {
	short := func(fs []*results.File) bool {
		return slices.ContainsFunc(fs, func(f *results.File) bool { return incomplete(f) != "" })
	}
	if !c.Options.AllowDifferent && ((head < base && short(headFiles)) || (base < head && short(baseFiles)) ||
		(head == base && (short(headFiles) || short(baseFiles)))) {
		return Incomplete
	}
	switch {
	case !d.HigherIsWorse || head == base:
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
