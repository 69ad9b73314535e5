package results

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/kpsim/kpsim/record"
)

// PrintSpread writes what several runs of one scenario said, figure by
// figure, as the median and the range over the runs: where runs of one
// seed differ (a kube-proxy release, the kernel backend, the wall clock)
// no single run is the answer. It covers the figures comparisons test that
// a reader looks for first: those with a line in the summary, broken
// traffic whole, and the scenario's question segment apart. Files must be
// summarized.
func PrintSpread(w io.Writer, files []*record.File) error {
	if len(files) == 0 {
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	f := files[0]
	fmt.Fprintf(tw, "kpsim %s: %d %s\t%s\n", ScenarioName(f), len(files), Plural(len(files), "run", "runs"), RunNote(f))
	fmt.Fprintf(tw, "each figure: the median over the runs, and their range\n")
	indent := ""
	if q := f.Summary.Question; q != "" {
		fmt.Fprintf(tw, "question: %s\n", q)
		printSpread(tw, "  ", q+"/", files, SegmentFigures(q, files...))
		fmt.Fprintf(tw, "whole run\n")
		indent = "  "
	}
	printSpread(tw, indent, "", files, Figures(files...))
	return tw.Flush()
}

// printSpread prints the figures by the names comparisons give them
// (without the segment's prefix); an operation kind or a phase of its own
// is detail a comparison lists, not a headline.
func printSpread(w io.Writer, indent, prefix string, files []*record.File, figs []Figure) {
	detail := func(name string) bool {
		return slices.ContainsFunc([]string{"ops/", "readded/", "phase/"}, func(p string) bool { return strings.HasPrefix(name, p) })
	}
	for _, fg := range figs {
		name := strings.TrimPrefix(fg.Name, prefix)
		if fg.Class == "" || (fg.Label == "" && detail(name)) {
			continue
		}
		if fg.Dist == nil {
			fmt.Fprintf(w, "%s%s\t%s\n", indent, name, spreadOf(files, fg.Value, fg.Unit))
			continue
		}
		var parts []string
		for _, q := range fg.Quantiles {
			parts = append(parts, q.Name+" "+spreadOf(files, func(f *record.File) float64 { return q.Of(fg.Dist(f)) }, fg.Unit))
		}
		fmt.Fprintf(w, "%s%s\t%s\n", indent, name, strings.Join(parts, "  "))
	}
}

// spreadOf is a figure's median over the files and their range, "12.1s
// (9.8s..14s)", or the one value every file has.
func spreadOf(files []*record.File, value func(*record.File) float64, unit string) string {
	vs := make([]float64, len(files))
	for i, f := range files {
		vs[i] = value(f)
	}
	med := FormatValue(NewDist(vs).P50, unit)
	if lo, hi := slices.Min(vs), slices.Max(vs); lo != hi {
		return fmt.Sprintf("%s (%s..%s)", med, FormatValue(lo, unit), FormatValue(hi, unit))
	}
	return med
}
