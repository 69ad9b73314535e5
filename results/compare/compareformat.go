package compare

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/kpsim/kpsim/record"
	"github.com/kpsim/kpsim/results"
)

// interval prints an estimate's confidence interval as ±percent of its center.
func (e Estimate) interval() string {
	switch {
	case e.N == 0 || math.IsNaN(e.Center):
		return ""
	case e.Lo == e.Hi && e.Lo == e.Center:
		return "±0%"
	case math.IsInf(e.Lo, 0) || math.IsInf(e.Hi, 0):
		return "" // too few runs for an interval; the method line says so
	case e.Center == 0:
		return "±?"
	}
	return fmt.Sprintf("±%.0f%%", 100*math.Max(e.Hi/e.Center-1, 1-e.Lo/e.Center))
}

func (m *MetricComparison) value(e Estimate) string {
	s := results.FormatValue(e.Center, m.Unit)
	if iv := e.interval(); iv != "" && m.Class == results.Timing {
		s += " " + iv
	}
	return s
}

func (m *MetricComparison) delta() string {
	switch {
	case math.IsNaN(m.DeltaPct):
		return "new"
	case m.DeltaPct == 0:
		return "0%"
	}
	return fmt.Sprintf("%+.1f%%", m.DeltaPct)
}

func (m *MetricComparison) pValue() string {
	if math.IsNaN(m.P) {
		return "exact"
	}
	return formatP(m.P)
}

// formatP keeps small p-values readable: 0.0004, not 0.000.
func formatP(p float64) string {
	if p > 0 && p < 0.001 {
		return fmt.Sprintf("%.1g", p)
	}
	return fmt.Sprintf("%.3f", p)
}

// changed reports whether the row deserves a line in a short summary of
// what changed.
func (m *MetricComparison) changed() bool {
	switch m.Verdict {
	case Regressed, Improved, Different, Changed, Incomplete:
		return true
	}
	return false
}

// listed reports whether the row has a line below the table: a change, or
// a change the runs could not decide.
func (m *MetricComparison) listed() bool { return m.changed() || m.Verdict == Undecided }

// describe is a one-line account of a listed row, naming the metric (and
// so the phase), the change and how sure it is.
func (m *MetricComparison) describe() string {
	if math.IsNaN(m.P) {
		s := fmt.Sprintf("%s %s -> %s (%s, compared exactly)", m.Name, m.value(m.Base), m.value(m.Head), m.delta())
		if len(m.Warnings) > 0 {
			s += "; " + strings.Join(m.Warnings, "; ")
		}
		return s
	}
	s := fmt.Sprintf("%s median %s -> %s (%s, p=%s over %d+%d runs, %s)", m.Name,
		results.FormatValue(m.Base.Center, m.Unit)+spread(m.baseRuns, m.Unit), results.FormatValue(m.Head.Center, m.Unit)+spread(m.headRuns, m.Unit),
		m.delta(), m.pValue(), len(m.baseRuns), len(m.headRuns), results.BasisText(m.Basis))
	if m.Verdict == Undecided {
		s += ": " + m.undecided()
	}
	if len(m.Warnings) > 0 {
		s += "; " + strings.Join(m.Warnings, "; ")
	}
	return s
}

// spread is the range of a side's runs, " (lo..hi)", or "" for one run or
// runs that agree.
func spread(runs []float64, unit string) string {
	if len(runs) < 2 || slices.Min(runs) == slices.Max(runs) {
		return ""
	}
	return fmt.Sprintf(" (%s..%s)", results.FormatValue(slices.Min(runs), unit), results.FormatValue(slices.Max(runs), unit))
}

// undecided says how many runs would decide an Undecided row.
func (m *MetricComparison) undecided() string {
	switch {
	case m.RunsNeeded > maxRuns:
		return fmt.Sprintf("the change is within the runs' spread: more than %d runs per side would be needed to tell it from noise", maxRuns)
	case min(len(m.baseRuns), len(m.headRuns)) < 2:
		return fmt.Sprintf("one run a side shows no spread: at least %d runs per side are needed to decide", m.RunsNeeded)
	case variance(m.baseRuns) == 0 && variance(m.headRuns) == 0:
		return fmt.Sprintf("every run of each side agrees: %d runs per side would call it", m.RunsNeeded)
	}
	return fmt.Sprintf("about %d runs per side would detect a change of this size with this spread", m.RunsNeeded)
}

// title is how a verdict heads its line in the list of changes.
func (v Verdict) title() string {
	if v == Incomplete {
		return "NOT JUDGED (incomplete run)"
	}
	return strings.ToUpper(string(v))
}

func (c *Comparison) method() string {
	ci := fmt.Sprintf("%g%% confidence intervals of the median (shown with 6 or more runs per side)", 100*c.Options.Confidence)
	overRuns := fmt.Sprintf("the Mann-Whitney U test over runs, each run one sample, its p-values adjusted by Holm's method over the %d figures whose runs vary (alpha %g for the whole comparison)",
		c.Tested, c.Options.Alpha)
	if c.Modeled {
		seeds := "one seed"
		if len(c.Seeds) > 1 {
			seeds = fmt.Sprintf("%d seeds, paired by seed", len(c.Seeds))
		}
		return fmt.Sprintf("modeled clock (%s): every figure but the measured CPU and RSS compared exactly, modeled durations within a relative %g; measured figures take %s",
			seeds, ModeledTolerance, overRuns)
	}
	return fmt.Sprintf("runs are samples (%s): every figure takes %s; a change every run agrees on is called with %d runs per side; "+
		"timing figures count beyond %g%% and %s, broken traffic and counts at any size; %s",
		c.Samples, overRuns, c.MinRuns, c.Options.Threshold, results.FormatSeconds(c.Options.MinDeltaSeconds), ci)
}

