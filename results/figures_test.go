package results_test

import (
	"bytes"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kpsim/kpsim/record"
	"github.com/kpsim/kpsim/results"
	"github.com/kpsim/kpsim/results/resultstest"
)

// TestFiguresTable checks that every row of the table can be read the way
// its readers read it: compared rows have a unit, a basis and exactly one
// of a value and a distribution; shown rows have a label.
func TestFiguresTable(t *testing.T) {
	f := resultstest.File(resultstest.Options{Name: "smoke", Seed: 1, Syncs: 6, Probes: true, Metrics: true})
	f.Syncs[0].KernelSeconds = 0.5
	f.Probes.Targets[0].First = resultstest.Epoch
	results.Summarize(f)
	names := map[string]bool{}
	for _, fg := range results.Figures(f) {
		require.NotEmpty(t, fg.Name)
		require.False(t, names[fg.Name], "figure %s listed twice", fg.Name)
		names[fg.Name] = true
		if fg.Line != nil {
			require.NotEmpty(t, fg.Label, fg.Name)
		}
		if fg.Class == "" {
			require.NotNil(t, fg.Line, "%s: neither compared nor shown", fg.Name)
			continue
		}
		require.NotEmpty(t, fg.Unit, fg.Name)
		require.NotNil(t, fg.Basis, fg.Name)
		require.True(t, (fg.Value == nil) != (fg.Dist == nil), "%s: want a value or a distribution", fg.Name)
		if fg.Dist != nil {
			require.NotEmpty(t, fg.Quantiles, fg.Name)
		}
		if fg.Class == results.Timing {
			require.True(t, fg.HigherIsWorse, "%s: every timing figure is worse higher", fg.Name)
		}
	}
	for _, want := range []string{"sync", "failed-syncs", "kernel/seconds", "ops/writes", "readded/total", "programming",
		"disruption/seconds", "reachable", "unreachable", "process/cpu", "phase/ipset-entries", "ops/ipset-add"} {
		require.True(t, names[want], "figure %s missing", want)
	}
}

// TestFiguresOnlyWhenRecorded leaves out what a file cannot have: modeled
// kernel time on the real kernel, first successes in a file that did not
// record first attempts.
func TestFiguresOnlyWhenRecorded(t *testing.T) {
	f := resultstest.File(resultstest.Options{Name: "smoke", Seed: 1, Syncs: 3, Probes: true})
	for _, fg := range results.Figures(f) {
		require.NotContains(t, []string{"kernel/seconds", "reachable", "unreachable"}, fg.Name)
	}
}

// TestPrintSummaryPrintsTheTable: the summary has a line for every figure
// of the table with something to say, under the figure's label.
func TestPrintSummaryPrintsTheTable(t *testing.T) {
	f := resultstest.File(resultstest.Options{Name: "smoke", Seed: 1, Syncs: 6, Probes: true, Metrics: true})
	f.Syncs[1].KernelSeconds = 0.25
	f.Syncs[1].ProxierSeconds = 0.01
	for i := range f.Probes.Targets {
		f.Probes.Targets[i].First = resultstest.Epoch
		if i > 0 {
			f.Probes.Targets[i].FirstOK = resultstest.Epoch.Add(time.Duration(i) * 500 * time.Millisecond)
		}
	}
	results.Summarize(f)
	var b bytes.Buffer
	require.NoError(t, results.PrintSummary(&b, f))
	lines := strings.Split(b.String(), "\n")
	shown := 0
	for _, fg := range results.Figures(f) {
		if fg.Line == nil {
			continue
		}
		l, ok := fg.Line(f)
		if !ok {
			continue
		}
		shown++
		want := fg.Label + "  "
		found := false
		for _, line := range lines {
			found = found || (strings.HasPrefix(line, want) && strings.Contains(line, l.Text))
		}
		require.True(t, found, "no line %q with %q in\n%s", fg.Label, l.Text, b.String())
	}
	require.GreaterOrEqual(t, shown, 9)
	require.Contains(t, b.String(), "kernel time        250ms (modeled): priced per operation from cost profile host-2026; the proxier's own part 10ms")
	// The restart breaks two services, for 1 s and 2.5 s (synthetic probes).
	require.Contains(t, b.String(), "first success      p50 1s  p99 2.5s  max 2.5s (modeled): from each disruption window's first failed attempt to the next success, over 2 windows")
	require.Contains(t, b.String(), "restart (from step 3, restart proxier, at 3.75s): 3 syncs")
}

