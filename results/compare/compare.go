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

	"github.com/kpsim/kpsim/record"
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

// DefaultRuns is how many runs per side a comparison of runs that are
// samples takes by default (kpsim run --runs, a sweep's cells of such
// runs, make compare-releases): with 8 a side, a change every run agrees
// on is called among up to 322 figures that vary (the U test's smallest
// p-value, 2/C(16, 8) = 0.000155, is within 0.05/322).
const DefaultRuns = 8

// Verdict is the outcome for one metric.
type Verdict string

const (
	Improved  Verdict = "improved"
	Regressed Verdict = "regressed"
	NoChange  Verdict = "no significant change"
	Same      Verdict = "same"
	Different Verdict = "exact-different"
	// Changed is a figure without a worse direction (an operation count)
	// that moved between the sides' runs by more than their spread explains.
	Changed Verdict = "changed"
	// Undecided is a change the runs cannot tell from their spread: too
	// few runs, or too much spread. MetricComparison.RunsNeeded says how
	// many runs per side would.
	Undecided Verdict = "cannot decide"
	// Incomplete is an exact figure that differs where a run that ended
	// early counts less: not judged, since the run did less.
	Incomplete Verdict = "not judged: incomplete run"
)

// ModeledTolerance is the relative difference below which two modeled
// durations are equal. A seed repeats a modeled run bit for bit; a build
// that sums the same modeled costs in another order differs in the last
// bits, and one part in 10⁹ (a nanosecond in a second) is far below the
// cheapest operation a cost profile prices.
const ModeledTolerance = 1e-9

// Comparison is base against head, metric by metric.
type Comparison struct {
	Base, Head []string // labels of the files on each side, copies counted once
	Options    Options
	// Modeled is set when every run is kpsim's proxier on the modeled
	// clock: one seed gives one answer, so every figure but the process's
	// measured CPU and RSS is compared exactly, seed by seed (Seeds).
	// Otherwise runs of one seed differ, each run is one sample of every
	// figure, and Samples says why.
	Modeled bool
	Samples string
	// Seeds are the seeds both sides ran, by which a modeled comparison
	// pairs its runs.
	Seeds []string
	// Tested is how many figures were compared over runs and varied
	// between them: the family over which Holm's method holds the chance
	// that any of them is called by chance to Options.Alpha.
	Tested int
	// MinRuns is the fewest runs per side that can call a change at all
	// among Tested figures: one that every base run and every head run
	// agree on.
	MinRuns int
	Metrics []MetricComparison
	// Warnings are what a reader must know before trusting any row: runs
	// that ended early, runs that differ in what they ran, copies.
	Warnings []string
	// Notes explain the method's limits for these files.
	Notes []string
}

// MetricComparison is one row.
type MetricComparison struct {
	Name  string // sync/p99, phase/ipset-entries/p50, ops/ipset-add, restart/sync/p99, ...
	Unit  string // s, ops, attempts, bytes
	Class results.Class
	Basis string // measured, modeled or counted
	// Base and Head: on the modeled clock the value (the median and range
	// over seeds), otherwise the median over runs and its confidence interval.
	Base, Head Estimate
	// DeltaPct is (head-base)/base in percent; NaN when base is 0 and head is not.
	DeltaPct float64
	// P is the Mann-Whitney U test's p-value over runs, each run one
	// sample, adjusted by Holm's method for the Comparison's Tested
	// figures; within [0, 1]. NaN for figures compared exactly.
	P       float64
	Verdict Verdict
	// RunsNeeded, for a change the runs could not decide, is how many runs
	// per side would detect a change of its size with the spread the runs
	// showed (at alpha, with 80% power).
	RunsNeeded int
	// Disruption marks a figure of broken traffic: a rise fails unless
	// declared with Gate.AllowDisruption.
	Disruption bool
	// Declarable marks a figure whose change Gate.AllowChanges declares:
	// operation counts and modeled time. Failed syncs and failed runs are not.
	Declarable bool
	// Warnings qualify this row (counts that vary, syncs that differ).
	Warnings []string

	baseRuns, headRuns []float64 // each run's value, for a figure compared over runs
}