// WriteText writes the comparison as an aligned table followed by the changes.
func (c *Comparison) WriteText(w io.Writer) error {
	fmt.Fprintf(w, "base: %s\nhead: %s\n%s\n", strings.Join(c.Base, ", "), strings.Join(c.Head, ", "), c.method())
	for _, n := range c.Warnings {
		fmt.Fprintf(w, "WARNING: %s\n", n)
	}
	for _, n := range c.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "metric\tbasis\tbase\thead\tchange\tp\tverdict")
	for i := range c.Metrics {
		m := &c.Metrics[i]
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", m.Name, results.BasisText(m.Basis), m.value(m.Base), m.value(m.Head), m.delta(), m.pValue(), m.Verdict)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	changed := false
	for i := range c.Metrics {
		if m := &c.Metrics[i]; m.listed() {
			changed = changed || m.changed()
			fmt.Fprintf(w, "%s: %s\n", m.Verdict.title(), m.describe())
		}
	}
	if !changed {
		fmt.Fprintln(w, "no significant change")
	}
	if len(c.Warnings) > 0 {
		fmt.Fprintf(w, "WARNING: %d warnings above: read every verdict with them\n", len(c.Warnings))
	}
	return nil
}

// WriteMarkdown writes a summary that fits a pull-request comment: the
// changes first, then every metric folded away.
func (c *Comparison) WriteMarkdown(w io.Writer, title string) error {
	fmt.Fprintf(w, "### %s\n\n", title)
	fmt.Fprintf(w, "**base:** %s  \n**head:** %s\n\n", results.EscapeMarkdown(strings.Join(c.Base, ", ")), results.EscapeMarkdown(strings.Join(c.Head, ", ")))
	for _, n := range c.Warnings {
		fmt.Fprintf(w, "> **warning:** %s\n\n", results.EscapeMarkdown(n))
	}
	for _, n := range c.Notes {
		fmt.Fprintf(w, "> note: %s\n\n", results.EscapeMarkdown(n))
	}
	var changed, undecided []*MetricComparison
	for i := range c.Metrics {
		switch m := &c.Metrics[i]; {
		case m.changed():
			changed = append(changed, m)
		case m.listed():
			undecided = append(undecided, m)
		}
	}
	row := func(m *MetricComparison) {
		fmt.Fprintf(w, "| `%s` | %s | %s | %s | %s | %s | %s |\n", m.Name, results.BasisText(m.Basis), m.value(m.Base), m.value(m.Head), m.delta(), m.pValue(), verdictMark(m.Verdict))
	}
	header := "| metric | basis | base | head | change | p | verdict |\n|---|---|---:|---:|---:|---:|---|\n"
	if len(changed) == 0 {
		fmt.Fprintf(w, "No significant change in %d metrics.\n\n", len(c.Metrics))
	} else {
		fmt.Fprintf(w, "%d of %d metrics changed:\n\n%s", len(changed), len(c.Metrics), header)
		for _, m := range changed {
			row(m)
		}
		fmt.Fprintln(w)
	}
	if len(undecided) > 0 {
		fmt.Fprintf(w, "The runs cannot decide %d metrics:\n\n", len(undecided))
		for _, m := range undecided {
			fmt.Fprintf(w, "- `%s`: %s\n", m.Name, results.EscapeMarkdown(m.undecided()))
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "<details><summary>All metrics</summary>\n\n%s", header)
	for i := range c.Metrics {
		row(&c.Metrics[i])
	}
	fmt.Fprintf(w, "\n%s.\n\n</details>\n", c.method())
	return nil
}

func verdictMark(v Verdict) string {
	switch v {
	case Regressed, Different:
		return "**" + string(v) + "**"
	case Improved:
		return "_" + string(v) + "_"
	}
	return string(v)
}

// WriteBenchstat writes one line per metric per file in Go's benchmark
// format, preceded by a "kpsim-side: SIDE" configuration line, so that
// `benchstat -col kpsim-side FILE` (or two separate outputs) tabulates it.
// Seconds become ns/op; other units are kept.
func WriteBenchstat(w io.Writer, side string, files []*record.File) error {
	defs := Catalog(files)
	fmt.Fprintf(w, "kpsim-side: %s\n", side)
	for _, f := range files {
		name := benchName(results.ScenarioName(f))
		for _, d := range defs {
			v, unit := d.Value(f), d.Unit
			switch unit {
			case results.UnitSeconds:
				v, unit = v*1e9, "ns/op"
			case results.UnitBytes:
				unit = "B"
			}
			if _, err := fmt.Fprintf(w, "BenchmarkKpsim/%s/%s 1 %.6g %s\n", name, d.Name, v, unit); err != nil {
				return err
			}
		}
	}
	_, err := fmt.Fprintln(w)
	return err
}

// benchName makes a scenario name safe inside a benchmark name (no spaces).
func benchName(s string) string {
	if s == "" {
		return "run"
	}
	return strings.Map(func(r rune) rune {
		if r == ' ' || r == '\t' {
			return '-'
		}
		return r
	}, s)
}
