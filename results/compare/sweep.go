package compare

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/kpsim/kpsim/results"
	"github.com/kpsim/kpsim/results/sweep"
)

// SweepComparison is two sweeps compared cell by cell. A cell's name is a
// function of its settings, so a cell of one name ran the same settings in
// both: each cell both ran is compared as Compare compares runs; every
// other cell is listed with what became of it on each side.
type SweepComparison struct {
	Base, Head string // the indexes, as named to Compare
	Cells      []CellComparison
	// Warnings are what a reader must know before trusting a verdict:
	// cells that could not be compared, builds mixed within a sweep.
	Warnings []string
}

// CellComparison is one cell of either sweep.
type CellComparison struct {
	Name string
	// Base and Head are the cell's status in each sweep; "absent" when
	// that sweep has no such cell.
	Base, Head string
	// Comparison is the cell's runs compared; nil unless both ran.
	Comparison *Comparison
	// Refused says why Compare refused to compare the cell's runs (they
	// ran different settings: defaults that changed between the builds).
	Refused string
}

// Absent is the status of a cell a sweep does not have.
const Absent = "absent"

// CompareSweeps compares head with base cell by cell. Cells are listed in
// base's order, then those only head has.
func CompareSweeps(base, head *sweep.Loaded, baseLabel, headLabel string, o Options) *SweepComparison {
	sc := &SweepComparison{Base: baseLabel, Head: headLabel}
	status := func(l *sweep.Loaded) map[string]string {
		out := map[string]string{}
		for _, c := range l.Index.Cells {
			out[c.Name] = c.Status
		}
		return out
	}
	bs, hs := status(base), status(head)
	var names []string
	for _, c := range base.Index.Cells {
		names = append(names, c.Name)
	}
	for _, c := range head.Index.Cells {
		if _, ok := bs[c.Name]; !ok {
			names = append(names, c.Name)
		}
	}
	for _, l := range []*sweep.Loaded{base, head} {
		if len(l.Index.Kpsim) > 1 {
			sc.Warnings = append(sc.Warnings, fmt.Sprintf("%s was run by %d kpsim builds: a cell's difference may be the builds'", l.Path, len(l.Index.Kpsim)))
		}
	}
	var uncompared []string
	for _, name := range names {
		cc := CellComparison{Name: name, Base: orAbsent(bs, name), Head: orAbsent(hs, name)}
		if cc.Base == sweep.StatusOK && cc.Head == sweep.StatusOK {
			c, err := Compare(base.Files[name], head.Files[name], runLabels(baseLabel, len(base.Files[name])),
				runLabels(headLabel, len(head.Files[name])), o)
			var diff *DifferentError
			switch {
			case errors.As(err, &diff):
				cc.Refused = strings.Join(diff.Differences, "; ")
			case err != nil:
				cc.Refused = err.Error()
			}
			cc.Comparison = c
		}
		if !cc.judged() {
			uncompared = append(uncompared, name)
		}
		sc.Cells = append(sc.Cells, cc)
	}
	if len(uncompared) > 0 {
		sc.Warnings = append(sc.Warnings, fmt.Sprintf("%d of %d cells were not compared (see why below): %s", len(uncompared), len(names), clipList(uncompared)))
	}
	return sc
}

func orAbsent(m map[string]string, name string) string {
	if s, ok := m[name]; ok {
		return s
	}
	return Absent
}

func runLabels(side string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s run %d", side, i+1)
	}
	return out
}

