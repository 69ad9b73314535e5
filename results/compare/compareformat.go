package compare

import (
	"fmt"
	"io"
	"math"
	"strings"
	"text/tabwriter"

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
	switch {
	case math.IsNaN(m.P):
		return "exact"
	case m.Class == results.Exact:
		return formatP(m.P) + " (varies)"
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

// changed reports whether the row deserves a line in a short summary.
func (m *MetricComparison) changed() bool {
	return m.Verdict == Regressed || m.Verdict == Improved || m.Verdict == Different || m.Verdict == Incomplete
}

// describe is a one-line account of a changed row, naming the metric (and
// so the phase), the change and how sure it is.
func (m *MetricComparison) describe() string {
	var s string
	switch {
	case m.Class == results.Exact && math.IsNaN(m.P):
		s = fmt.Sprintf("%s %s -> %s (%s, compared exactly)", m.Name, m.value(m.Base), m.value(m.Head), m.delta())
	case m.Class == results.Exact:
		s = fmt.Sprintf("%s median %s (%s..%s) -> %s (%s..%s) (p=%s: values vary between runs)", m.Name,
			m.value(m.Base), results.FormatValue(m.Base.Lo, m.Unit), results.FormatValue(m.Base.Hi, m.Unit),
			m.value(m.Head), results.FormatValue(m.Head.Lo, m.Unit), results.FormatValue(m.Head.Hi, m.Unit), m.pValue())
	case m.Samples == SamplesAttempts:
		s = fmt.Sprintf("%s %s -> %s (%s, p=%s, Fisher's exact test over probe attempts: %s, %s)", m.Name,
			results.FormatValue(m.Base.Center, m.Unit), results.FormatValue(m.Head.Center, m.Unit), m.delta(), m.pValue(),
			strings.Join(m.Warnings, "; "), results.BasisText(m.Basis))
		return s
	default:
		s = fmt.Sprintf("%s %s -> %s (%s, p=%s over %s samples, %s)", m.Name,
			results.FormatValue(m.Base.Center, m.Unit), results.FormatValue(m.Head.Center, m.Unit), m.delta(), m.pValue(), m.Samples, results.BasisText(m.Basis))
	}
	if m.Class == results.Exact && len(m.Warnings) > 0 {
		s += "; " + strings.Join(m.Warnings, "; ")
	}
	return s
}

// title is how a verdict heads its line in the list of changes.
func (v Verdict) title() string {
	if v == Incomplete {
		return "NOT JUDGED (incomplete run)"
	}
	return strings.ToUpper(string(v))
}

func (c *Comparison) method() string {
	var tests string
	switch {
	case c.Modeled:
		seeds := "one seed"
		if len(c.Seeds) > 1 {
			seeds = fmt.Sprintf("%d seeds, paired by seed", len(c.Seeds))
		}
		return fmt.Sprintf("modeled clock (%s): every figure but the measured CPU and RSS compared exactly, modeled durations within a relative %g; "+
			"measured figures take the Mann-Whitney U test, each file one sample, alpha %g", seeds, ModeledTolerance, c.Options.Alpha)
	case c.PerSync:
		tests = "one file per side: sync and phase quantiles take the Mann-Whitney U test over per-sync samples; other timing metrics cannot reach significance"
	default:
		tests = "Mann-Whitney U test, each file one sample"
	}
	ci := fmt.Sprintf("%g%% confidence intervals of the median (shown with 6 or more runs per side)", 100*c.Options.Confidence)
	return fmt.Sprintf("%s; broken traffic takes Fisher's exact test over probe attempts; alpha %g, threshold %g%% and %s; %s; kernel operation counts, modeled kernel time and failed syncs compared exactly",
		tests, c.Options.Alpha, c.Options.Threshold, results.FormatSeconds(c.Options.MinDeltaSeconds), ci)
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
		if m := &c.Metrics[i]; m.changed() {
			changed = true
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
	var changed []*MetricComparison
	for i := range c.Metrics {
		if m := &c.Metrics[i]; m.changed() {
			changed = append(changed, m)
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
func WriteBenchstat(w io.Writer, side string, files []*results.File) error {
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
