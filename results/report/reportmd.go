package report

import (
	"fmt"
	"io"
	"strings"

	"github.com/kpsim/kpsim/results"
)

// WriteMarkdown writes the report's tables (no images) sized for a
// pull-request comment.
func (r *Report) WriteMarkdown(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "### kpsim report: %s\n\n", results.EscapeMarkdown(strings.Join(r.labels(), " vs ")))
	table := func(first string, header []string, rows []row) {
		fmt.Fprintf(&b, "| %s |", first)
		for _, h := range header {
			fmt.Fprintf(&b, " %s |", results.EscapeMarkdown(h))
		}
		b.WriteString("\n|---|" + strings.Repeat("---|", len(header)) + "\n")
		for _, rw := range rows {
			fmt.Fprintf(&b, "| %s |", results.EscapeMarkdown(rw.Label))
			for _, c := range rw.Cells {
				fmt.Fprintf(&b, " %s |", mdCell(c))
			}
			b.WriteString("\n")
		}
		b.WriteString("\n")
	}
	labels := r.labels()
	if q, rows := r.questionHeadline(); q != "" {
		b.WriteString("**The scenario's question: " + results.EscapeMarkdown(q) + "**\n\n")
		table("", labels, rows)
		b.WriteString("**The whole run**\n\n")
	}
	table("", labels, r.headline())
	b.WriteString("<details><summary>Scenario and environment</summary>\n\n")
	table("", labels, r.environment())
	b.WriteString("</details>\n\n")
	header, phases := r.phaseTable()
	b.WriteString("**Phases** (" + r.durationBasis() + ")\n\n")
	table(header[0], header[1:], phases)
	if ops := r.opsRows(); len(ops) > 0 {
		b.WriteString("<details><summary>Kernel operations (counted)</summary>\n\n")
		table("operation", labels, ops)
		b.WriteString("</details>\n\n")
	}
	ws, moreWindows := r.windows()
	windows := make([][]string, len(ws))
	for i, wr := range ws {
		windows[i] = []string{results.EscapeMarkdown(wr.Run), results.EscapeMarkdown(wr.Service), wr.Probe, wr.Start, wr.Length, fmt.Sprint(wr.Failures)}
	}
	list(&b, "**Disruption windows** (longest first)", "| run | service | probe | start ("+r.timeOrigin()+") | length | failed attempts |\n|---|---|---|---:|---:|---:|",
		windows, moreWindows, "shorter windows")
	rs, moreReached := r.slowestReached()
	reached := make([][]string, len(rs))
	for i, rr := range rs {
		reached[i] = []string{results.EscapeMarkdown(rr.Run), results.EscapeMarkdown(rr.Service), rr.Kind, rr.Address, rr.Broke, rr.After}
	}
	list(&b, "**Time to first success after broken traffic** (never first, then slowest)", "| run | service | probe | address | broke at | after |\n|---|---|---|---|---:|---:|",
		reached, moreReached, "faster recoveries")
	if hs := r.histograms(); len(hs) > 0 {
		bad := 0
		for _, h := range hs {
			if !h.Consistent {
				bad++
			}
		}
		if bad == 0 {
			fmt.Fprintf(&b, "**Histograms:** all %d exported histograms are internally consistent and agree with the raw samples.\n", len(hs))
		} else {
			fmt.Fprintf(&b, "**Histograms:** %d of %d exported histograms are inconsistent:\n\n", bad, len(hs))
			for _, h := range hs {
				if !h.Consistent {
					fmt.Fprintf(&b, "- %s `%s{%s}`: %s\n", results.EscapeMarkdown(h.Run), h.Metric, h.Labels, results.EscapeMarkdown(strings.Join(h.Problems, "; ")))
				}
			}
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// list writes a table of rows under a heading, and how many more were left
// out; nothing when there are no rows.
func list(b *strings.Builder, heading, header string, rows [][]string, more int, moreWhat string) {
	if len(rows) == 0 {
		return
	}
	fmt.Fprintf(b, "%s\n\n%s\n", heading, header)
	for _, r := range rows {
		fmt.Fprintf(b, "| %s |\n", strings.Join(r, " | "))
	}
	if more > 0 {
		fmt.Fprintf(b, "\nand %d %s.\n", more, moreWhat)
	}
	b.WriteString("\n")
}

func mdCell(c results.Line) string {
	s := results.EscapeMarkdown(c.Text)
	if c.Basis != "" {
		s = strings.TrimSpace(s + " _(" + c.Basis + ")_")
	}
	if c.Note != "" {
		s += "<br>" + results.EscapeMarkdown(c.Note)
	}
	return s
}
