package results

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/kpsim/kpsim/dataplane"
	"github.com/kpsim/kpsim/record"
)

// PrintSummary writes the short human summary that ends `kpsim run`: one
// line per figure of the table (Figures) that has something to say. Every
// figure says how it was obtained: durations follow f.Basis, disruption
// follows the probes' basis, kernel operations are counted, CPU and RSS are
// measured. It recomputes nothing: call Summarize first.
func PrintSummary(w io.Writer, f *record.File) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	title := ScenarioName(f)
	if title == "" {
		title = "run"
	}
	fmt.Fprintf(tw, "kpsim %s\t%s\n", title, RunNote(f))
	if f.Interrupted {
		fmt.Fprintf(tw, "interrupted\trun stopped before its timeline finished\n")
	}
	if f.Error != "" {
		fmt.Fprintf(tw, "error\t%s\n", f.Error)
	}
	indent := ""
	if q := f.Summary.Question; q != "" {
		// The segment the scenario asks about leads; the whole run follows.
		v := View(f, q)
		seg, _ := SegmentNamed(f, q)
		// No tab: a line's last cell does not widen the column.
		fmt.Fprintf(tw, "question: %s\n", SegmentTitle(f, seg.Segment))
		printLines(tw, "  ", v, slices.DeleteFunc(Figures(v), func(fg Figure) bool { return fg.RunOnly }))
		fmt.Fprintf(tw, "whole run\n")
		indent = "  "
	}
	printLines(tw, indent, f, Figures(f))
	if segs := f.Summary.Segments; len(segs) > 1 {
		fmt.Fprintf(tw, "%ssegments\n", indent)
		for _, s := range segs {
			fmt.Fprintf(tw, "%s  %s\n", indent, segmentLine(f, s))
		}
	}
	return tw.Flush()
}

func printLines(w io.Writer, indent string, f *record.File, figs []Figure) {
	for _, fg := range figs {
		if fg.Line == nil {
			continue
		}
		if l, ok := fg.Line(f); ok {
			fmt.Fprintf(w, "%s%s\t%s\n", indent, fg.Label, l)
		}
	}
}

// segmentLine is a segment's figures in one line: what ran in it, its
// slowest sync and its broken traffic.
func segmentLine(f *record.File, s record.SegmentSummary) string {
	line := fmt.Sprintf("%s: %d %s", SegmentTitle(f, s.Segment), s.Summary.Syncs, Plural(s.Summary.Syncs, "sync", "syncs"))
	if s.Summary.Sync.N > 0 {
		line += fmt.Sprintf(", p99 %s, max %s", FormatSeconds(s.Summary.Sync.P99), FormatSeconds(s.Summary.Sync.Max))
	}
	if d := s.Summary.Disruption; d.Attempts > 0 {
		line += fmt.Sprintf(", disruption %s (%d of %d %s failed)", FormatSeconds(d.Seconds), d.FailedAttempts, d.Attempts, Plural(d.Attempts, "attempt", "attempts"))
	}
	return line
}

// String is the line as the summary prints it: "15: p50 ... (modeled): note".
func (l Line) String() string {
	s := l.Text
	if l.Basis != "" {
		s += " (" + l.Basis + ")"
	}
	if l.Note != "" {
		s += ": " + l.Note
	}
	return s
}

// RunNote says what ran and how its figures were obtained: backend, proxier
// under test, the basis of its durations and the clock of its timestamps.
func RunNote(f *record.File) string {
	s := OrDash(f.Backend) + " backend"
	if f.Proxier != "" && f.Proxier != record.ProxierKpsim {
		s += ", proxier " + f.Proxier
	}
	s += ", durations " + BasisText(f.Basis)
	if p := f.CostProfile; p != nil {
		s += fmt.Sprintf(" (cost profile %s, time scale %g)", p.Name, p.TimeScale)
	}
	if f.Clock != "" {
		s += ", " + f.Clock + " clock"
	}
	return s
}

// TopOps lists the n largest non-zero write counts, for a one-line summary.
func TopOps(o dataplane.Ops, n int) string {
	type kv struct {
		op dataplane.Op
		c  int64
	}
	var kvs []kv
	for _, op := range dataplane.AllOps() {
		if op.IsWrite() && o[op] != 0 {
			kvs = append(kvs, kv{op, o[op]})
		}
	}
	sort.SliceStable(kvs, func(i, j int) bool { return kvs[i].c > kvs[j].c })
	if len(kvs) == 0 {
		return ""
	}
	parts := make([]string, 0, n)
	for i, e := range kvs {
		if i == n {
			parts = append(parts, fmt.Sprintf("%d more %s", len(kvs)-n, Plural(len(kvs)-n, "kind", "kinds")))
			break
		}
		parts = append(parts, fmt.Sprintf("%s %d", e.op, e.c))
	}
	return strings.Join(parts, ", ")
}

// SumOps is the total of every operation count.
func SumOps(o dataplane.Ops) int64 {
	var n int64
	for _, c := range o {
		n += c
	}
	return n
}

// ScenarioName is the scenario's name as recorded in the file, or "".
func ScenarioName(f *record.File) string {
	var s struct {
		Name string `json:"name"`
	}
	if len(f.Scenario) == 0 || json.Unmarshal(f.Scenario, &s) != nil {
		return ""
	}
	return s.Name
}

// BasisText names a basis for a reader, saying so when it is unknown.
func BasisText(b string) string {
	if b == "" {
		return "basis unknown"
	}
	return b
}

// OrDash stands in a dash for an empty value in a table.
func OrDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// Plural is one when n is 1 and many otherwise, for the noun after a count:
// "1 sync", "0 syncs", "2 syncs".
func Plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// ListSome joins up to n items, then says how many more there are: "a, b
// and 3 more" ("none" for no items). A message about thousands of items
// stays a line.
func ListSome(items []string, n int) string {
	switch {
	case len(items) == 0:
		return "none"
	case len(items) <= n:
		return strings.Join(items, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(items[:n], ", "), len(items)-n)
}

// FormatSeconds prints a duration in the unit a person would use for it.
func FormatSeconds(s float64) string {
	switch {
	case s == 0:
		return "0"
	case s < 1e-6:
		return fmt.Sprintf("%.0fns", s*1e9)
	case s < 1e-3:
		return fmt.Sprintf("%.0fµs", s*1e6)
	case s < 1:
		return fmt.Sprintf("%.3gms", s*1e3)
	case s < 999.5:
		return fmt.Sprintf("%.3gs", s)
	case s < 3599.5:
		m := int(math.Round(s))
		return fmt.Sprintf("%dm%02ds", m/60, m%60)
	default:
		m := int(math.Round(s / 60))
		return fmt.Sprintf("%dh%02dm", m/60, m%60)
	}
}

// FormatBytes prints a byte count in MiB or KiB.
func FormatBytes(b int64) string {
	switch {
	case b >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20))
	case b >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(b)/(1<<10))
	default:
		return fmt.Sprintf("%d B", b)
	}
}

// EscapeMarkdown keeps file names from turning into Markdown emphasis or tables.
func EscapeMarkdown(s string) string {
	return strings.NewReplacer("|", `\|`, "*", `\*`, "_", `\_`, "`", "\\`").Replace(s)
}