// Estimate is one side's value: the median and its confidence interval
// (infinite bounds when there are too few samples for one); for exact
// figures over several seeds, the median and range over the seeds.
type Estimate struct {
	Center, Lo, Hi float64
	N              int
}

// Gate says which changes fail a comparison.
type Gate struct {
	// Timing makes a significant timing regression (syncs, phases, network
	// programming, the process's CPU and RSS) fail; otherwise it is only
	// reported. Broken traffic is not timing: it fails either way.
	Timing bool
	// AllowChanges declares changes of kernel operation counts and of
	// modeled time (slower included, on the modeled clock) as expected.
	AllowChanges bool
	// AllowDisruption declares a rise in broken traffic as expected;
	// nothing else does.
	AllowDisruption bool
}

// Failures are the rows that fail the comparison under g: more broken
// traffic unless declared as such, whatever the clock and the latency
// gate; exact figures that got worse (failed syncs) always; figures that
// changed without a worse direction (operation counts, modeled time)
// unless declared; and timing regressions when gated. A change the runs
// cannot decide never fails.
func (c *Comparison) Failures(g Gate) []MetricComparison {
	var out []MetricComparison
	for _, m := range c.Metrics {
		fail := false
		switch {
		case m.Verdict == Regressed && m.Disruption:
			fail = !g.AllowDisruption
		case m.Verdict == Different || m.Verdict == Changed:
			fail = !g.AllowChanges
		case m.Verdict == Regressed && m.Class == results.Exact:
			fail = !m.Declarable || !g.AllowChanges
		case m.Verdict == Regressed:
			fail = g.Timing
		}
		if fail {
			out = append(out, m)
		}
	}
	return out
}