// TestKernelTimeSaysWhatIsMeasured: the kernel's time is priced at any time
// scale; the proxier's own part beside it is priced on the modeled clock
// and measured on the wall clock, and says so.
func TestKernelTimeSaysWhatIsMeasured(t *testing.T) {
	tests := []struct {
		modeled bool
		want    string
	}{
		{true, "priced per operation from cost profile host-2026; the proxier's own part 10ms"},
		{false, "priced per operation from cost profile host-2026; the proxier's own part 10ms (measured)"},
	}
	for _, tt := range tests {
		f := resultstest.File(resultstest.Options{Name: "smoke", Seed: 1, Syncs: 3, Modeled: tt.modeled})
		for i := range f.Syncs {
			f.Syncs[i].KernelSeconds, f.Syncs[i].ProxierSeconds = 0, 0
		}
		f.Syncs[1].KernelSeconds, f.Syncs[1].ProxierSeconds = 0.25, 0.01
		i := slices.IndexFunc(results.Figures(f), func(fg results.Figure) bool { return fg.Name == "kernel/seconds" })
		require.GreaterOrEqual(t, i, 0)
		l, ok := results.Figures(f)[i].Line(f)
		require.True(t, ok)
		require.Equal(t, results.Line{Text: "250ms", Basis: record.Modeled, Note: tt.want}, l)
	}
}

// TestPrintSummaryShowsFailedSyncs: failed syncs are counted apart and the
// first error is printed, whether some or all syncs failed; syncs cut short
// by a restart are counted apart too, and are not failures.
func TestPrintSummaryShowsFailedSyncs(t *testing.T) {
	const full = "ipset add KUBE-CLUSTER-IP 10.96.0.10,tcp:80: set is full (maxelem 65536)"
	tests := []struct {
		name    string
		failed  []int // indexes of failed syncs
		stopped []int // indexes of syncs stopped by a restart
		want    []string
		absent  []string
	}{
		{name: "none failed", want: []string{"syncs              6: p50"}, absent: []string{"failed"}},
		{name: "some failed", failed: []int{2, 4},
			want: []string{"syncs              6, 2 failed: p50", "over the 4 that finished",
				"failed syncs       2 (counted): first: proxier 0 IPv4 #3: " + full}},
		{name: "all failed", failed: []int{0, 1, 2, 3, 4, 5},
			want:   []string{"syncs              6, 6 failed: none finished", "failed syncs       6 (counted): first: proxier 0 IPv4 #1: " + full},
			absent: []string{"slowest sync"}},
		{name: "one stopped", stopped: []int{3},
			want:   []string{"syncs              6, 1 stopped by a restart or the run's end: p50", "over the 5 that finished"},
			absent: []string{"failed"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := resultstest.File(resultstest.Options{Name: "smoke", Seed: 1, Syncs: 6})
			for _, i := range tt.failed {
				f.Syncs[i].Error = full
			}
			for _, i := range tt.stopped {
				f.Syncs[i].Error, f.Syncs[i].Stopped = "ipvs-service-add 10.96.0.1:80/TCP: the proxier was stopped: operation canceled", true
			}
			results.Summarize(f)
			require.Equal(t, len(tt.failed), f.Summary.FailedSyncs)
			require.Equal(t, len(tt.stopped), f.Summary.StoppedSyncs)
			var b bytes.Buffer
			require.NoError(t, results.PrintSummary(&b, f))
			for _, w := range tt.want {
				require.Contains(t, b.String(), w)
			}
			for _, a := range tt.absent {
				require.NotContains(t, b.String(), a)
			}
		})
	}
}