func clipList(items []string) string {
	if len(items) <= maxDifferences {
		return strings.Join(items, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(items[:maxDifferences], ", "), len(items)-maxDifferences)
}

// Regressed reports whether the cell got worse: its head failed where its
// base ran.
func (cc *CellComparison) Regressed() bool {
	return cc.Base == sweep.StatusOK && cc.Head == sweep.StatusFailed
}

// fixed reports whether the cell got better: its head ran where its base failed.
func (cc *CellComparison) fixed() bool {
	return cc.Base == sweep.StatusFailed && cc.Head == sweep.StatusOK
}

// judged reports whether the cell has a verdict: its runs were compared,
// or it failed on one side and ran on the other.
func (cc *CellComparison) judged() bool {
	return (cc.Comparison != nil && cc.Refused == "") || cc.Regressed() || cc.fixed()
}

// Failures are the cells that fail the comparison under g: a cell whose
// head failed where its base ran, and a compared cell with a failing row.
func (sc *SweepComparison) Failures(g Gate) []string {
	var out []string
	for i := range sc.Cells {
		cc := &sc.Cells[i]
		if cc.Regressed() || (cc.Comparison != nil && len(cc.Comparison.Failures(g)) > 0) {
			out = append(out, cc.Name)
		}
	}
	return out
}

// Refused are the cells whose runs ran different settings.
func (sc *SweepComparison) Refused() []string {
	var out []string
	for _, cc := range sc.Cells {
		if cc.Refused != "" {
			out = append(out, cc.Name)
		}
	}
	return out
}

// verdict is the cell's line: what changed, or why it was not compared.
func (cc *CellComparison) verdict() string {
	switch {
	case cc.Refused != "":
		return "not compared: the runs differ: " + cc.Refused
	case cc.Regressed():
		return "REGRESSED: the head's cell failed"
	case cc.fixed():
		return "improved: the base's cell failed, the head's ran"
	case cc.Comparison == nil && cc.Base == cc.Head:
		return "not compared: " + cc.Base + " in both"
	case cc.Comparison == nil:
		return fmt.Sprintf("not compared: %s in base, %s in head", cc.Base, cc.Head)
	}
	var changed []string
	for i := range cc.Comparison.Metrics {
		if m := &cc.Comparison.Metrics[i]; m.changed() {
			changed = append(changed, m.Name+" "+string(m.Verdict))
		}
	}
	if len(changed) == 0 {
		return fmt.Sprintf("no significant change in %d metrics", len(cc.Comparison.Metrics))
	}
	return fmt.Sprintf("%d of %d metrics changed: %s", len(changed), len(cc.Comparison.Metrics), strings.Join(changed, ", "))
}

// WriteText writes one line per cell, then each compared cell's changes.
func (sc *SweepComparison) WriteText(w io.Writer) error {
	fmt.Fprintf(w, "base: %s\nhead: %s\n", sc.Base, sc.Head)
	if m := sc.method(); m != "" {
		fmt.Fprintf(w, "each cell: %s\n", m)
	}
	for _, s := range sc.Warnings {
		fmt.Fprintf(w, "WARNING: %s\n", s)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "cell\tbase\thead\tverdict")
	for i := range sc.Cells {
		cc := &sc.Cells[i]
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", cc.Name, cc.Base, cc.Head, cc.verdict())
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, cc := range sc.Cells {
		if cc.Comparison == nil {
			continue
		}
		for _, s := range cc.Comparison.Warnings {
			fmt.Fprintf(w, "\n%s: WARNING: %s", cc.Name, s)
		}
		for i := range cc.Comparison.Metrics {
			if m := &cc.Comparison.Metrics[i]; m.changed() {
				fmt.Fprintf(w, "\n%s: %s: %s", cc.Name, m.Verdict.title(), m.describe())
			}
		}
	}
	fmt.Fprintln(w)
	return nil
}

// method is how every cell was compared, when they all were alike.
func (sc *SweepComparison) method() string {
	m := ""
	for _, cc := range sc.Cells {
		if cc.Comparison == nil {
			continue
		}
		switch cm := cc.Comparison.method(); {
		case m == "":
			m = cm
		case m != cm:
			return "as 'kpsim compare' compares runs; the methods differ between cells"
		}
	}
	return m
}

// WriteMarkdown writes the cells as one table for a pull-request comment
// or a job summary, with each compared cell's changes folded away.
func (sc *SweepComparison) WriteMarkdown(w io.Writer, title string) error {
	fmt.Fprintf(w, "### %s\n\n**base:** %s  \n**head:** %s\n\n", title, results.EscapeMarkdown(sc.Base), results.EscapeMarkdown(sc.Head))
	for _, s := range sc.Warnings {
		fmt.Fprintf(w, "> **warning:** %s\n\n", results.EscapeMarkdown(s))
	}
	fmt.Fprintf(w, "| cell | base | head | verdict |\n|---|---|---|---|\n")
	for i := range sc.Cells {
		cc := &sc.Cells[i]
		fmt.Fprintf(w, "| `%s` | %s | %s | %s |\n", cc.Name, cc.Base, cc.Head, results.EscapeMarkdown(cc.verdict()))
	}
	for _, cc := range sc.Cells {
		if cc.Comparison == nil {
			continue
		}
		var lines []string
		for i := range cc.Comparison.Metrics {
			if m := &cc.Comparison.Metrics[i]; m.changed() {
				lines = append(lines, fmt.Sprintf("- %s: %s", m.Verdict.title(), results.EscapeMarkdown(m.describe())))
			}
		}
		if len(lines) > 0 {
			fmt.Fprintf(w, "\n<details><summary><code>%s</code></summary>\n\n%s\n\n</details>\n", cc.Name, strings.Join(lines, "\n"))
		}
	}
	return nil
}