// Compare compares runs of one scenario: base against head, several files
// per side being repetitions or other seeds. Files must be summarized;
// labels name them in messages.
//
// Runs that ran different things (scenario, any setting recorded in the
// file; seeds unless both sides ran the same set of seeds) are refused
// with a *DifferentError unless o.AllowDifferent.
//
// On the modeled clock kpsim's proxier repeats a run of a seed exactly,
// so identical copies of one run are counted once (with a warning), and
// every figure but the measured CPU and RSS is exact: compared seed by
// seed, within ModeledTolerance, and any difference is a change. More
// broken traffic, longer syncs or longer recovery are regressions;
// operation counts have no worse direction and change only as declared.
//
// Everywhere else runs of one seed differ (a kube-proxy release iterates
// Go maps in an order Go randomizes; the wall clock and a real kernel
// never repeat), and the run is the unit of evidence: every figure is one
// value per run, the sides are compared with the Mann-Whitney U test, and
// Holm's method adjusts the p-values for the number of figures tested, so
// that the chance of any call by chance in a comparison is at most alpha.
// A figure that moved beyond its threshold but not beyond what the runs'
// spread explains is Undecided, with the runs per side that would decide
// it. A run that ended early counts less than a whole one: where its
// count is lower, the difference is not judged (Incomplete).
func Compare(base, head []*record.File, baseLabels, headLabels []string, o Options) (*Comparison, error) {
	c := &Comparison{Options: o}
	all := append(slices.Clone(base), head...)
	c.Samples = WhySamples(all)
	c.Modeled = len(all) > 0 && c.Samples == ""
	baseRuns, headRuns := runsOf(base, baseLabels), runsOf(head, headLabels)
	if c.Modeled {
		baseRuns = c.once("base", baseRuns)
		headRuns = c.once("head", headRuns)
	}
	c.Base, c.Head = labels(baseRuns), labels(headRuns)
	base, head = files(baseRuns), files(headRuns)
	runs := append(slices.Clone(baseRuns), headRuns...)
	c.Seeds = pairedSeeds(baseRuns, headRuns)
	diff, onlySome := differences(runs, c.Seeds != nil)
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
	all = append(slices.Clone(base), head...)
	// A proxier that records no phases (a kube-proxy release) has nothing
	// to hold against another's phases: its zeros are not a speed-up.
	var unphased []string
	for _, r := range runs {
		if len(r.f.Syncs) > 0 && !slices.ContainsFunc(r.f.Syncs, func(s record.Sync) bool { return len(s.Phases) > 0 }) {
			unphased = append(unphased, fmt.Sprintf("%s (%s)", r.label, r.f.Proxier))
		}
	}
	if len(unphased) > 0 {
		c.Notes = append(c.Notes, "phases not compared: not phased in "+results.ListSome(unphased, 3))
	}
	// Time to first success changed its meaning with schema version 3
	// (from each disruption window, not each target's first attempt).
	oldReach := slices.ContainsFunc(all, func(f *record.File) bool { return f.SchemaVersion > 0 && f.SchemaVersion < 3 }) &&
		slices.ContainsFunc(all, func(f *record.File) bool { return f.SchemaVersion == 0 || f.SchemaVersion >= 3 })
	if oldReach {
		c.Notes = append(c.Notes, "time to first success not compared: files before schema version 3 measured it from each target's first attempt, newer ones from each disruption window")
	}
	pairs := c.seedPairs(baseRuns, headRuns)
	var defs []MetricDef // each row's figure
	var varying []string
	for _, d := range Catalog(all) {
		if len(unphased) > 0 && (strings.HasPrefix(d.Group, "phase/") || strings.Contains(d.Group, "/phase/")) {
			continue
		}
		if oldReach && (d.Group == "reachable" || d.Group == "unreachable") {
			continue
		}
		basis := commonBasis(all, d.Basis)
		var m MetricComparison
		if c.Modeled && basis != record.Measured {
			m = c.exact(d, basis, base, head, pairs)
			if m.baseRuns != nil {
				varying = append(varying, m.Name)
			}
		} else {
			m = overRuns(d, basis, collect(base, d.Value), collect(head, d.Value), o)
		}
		c.Metrics = append(c.Metrics, m)
		defs = append(defs, d)
	}
	c.judge(defs, base, head)
	if len(varying) > 0 {
		c.Notes = append(c.Notes, fmt.Sprintf("exact figures differ between runs with the same seed (%s): the runs are not deterministic, so those were compared over runs",
			strings.Join(varying, ", ")))
	}
	if n := min(len(base), len(head)); !c.Modeled && n < c.MinRuns {
		c.Notes = append(c.Notes, fmt.Sprintf("%d+%d runs: with %d figures tested, even a change every run agrees on needs %d runs per side to be called at alpha %g (kpsim run --runs %d)",
			len(base), len(head), c.Tested, c.MinRuns, o.Alpha, c.MinRuns))
	}
	return c, nil
}

// WhySamples says why runs of one seed can differ, so that each is a
// sample rather than the answer; "" when every run is kpsim's proxier on
// the modeled clock, which repeats a seed exactly.
func WhySamples(files []*record.File) string {
	var wall, releases []string
	for _, f := range files {
		switch {
		case f.Clock != record.ClockModeled:
			if !slices.Contains(wall, f.Backend) {
				wall = append(wall, f.Backend)
			}
		case f.Proxier != record.ProxierKpsim && !slices.Contains(releases, f.Proxier):
			releases = append(releases, f.Proxier)
		}
	}
	var why []string
	if len(wall) > 0 {
		why = append(why, fmt.Sprintf("runs on the wall clock (backend %s) never repeat", strings.Join(wall, ", ")))
	}
	if len(releases) > 0 {
		why = append(why, fmt.Sprintf("%s iterates Go maps, whose order Go randomizes in every run", strings.Join(releases, " and ")))
	}
	return strings.Join(why, "; ")
}

