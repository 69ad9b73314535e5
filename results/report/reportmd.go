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
	if ws, more := r.windows(); len(ws) > 0 {
		b.WriteString("**Disruption windows** (longest first)\n\n| run | service | start (s) | length | failed attempts |\n|---|---|---:|---:|---:|\n")
		for _, wr := range ws {
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %d |\n", results.EscapeMarkdown(wr.Run), results.EscapeMarkdown(wr.Service), wr.Start, wr.Length, wr.Failures)
		}
		if more > 0 {
			fmt.Fprintf(&b, "\nand %d shorter windows.\n", more)
		}
		b.WriteString("\n")
	}
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
