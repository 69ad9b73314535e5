package results

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/kpsim/kpsim/proxier/dataplane"
)

// PrintSummary writes the short human summary that ends `kpsim run`. Every
// figure says how it was obtained: durations follow f.Basis, disruption
// follows the probes' basis, kernel operations are counted, CPU and RSS are
// measured. It recomputes nothing: call Summarize first.
func PrintSummary(w io.Writer, f *File) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	s := &f.Summary
	basis := BasisText(f.Basis)
	title := ScenarioName(f)
	if title == "" {
		title = "run"
	}
	fmt.Fprintf(tw, "kpsim %s\t%s backend, durations %s%s\n", title, OrDash(f.Backend), basis, profileNote(f))
	if f.Interrupted {
		fmt.Fprintf(tw, "interrupted\trun stopped before its timeline finished\n")
	}
	if f.Error != "" {
		fmt.Fprintf(tw, "error\t%s\n", f.Error)
	}
	if s.Syncs == 0 {
		fmt.Fprintf(tw, "syncs\tnone\n")
	} else {
		fmt.Fprintf(tw, "syncs\t%d: p50 %s  p99 %s  max %s (%s)\n", s.Syncs,
			FormatSeconds(s.Sync.P50), FormatSeconds(s.Sync.P99), FormatSeconds(s.Sync.Max), basis)
	}
	if sl := s.Slowest; sl != nil {
		fmt.Fprintf(tw, "slowest sync\tproxier %d %s #%d: %s; slowest phase %s %s (%s)\n",
			sl.Proxier, sl.Family, sl.Seq, FormatSeconds(sl.Seconds), OrDash(sl.Phase), FormatSeconds(sl.PhaseSeconds), basis)
	}
	fmt.Fprintf(tw, "kernel writes\t%d (counted)%s\n", f.Totals.Ops.Writes(), TopOps(f.Totals.Ops, 4))
	re := f.Totals.Readded
	fmt.Fprintf(tw, "deleted, re-added\t%d (counted)%s\n", SumOps(re), TopOps(re, 4))
	if s.Programming.N == 0 {
		fmt.Fprintf(tw, "net programming\tno changes with a trigger time\n")
	} else {
		fmt.Fprintf(tw, "net programming\t%d changes: p50 %s  p99 %s  max %s (%s)\n", s.Programming.N,
			FormatSeconds(s.Programming.P50), FormatSeconds(s.Programming.P99), FormatSeconds(s.Programming.Max), basis)
	}
	d := &s.Disruption
	if f.Probes == nil || d.Attempts == 0 {
		fmt.Fprintf(tw, "disruption\tno probes ran\n")
	} else {
		fmt.Fprintf(tw, "disruption\t%s total, longest %s, %d services, %d of %d attempts failed (%s)\n",
			FormatSeconds(d.Seconds), FormatSeconds(d.LongestGap), d.ServicesAffected, d.FailedAttempts, d.Attempts, BasisText(d.Basis))
	}
	if len(f.Metrics) > 0 {
		var bad []string
		for _, c := range CheckHistograms(f) {
			if !c.Consistent {
				bad = append(bad, fmt.Sprintf("%s{%s}: %s", c.Name, c.LabelText(), c.Problems[0]))
			}
		}
		if len(bad) == 0 {
			fmt.Fprintf(tw, "histograms\t%d exported, all consistent with the raw samples\n", len(f.Metrics))
		} else {
			fmt.Fprintf(tw, "histograms\t%d of %d INCONSISTENT: %s\n", len(bad), len(f.Metrics), strings.Join(bad, "; "))
		}
	}
	if f.Totals.CPUSeconds > 0 || f.Totals.PeakRSS > 0 {
		fmt.Fprintf(tw, "process\tCPU %s, peak RSS %s (measured)\n", FormatSeconds(f.Totals.CPUSeconds), FormatBytes(f.Totals.PeakRSS))
	}
	return tw.Flush()
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
			parts = append(parts, fmt.Sprintf("%d more kinds", len(kvs)-n))
			break
		}
		parts = append(parts, fmt.Sprintf("%s %d", e.op, e.c))
	}
	return ": " + strings.Join(parts, ", ")
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
func ScenarioName(f *File) string {
	var s struct {
		Name string `json:"name"`
	}
	if len(f.Scenario) == 0 || json.Unmarshal(f.Scenario, &s) != nil {
		return ""
	}
	return s.Name
}

func profileNote(f *File) string {
	if f.CostProfile == nil {
		return ""
	}
	return fmt.Sprintf(" (cost profile %s, time scale %g)", f.CostProfile.Name, f.CostProfile.TimeScale)
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
	default:
		return fmt.Sprintf("%.3gs", s)
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