// MetricDef is one compared number: a figure of the table
// (results.Figures), or one quantile of a distribution figure.
type MetricDef struct {
	Name          string
	Unit          string
	Class         results.Class
	HigherIsWorse bool
	Disruption    bool
	Basis         func(*record.File) string
	Value         func(*record.File) float64
	// Group names the figure the metric reads (its distribution, for a
	// quantile), and PerSync gives the figure's samples sync by sync.
	Group   string
	PerSync func(*record.File) []results.SyncValue
}

// Catalog lists the metrics that comparisons (and their benchstat output)
// cover for the given files: every compared figure of the table, a
// distribution by its quantiles, for the whole run and then for each
// segment every file has (results.SegmentFigures).
func Catalog(files []*record.File) []MetricDef {
	figs := results.Figures(files...)
	for _, seg := range commonSegments(files) {
		figs = append(figs, results.SegmentFigures(seg, files...)...)
	}
	var defs []MetricDef
	for _, fg := range figs {
		if fg.Class == "" {
			continue
		}
		d := MetricDef{Name: fg.Name, Unit: fg.Unit, Class: fg.Class, HigherIsWorse: fg.HigherIsWorse, Disruption: fg.Disruption,
			Basis: fg.Basis, Value: fg.Value, Group: fg.Name, PerSync: fg.PerSync}
		if fg.Dist == nil {
			defs = append(defs, d)
			continue
		}
		for _, q := range fg.Quantiles {
			qd := d
			qd.Name = fg.Name + "/" + q.Name
			qd.Value = func(f *record.File) float64 { return q.Of(fg.Dist(f)) }
			defs = append(defs, qd)
		}
	}
	return defs
}

// commonSegments lists the segments every file's timeline has, in the
// first file's order; none when a file has only one.
func commonSegments(files []*record.File) []string {
	if len(files) == 0 {
		return nil
	}
	var out []string
	for _, s := range files[0].Summary.Segments {
		if !slices.ContainsFunc(files, func(f *record.File) bool { _, ok := results.SegmentNamed(f, s.Name); return !ok }) {
			out = append(out, s.Name)
		}
	}
	return out
}

// uTest is the Mann-Whitney U test's p-value, within [0, 1] (benchmath's
// can exceed 1 with ties in small samples: 1.111 was seen).
func uTest(bs, hs []float64, o Options) float64 {
	p := benchmath.AssumeNothing.Compare(sample(bs, o), sample(hs, o)).P
	if math.IsNaN(p) {
		p = 1
	}
	return min(1, max(0, p))
}

// overRuns is a figure of runs that are samples: each run's value, the
// median of each side, and the U test's p-value before adjustment. Its
// verdict waits for every figure's test (judge).
func overRuns(d MetricDef, basis string, bs, hs []float64, o Options) MetricComparison {
	m := MetricComparison{Name: d.Name, Unit: d.Unit, Class: d.Class, Basis: basis, Disruption: d.Disruption,
		Declarable: !d.HigherIsWorse, baseRuns: bs, headRuns: hs}
	m.Base, m.Head = estimate(sample(bs, o), o), estimate(sample(hs, o), o)
	m.DeltaPct = deltaPct(m.Base.Center, m.Head.Center)
	m.P = uTest(bs, hs, o)
	return m
}

// judge adjusts the p-values of the figures compared over runs for how
// many of them were tested (Holm's method over those whose runs vary: a
// figure every run agrees on cannot be called by chance), then gives each
// its verdict.
func (c *Comparison) judge(defs []MetricDef, base, head []*record.File) {
	var family []int
	for i := range c.Metrics {
		if m := &c.Metrics[i]; m.baseRuns != nil {
			if pooledSame(m.baseRuns, m.headRuns) {
				m.P, m.Verdict = 1, Same
				continue
			}
			family = append(family, i)
		}
	}
	c.Tested = len(family)
	ps := make([]float64, len(family))
	for k, i := range family {
		ps[k] = c.Metrics[i].P
	}
	for k, p := range holm(ps) {
		c.Metrics[family[k]].P = p
	}
	c.MinRuns = minRuns(c.Options.Alpha / float64(max(1, c.Tested)))
	for _, i := range family {
		c.Metrics[i].Verdict = c.overRunsVerdict(&c.Metrics[i], defs[i], base, head)
	}
}

// overRunsVerdict is the verdict on a figure compared over runs. A
// significant change is called by its direction (the U statistic's: which
// side's runs are larger, pair by pair); a timing figure's only beyond the
// threshold, while broken traffic and counts have none. A change beyond
// the threshold that is not significant is Undecided when more runs would
// tell; below it, too small to act on, it is no change whatever the runs.
func (c *Comparison) overRunsVerdict(m *MetricComparison, d MetricDef, base, head []*record.File) Verdict {
	o := c.Options
	dir := uDirection(m.baseRuns, m.headRuns)
	beyond := m.beyondThreshold(o)
	if m.P < o.Alpha && dir != 0 && (beyond || m.Disruption || m.Class == results.Exact) {
		if v := c.changed(d, dir, base, head); v != Different {
			return v
		}
		return Changed
	}
	if dir != 0 && beyond {
		if m.RunsNeeded = runsNeeded(m.baseRuns, m.headRuns, o.Alpha, c.Tested); m.RunsNeeded > min(len(m.baseRuns), len(m.headRuns)) {
			return Undecided
		}
		m.RunsNeeded = 0
	}
	return NoChange
}

// beyondThreshold says whether the medians moved by more than the
// threshold, and a duration by more than the smallest delta that counts.
func (m *MetricComparison) beyondThreshold(o Options) bool {
	if m.Unit == results.UnitSeconds && math.Abs(m.Head.Center-m.Base.Center) < o.MinDeltaSeconds {
		return false
	}
	return math.IsNaN(m.DeltaPct) || math.Abs(m.DeltaPct) > o.Threshold
}

// exact compares deterministic figures: any difference is a change in
// behaviour. Seed by seed when the sides ran the same seeds (pairs), with
// modeled durations equal within ModeledTolerance; the verdict is the
// direction every seed that changed agrees on. If repetitions of one seed
// on one side disagree, the figure depends on timing and cannot be
// compared exactly; it is then compared over runs (its verdict given by
// judge). Per-sync figures (modeled kernel time) must also agree sync by
// sync within each pair: work moved from one sync to another is a change
// even when the total stays.
func (c *Comparison) exact(d MetricDef, basis string, base, head []*record.File, pairs []seedPair) MetricComparison {
	m := MetricComparison{Name: d.Name, Unit: d.Unit, Class: results.Exact, Basis: basis, P: math.NaN(),
		Disruption: d.Disruption, Declarable: !d.HigherIsWorse || (basis != results.Counted && !d.Disruption)}
	varies := func(fs []*record.File) bool {
		vals := collect(fs, d.Value)
		return slices.ContainsFunc(vals, func(v float64) bool { return !c.equal(d, v, vals[0]) })
	}
	if slices.ContainsFunc(pairs, func(p seedPair) bool { return varies(p.base) || varies(p.head) }) {
		m = overRuns(d, basis, collect(base, d.Value), collect(head, d.Value), c.Options)
		m.Class, m.Declarable = results.Exact, !d.HigherIsWorse || (basis != results.Counted && !d.Disruption)
		m.Warnings = append(m.Warnings, "values vary between repetitions with the same seed: compared over runs, not exactly")
		return m
	}
	side := func(vals []float64) Estimate {
		vals = slices.Clone(vals)
		sort.Float64s(vals)
		if len(vals) == 0 {
			return Estimate{}
		}
		return Estimate{Center: vals[len(vals)/2], Lo: vals[0], Hi: vals[len(vals)-1], N: len(vals)}
	}
	m.Base, m.Head = side(collect(base, d.Value)), side(collect(head, d.Value))
	m.DeltaPct = deltaPct(m.Base.Center, m.Head.Center)
	m.Verdict = Same
	var rose, fell int
	var first string
	for _, p := range pairs {
		bv, hv := d.Value(p.base[0]), d.Value(p.head[0])
		if c.equal(d, bv, hv) {
			continue
		}
		if bv < hv {
			rose++
		} else {
			fell++
		}
		if first == "" {
			first = fmt.Sprintf("seed %s: %s -> %s", p.seed, results.FormatValue(bv, d.Unit), results.FormatValue(hv, d.Unit))
		}
	}
	if len(pairs) > 1 && rose+fell > 0 {
		m.Warnings = append(m.Warnings, fmt.Sprintf("%d of %d seeds differ (%d up, %d down), the first %s", rose+fell, len(pairs), rose, fell, first))
	}
	switch {
	case rose > 0 && fell > 0:
		m.Verdict = Different
	case rose > 0:
		m.Verdict = c.changed(d, 1, base, head)
	case fell > 0:
		m.Verdict = c.changed(d, -1, base, head)
	}
	if d.PerSync == nil {
		return m
	}
	for _, p := range pairs {
		keys, _ := pairSyncs(append(runsOf(p.base, nil), runsOf(p.head, nil)...))
		if keys == nil {
			continue
		}
		b, h := perSync(p.base, d.PerSync), perSync(p.head, d.PerSync)
		var moved []record.SyncKey
		for _, k := range keys {
			if !c.equal(d, b[k], h[k]) {
				moved = append(moved, k)
			}
		}
		if len(moved) > 0 {
			k := moved[0]
			m.Warnings = append(m.Warnings, fmt.Sprintf("seed %s: %d of %d paired syncs differ, the first %s: %s -> %s", p.seed,
				len(moved), len(keys), k, results.FormatValue(b[k], d.Unit), results.FormatValue(h[k], d.Unit)))
			if m.Verdict == Same {
				m.Verdict = Different
			}
		}
	}
	return m
}

// equal says whether two values of an exact figure are the same: counts
// exactly, durations within ModeledTolerance.
func (c *Comparison) equal(d MetricDef, a, b float64) bool {
	if a == b || d.Unit != results.UnitSeconds {
		return a == b
	}
	return math.Abs(a-b) <= ModeledTolerance*math.Max(math.Abs(a), math.Abs(b))
}

// changed is the verdict on a figure whose value differs, dir being the
// sign of head against base (0: no direction, as when seeds moved both
// ways): by its direction when it has a worse one, otherwise a change to
// be declared. A run that ended early did less: where such a run has the
// lower value, the difference may be only that, and is not judged.
func (c *Comparison) changed(d MetricDef, dir int, baseFiles, headFiles []*record.File) Verdict {
	short := func(fs []*record.File) bool {
		return slices.ContainsFunc(fs, func(f *record.File) bool { return incomplete(f) != "" })
	}
	if !c.Options.AllowDifferent && ((dir < 0 && short(headFiles)) || (dir > 0 && short(baseFiles)) ||
		(dir == 0 && (short(headFiles) || short(baseFiles)))) {
		return Incomplete
	}
	// A quantile of durations over fewer syncs may move either way.
	if !c.Options.AllowDifferent && d.Class == results.Timing && !d.Disruption && (short(headFiles) || short(baseFiles)) {
		return Incomplete
	}
	switch {
	case !d.HigherIsWorse || dir == 0:
		return Different
	case dir > 0:
		return Regressed
	}
	return Improved
}

// sign is the direction of head against base.
func sign(base, head float64) int {
	switch {
	case head > base:
		return 1
	case head < base:
		return -1
	}
	return 0
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

func collect(fs []*record.File, get func(*record.File) float64) []float64 {
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
func commonBasis(fs []*record.File, basis func(*record.File) string) string {
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
