package compare_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/perf/benchfmt"

	"github.com/kpsim/kpsim/dataplane"
	"github.com/kpsim/kpsim/record"
	"github.com/kpsim/kpsim/results"
	"github.com/kpsim/kpsim/results/compare"
	"github.com/kpsim/kpsim/results/resultstest"
)

// runs returns n repetitions of one scenario: same seed, different noise.
func runs(n int, o resultstest.Options, firstRun uint64) ([]*record.File, []string) {
	fs := make([]*record.File, n)
	labels := make([]string, n)
	for i := range fs {
		o.Run = firstRun + uint64(i)
		fs[i] = resultstest.File(o)
		labels[i] = strings.Repeat("r", i+1)
	}
	return fs, labels
}

func byName(c *compare.Comparison) map[string]compare.MetricComparison {
	m := map[string]compare.MetricComparison{}
	for _, r := range c.Metrics {
		m[r.Name] = r
	}
	return m
}

// mustCompare compares, allowing different settings: the synthetic runs
// with another ipset strategy record another scenario.
func mustCompare(t *testing.T, base, head []*record.File, bl, hl []string, o compare.Options) *compare.Comparison {
	t.Helper()
	o.AllowDifferent = true
	c, err := compare.Compare(base, head, bl, hl, o)
	require.NoError(t, err)
	return c
}

// regressions are the rows of a class that regressed or changed.
func regressions(c *compare.Comparison, class results.Class) []compare.MetricComparison {
	var out []compare.MetricComparison
	for _, m := range c.Metrics {
		if m.Class == class && (m.Verdict == compare.Regressed || m.Verdict == compare.Different) {
			out = append(out, m)
		}
	}
	return out
}

func TestCompareTellsNoiseFromRegression(t *testing.T) {
	shape := resultstest.Options{Name: "smoke", Seed: 7, Syncs: 20, Services: 200, Noise: 0.1, Probes: true}
	exec := shape
	exec.IPSetExec = true
	tests := []struct {
		name      string
		head      resultstest.Options
		perSide   int
		regressed []string // timing rows that must regress
		undecided []string // rows the runs must say they cannot decide
	}{
		{name: "same build, 8 runs each", head: shape, perSide: 8},
		{name: "same build, one run each", head: shape, perSide: 1},
		{name: "exec ipset, 8 runs each", head: exec, perSide: 8, regressed: []string{"phase/ipset-entries/p50", "phase/ipset-entries/p99", "sync/p99", "sync/max"}},
		// One run a side is one sample a side: a tenfold change is not
		// called, and the comparison says how many runs would call it.
		{name: "exec ipset, one run each", head: exec, perSide: 1, undecided: []string{"phase/ipset-entries/p50", "phase/ipset-entries/p99", "sync/p50", "sync/p99"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			base, bl := runs(tt.perSide, shape, 0)
			head, hl := runs(tt.perSide, tt.head, 100)
			c := mustCompare(t, base, head, bl, hl, compare.DefaultOptions())
			require.False(t, c.Modeled)
			rows := byName(c)
			var regressed []string
			for _, m := range regressions(c, results.Timing) {
				regressed = append(regressed, m.Name)
			}
			if len(tt.regressed) == 0 {
				require.Empty(t, regressed)
				require.Empty(t, c.Failures(compare.Gate{Timing: true}), "one run a side, or no change: nothing fails")
			}
			for _, name := range tt.regressed {
				require.Contains(t, regressed, name)
				require.Less(t, rows[name].P, 0.05)
				require.Greater(t, rows[name].DeltaPct, 100.0)
			}
			for _, name := range regressed {
				name = strings.TrimPrefix(strings.TrimPrefix(name, "start/"), "restart/")
				require.True(t, strings.HasPrefix(name, "sync/") || strings.HasPrefix(name, "phase/ipset-entries/"),
					"only the ipset phase and the syncs containing it may regress, got %s", name)
			}
			for _, name := range tt.undecided {
				require.Equal(t, compare.Undecided, rows[name].Verdict, name)
				require.Equal(t, c.MinRuns, rows[name].RunsNeeded, "one run a side shows no spread: the fewest runs that can call anything")
			}
			// The ipset strategy changes timing, not what is programmed.
			require.Empty(t, regressions(c, results.Exact))
			require.Equal(t, compare.Same, rows["ops/ipset-add"].Verdict)
			require.Equal(t, "modeled", rows["sync/p50"].Basis)
			require.Equal(t, "measured", rows["process/cpu"].Basis)

			var text bytes.Buffer
			require.NoError(t, c.WriteText(&text))
			switch {
			case len(tt.regressed) > 0:
				require.Contains(t, text.String(), "REGRESSED: phase/ipset-entries/p50")
			case len(tt.undecided) > 0:
				require.Contains(t, text.String(), "CANNOT DECIDE: phase/ipset-entries/p50")
				require.Contains(t, text.String(), fmt.Sprintf("at least %d runs per side are needed to decide", c.MinRuns))
				require.Contains(t, text.String(), "no significant change")
			default:
				require.Contains(t, text.String(), "no significant change")
			}
		})
	}
}

func TestCompareOpsOverRuns(t *testing.T) {
	// A count every run of a side agrees on, one more on every head run:
	// called with enough runs, whatever its size, as a change without a
	// worse direction.
	shape := resultstest.Options{Name: "smoke", Seed: 7, Syncs: 6, Noise: 0.05}
	base, bl := runs(8, shape, 0)
	head, hl := runs(8, shape, 10)
	for _, f := range head {
		f.Totals.Ops[dataplane.OpIPSetDel]++
	}
	c := mustCompare(t, base, head, bl, hl, compare.DefaultOptions())
	ex := regressions(c, results.Exact)
	require.Len(t, ex, 0, "an operation count has no worse direction")
	rows := byName(c)
	for _, name := range []string{"ops/writes", "ops/ipset-del"} {
		m := rows[name]
		require.Equal(t, compare.Changed, m.Verdict, name)
		require.Equal(t, 1.0, m.Head.Center-m.Base.Center)
		require.True(t, m.Declarable)
	}
	require.Len(t, c.Failures(compare.Gate{}), 2)
	require.Empty(t, c.Failures(compare.Gate{AllowChanges: true}))
	var text bytes.Buffer
	require.NoError(t, c.WriteText(&text))
	require.Contains(t, text.String(), fmt.Sprintf("CHANGED: ops/ipset-del median %.0f -> %.0f (+", rows["ops/ipset-del"].Base.Center, rows["ops/ipset-del"].Head.Center))

	// Counts that vary within each side are compared as the samples they
	// are: a count that merely varies is no change, a count that shifts
	// every run is, and neither is ever "exact-different".
	for i, f := range base {
		f.Totals.Ops[dataplane.OpIPSetDel] += int64(i % 2)
	}
	for i, f := range head {
		f.Totals.Ops[dataplane.OpIPSetDel] += int64((i+1)%2) - 1
	}
	c = mustCompare(t, base, head, bl, hl, compare.DefaultOptions())
	require.Equal(t, compare.NoChange, byName(c)["ops/ipset-del"].Verdict)
	for _, f := range head {
		f.Totals.Ops[dataplane.OpIPSetDel] += 5
	}
	c = mustCompare(t, base, head, bl, hl, compare.DefaultOptions())
	rows = byName(c)
	require.Equal(t, compare.Changed, rows["ops/ipset-del"].Verdict)
	require.Less(t, rows["ops/ipset-del"].P, 0.05)
	for _, m := range c.Metrics {
		require.NotEqual(t, compare.Different, m.Verdict, m.Name)
	}
}

func TestCompareFormats(t *testing.T) {
	shape := resultstest.Options{Name: "smoke", Seed: 1, Syncs: 10, Noise: 0.1}
	exec := shape
	exec.IPSetExec = true
	base, bl := runs(8, shape, 0)
	head, hl := runs(8, exec, 50)
	c := mustCompare(t, base, head, bl, hl, compare.DefaultOptions())

	var md bytes.Buffer
	require.NoError(t, c.WriteMarkdown(&md, "kpsim compare: smoke"))
	out := md.String()
	require.Contains(t, out, "### kpsim compare: smoke")
	require.Contains(t, out, "| `phase/ipset-entries/p50` | modeled |")
	require.Contains(t, out, "**regressed**")
	require.Contains(t, out, "<details><summary>All metrics</summary>")
	require.NotContains(t, out, "<svg")

	var bs bytes.Buffer
	require.NoError(t, compare.WriteBenchstat(&bs, "base", base))
	require.NoError(t, compare.WriteBenchstat(&bs, "head", head))
	r := benchfmt.NewReader(&bs, "compare.txt")
	n := map[string]int{}
	for r.Scan() {
		switch rec := r.Result().(type) {
		case *benchfmt.Result:
			side := ""
			for _, cfg := range rec.Config {
				if cfg.Key == "kpsim-side" {
					side = string(cfg.Value)
				}
			}
			require.NotEmpty(t, side)
			require.Len(t, rec.Values, 1)
			n[side]++
			require.True(t, strings.HasPrefix(string(rec.Name.Full()), "Kpsim/smoke/"), string(rec.Name.Full()))
		case *benchfmt.SyntaxError:
			t.Fatalf("benchstat cannot parse: %v", rec)
		}
	}
	require.NoError(t, r.Err())
	defs := len(compare.Catalog(base))
	require.Equal(t, map[string]int{"base": 8 * defs, "head": 8 * defs}, n)

	// Changes the runs cannot decide are listed apart, with the runs they need.
	c = mustCompare(t, base[:2], head[:2], bl[:2], hl[:2], compare.DefaultOptions())
	md.Reset()
	require.NoError(t, c.WriteMarkdown(&md, "kpsim compare: smoke"))
	require.Contains(t, md.String(), "No significant change in")
	require.Contains(t, md.String(), "The runs cannot decide")
	require.Contains(t, md.String(), "- `phase/ipset-entries/p50`: about")
}

func TestCompareIgnoresMicrosecondJitter(t *testing.T) {
	shape := resultstest.Options{Name: "smoke", Seed: 9, Syncs: 10, Noise: 0.05}
	base, bl := runs(8, shape, 0)
	head, hl := runs(8, shape, 20)
	set := func(fs []*record.File, seconds float64) {
		for _, f := range fs {
			for i := range f.Syncs {
				for j := range f.Syncs[i].Phases {
					if f.Syncs[i].Phases[j].Name == "cleanup" {
						f.Syncs[i].Phases[j].Seconds = seconds
					}
				}
			}
			results.Summarize(f)
		}
	}
	set(base, 1e-6)
	set(head, 2e-6) // +100%, significant, and one microsecond
	c := mustCompare(t, base, head, bl, hl, compare.DefaultOptions())
	require.Equal(t, compare.NoChange, byName(c)["phase/cleanup/p50"].Verdict)
	o := compare.DefaultOptions()
	o.MinDeltaSeconds = 0
	c = mustCompare(t, base, head, bl, hl, o)
	require.Equal(t, compare.Regressed, byName(c)["phase/cleanup/p50"].Verdict)
}

// TestCatalogIsTheTable: comparisons cover every compared figure of the
// table, a distribution by each of its quantiles, and nothing else.
func TestCatalogIsTheTable(t *testing.T) {
	f := resultstest.File(resultstest.Options{Name: "smoke", Seed: 1, Syncs: 4, Probes: true})
	want := map[string]bool{}
	figs := results.Figures(f)
	for _, seg := range f.Summary.Segments {
		figs = append(figs, results.SegmentFigures(seg.Name, f)...)
	}
	require.Len(t, f.Summary.Segments, 2, "the synthetic run restarts its proxier")
	for _, fg := range figs {
		switch {
		case fg.Class == "":
		case fg.Dist == nil:
			want[fg.Name] = true
		default:
			for _, q := range fg.Quantiles {
				want[fg.Name+"/"+q.Name] = true
			}
		}
	}
	got := map[string]bool{}
	for _, d := range compare.Catalog([]*record.File{f}) {
		got[d.Name] = true
	}
	require.Equal(t, want, got)
	require.True(t, got["failed-syncs"])
	require.True(t, got["sync/p99"])
	require.True(t, got["restart/sync/p99"])
	require.False(t, got["restart/process/cpu"], "the process's figures are the whole run's")
}

// TestCompareFailedSyncs: more failed syncs is a regression that fails the
// comparison whatever the gate; fewer is an improvement.
func TestCompareFailedSyncs(t *testing.T) {
	shape := resultstest.Options{Name: "smoke", Seed: 7, Syncs: 8, Noise: 0.05}
	fail := func(fs []*record.File, n int) {
		for _, f := range fs {
			for i := 0; i < n; i++ {
				f.Syncs[i].Error = "ipset add KUBE-CLUSTER-IP: set is full"
			}
			results.Summarize(f)
		}
	}
	tests := []struct {
		name       string
		base, head int // failed syncs per run
		verdict    compare.Verdict
		fails      bool
	}{
		{name: "none", verdict: compare.Same},
		{name: "more failures", head: 3, verdict: compare.Regressed, fails: true},
		{name: "fewer failures", base: 3, head: 1, verdict: compare.Improved},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			base, bl := runs(8, shape, 0)
			head, hl := runs(8, shape, 10)
			fail(base, tt.base)
			fail(head, tt.head)
			c := mustCompare(t, base, head, bl, hl, compare.DefaultOptions())
			row := byName(c)["failed-syncs"]
			require.Equal(t, tt.verdict, row.Verdict)
			require.Equal(t, float64(tt.head), row.Head.Center)
			var failing []string
			for _, m := range c.Failures(compare.Gate{AllowChanges: true}) {
				failing = append(failing, m.Name)
			}
			require.Equal(t, tt.fails, slices.Contains(failing, "failed-syncs"), failing)
			var text bytes.Buffer
			require.NoError(t, c.WriteText(&text))
			if tt.fails {
				require.Contains(t, text.String(), "REGRESSED: failed-syncs median 0 -> 3")
			}
		})
	}
}

// TestCompareUndecidedRunsThatAgree: two runs a side that agree within
// each side (3 failed syncs in every head run, none in any base run) are
// too few to call it, and the comparison says how many would.
func TestCompareUndecidedRunsThatAgree(t *testing.T) {
	shape := resultstest.Options{Name: "smoke", Seed: 7, Syncs: 8, Noise: 0.05}
	base, bl := runs(2, shape, 0)
	head, hl := runs(2, shape, 10)
	for _, f := range head {
		for i := range 3 {
			f.Syncs[i].Error = "ipset add KUBE-CLUSTER-IP: set is full"
		}
		results.Summarize(f)
	}
	c := mustCompare(t, base, head, bl, hl, compare.DefaultOptions())
	row := byName(c)["failed-syncs"]
	require.Equal(t, compare.Undecided, row.Verdict)
	require.Equal(t, c.MinRuns, row.RunsNeeded)
	require.Empty(t, c.Failures(compare.Gate{AllowChanges: true}))
	var text bytes.Buffer
	require.NoError(t, c.WriteText(&text))
	require.Contains(t, text.String(), fmt.Sprintf("CANNOT DECIDE: failed-syncs median 0 -> 3 (new, p=1.000 over 2+2 runs, counted): every run of each side agrees: %d runs per side would call it", c.MinRuns))
}

// withSetting returns f with one scenario setting changed (or added) at a
// dotted path.
func withSetting(t *testing.T, f *record.File, path string, value any) *record.File {
	t.Helper()
	var sc map[string]any
	require.NoError(t, json.Unmarshal(f.Scenario, &sc))
	m := sc
	keys := strings.Split(path, ".")
	for _, k := range keys[:len(keys)-1] {
		if _, ok := m[k]; !ok {
			m[k] = map[string]any{}
		}
		m = m[k].(map[string]any)
	}
	m[keys[len(keys)-1]] = value
	g := *f
	var err error
	g.Scenario, err = json.Marshal(sc)
	require.NoError(t, err)
	return &g
}

// TestCompareRefusesDifferentRuns: runs of different scenarios, seeds or
// settings are refused, naming what differs, unless allowed; a setting
// only one side records (a newer kpsim) is a note, not a difference.
func TestCompareRefusesDifferentRuns(t *testing.T) {
	base := resultstest.File(resultstest.Options{Name: "smoke", Seed: 1, Syncs: 4})
	tests := []struct {
		name  string
		head  *record.File
		diffs []string // refused, naming these
		note  string
	}{
		{name: "same", head: resultstest.File(resultstest.Options{Name: "smoke", Seed: 1, Syncs: 4, Run: 3})},
		{name: "other scenario", head: resultstest.File(resultstest.Options{Name: "coredns-restart", Seed: 1, Syncs: 4}),
			diffs: []string{`name: "smoke" in base.json; "coredns-restart" in head.json`}},
		{name: "other seed", head: resultstest.File(resultstest.Options{Name: "smoke", Seed: 2, Syncs: 4}),
			diffs: []string{`seed: 1 in base.json; 2 in head.json`}},
		{name: "other setting", head: resultstest.File(resultstest.Options{Name: "smoke", Seed: 1, Syncs: 4, IPSetExec: true}),
			diffs: []string{`proxier.ipset: "netlink" in base.json; "exec" in head.json`}},
		{name: "description only", head: withSetting(t, base, "description", "reworded")},
		{name: "a setting the base did not record", head: withSetting(t, base, "proxier.newSetting", true),
			note: "proxier.newSetting: true only in head.json, not in base.json"},
		{name: "another proxier", head: func() *record.File { f := *base; f.Proxier = "kube-proxy@v1.37.1"; return &f }(),
			diffs: []string{`(proxier under test): kpsim in base.json; kube-proxy@v1.37.1 in head.json`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := compare.DefaultOptions()
			c, err := compare.Compare([]*record.File{base}, []*record.File{tt.head}, []string{"base.json"}, []string{"head.json"}, o)
			if len(tt.diffs) == 0 {
				require.NoError(t, err)
				require.Empty(t, c.Warnings)
				if tt.note != "" {
					require.Contains(t, strings.Join(c.Notes, "\n"), tt.note)
				}
				return
			}
			var de *compare.DifferentError
			require.ErrorAs(t, err, &de)
			require.Equal(t, tt.diffs, de.Differences)
			require.Contains(t, err.Error(), tt.diffs[0])

			o.AllowDifferent = true
			c, err = compare.Compare([]*record.File{base}, []*record.File{tt.head}, []string{"base.json"}, []string{"head.json"}, o)
			require.NoError(t, err)
			require.Contains(t, strings.Join(c.Warnings, "\n"), tt.diffs[0])
		})
	}

	// The scenario and the seed come first, ahead of settings that sort
	// before them: they explain every other difference.
	b := withSetting(t, base, "backend", "sim")
	h := withSetting(t, withSetting(t, resultstest.File(resultstest.Options{Name: "coredns-restart", Seed: 3, Syncs: 4}), "backend", "kernel"), "cluster.services", 200)
	_, err := compare.Compare([]*record.File{b}, []*record.File{h}, []string{"base.json"}, []string{"head.json"}, compare.DefaultOptions())
	var de *compare.DifferentError
	require.ErrorAs(t, err, &de)
	require.Equal(t, []string{`name: "smoke" in base.json; "coredns-restart" in head.json`, `seed: 1 in base.json; 3 in head.json`,
		`backend: "sim" in base.json; "kernel" in head.json`}, de.Differences)
}

// TestCompareModeledExactly: on the modeled clock one seed is one answer:
// every modeled figure is held exact, so one run per side finds a slower
// ipset strategy, and copies of one run count once.
func TestCompareModeledExactly(t *testing.T) {
	shape := resultstest.Options{Name: "smoke", Seed: 5, Syncs: 16, Services: 200, Modeled: true, Probes: true}
	exec := shape
	exec.IPSetExec = true

	base, bl := runs(1, shape, 0)
	head, hl := runs(1, exec, 100)
	c := mustCompare(t, base, head, bl, hl, compare.DefaultOptions())
	require.True(t, c.Modeled)
	rows := byName(c)
	for _, name := range []string{"sync/p50", "sync/p99", "phase/ipset-entries/p50", "restart/sync/p99"} {
		m := rows[name]
		require.Equal(t, compare.Regressed, m.Verdict, name)
		require.Equal(t, results.Exact, m.Class, name)
		require.True(t, m.Declarable, name)
	}
	require.Equal(t, "measured", rows["process/cpu"].Basis)
	require.Equal(t, results.Timing, rows["process/cpu"].Class, "measured figures stay statistical")
	k := rows["kernel/seconds"]
	require.Equal(t, compare.Different, k.Verdict, "modeled kernel time is held exact")
	require.Contains(t, strings.Join(k.Warnings, "\n"), "of 16 paired syncs differ, the first proxier 0 IPv4 #1")
	var failing []string
	for _, m := range c.Failures(compare.Gate{}) {
		failing = append(failing, m.Name)
	}
	require.Contains(t, failing, "sync/p50", "a slower modeled sync is a change to declare")
	require.Empty(t, c.Failures(compare.Gate{AllowChanges: true}), "declared: nothing broke more")
	var text bytes.Buffer
	require.NoError(t, c.WriteText(&text))
	require.Contains(t, text.String(), "modeled clock (one seed)")
	require.Contains(t, text.String(), "EXACT-DIFFERENT: kernel/seconds")

	// The same build and seed, four times a side: copies, counted once,
	// and the same answer as one run a side.
	base4, bl4 := runs(4, shape, 0)
	head4, hl4 := runs(4, shape, 100)
	c = mustCompare(t, base4, head4, bl4, hl4, compare.DefaultOptions())
	require.Equal(t, []string{"r"}, c.Base)
	require.Contains(t, c.Warnings[0], "base: r and 3 identical copies of it (rr, rrr, rrrr) are one run of seed 5")
	require.Empty(t, regressions(c, results.Exact))
	require.Empty(t, c.Failures(compare.Gate{Timing: true}))
	execs, el := runs(4, exec, 100)
	c4 := mustCompare(t, base4, execs, bl4, el, compare.DefaultOptions())
	c1 := mustCompare(t, base, head, bl, hl, compare.DefaultOptions())
	verdicts := func(c *compare.Comparison) map[string]compare.Verdict {
		out := map[string]compare.Verdict{}
		for _, m := range c.Metrics {
			if m.Basis != record.Measured {
				out[m.Name] = m.Verdict
			}
		}
		return out
	}
	require.Equal(t, verdicts(c1), verdicts(c4), "four copies a side give the verdicts of one")
}

// TestCompareModeledTolerance: modeled durations are equal within a part
// in 10⁹ (another summation order), and differ beyond it.
func TestCompareModeledTolerance(t *testing.T) {
	o := resultstest.Options{Name: "smoke", Seed: 5, Syncs: 8, Modeled: true}
	scale := func(f *record.File, by float64) *record.File {
		for i := range f.Syncs {
			f.Syncs[i].Seconds *= by
		}
		results.Summarize(f)
		return f
	}
	for _, tt := range []struct {
		by      float64
		verdict compare.Verdict
	}{{1 + 1e-12, compare.Same}, {1 + 1e-6, compare.Regressed}, {1 - 1e-6, compare.Improved}} {
		c := mustCompare(t, []*record.File{resultstest.File(o)}, []*record.File{scale(resultstest.File(o), tt.by)}, []string{"b"}, []string{"h"}, compare.DefaultOptions())
		require.Equal(t, tt.verdict, byName(c)["sync/p50"].Verdict, "scaled by %v", tt.by)
	}
}

// breakRestart sets how many probe attempts of one target fail after the
// restart, and recomputes the summary.
func breakRestart(f *record.File, failures int) *record.File {
	var restart time.Time
	for _, st := range f.Steps {
		if st.Kind == "restart-proxier" {
			restart = st.Start
		}
	}
	f.Probes.Failures = nil
	f.Probes.Targets[1].Recovered = nil
	for k := range failures {
		f.Probes.Failures = append(f.Probes.Failures, record.Failure{Target: 1, Time: restart.Add(time.Duration(k) * 100 * time.Millisecond), Outcome: "no-destination"})
	}
	if failures > 0 {
		f.Probes.Targets[1].Recovered = []time.Time{restart.Add(time.Duration(failures) * 100 * time.Millisecond)}
	}
	results.Summarize(f)
	return f
}

// TestCompareGatesOnBrokenTraffic: more broken traffic fails whatever else
// is declared: on the modeled clock exactly, one run a side; where runs
// are samples, once the runs decide it.
func TestCompareGatesOnBrokenTraffic(t *testing.T) {
	names := func(ms []compare.MetricComparison) []string {
		var out []string
		for _, m := range ms {
			out = append(out, m.Name)
		}
		return out
	}
	for _, tt := range []struct {
		name    string
		release string
		perSide int
	}{{name: "kpsim's proxier on the modeled clock", perSide: 1}, {name: "a release", release: "kube-proxy@v1.30.3", perSide: 8}} {
		t.Run(tt.name, func(t *testing.T) {
			o := resultstest.Options{Name: "smoke", Seed: 5, Syncs: 8, Modeled: true, Probes: true, Release: tt.release}
			var base, head []*record.File
			var bl, hl []string
			for i := range tt.perSide {
				o.Run = uint64(i)
				base, bl = append(base, breakRestart(resultstest.File(o), 0)), append(bl, fmt.Sprintf("b%d", i))
				o.Run = uint64(100 + i)
				head, hl = append(head, breakRestart(resultstest.File(o), 20+i)), append(hl, fmt.Sprintf("h%d", i))
			}
			require.Equal(t, 0, base[0].Summary.Disruption.FailedAttempts)
			c := mustCompare(t, base, head, bl, hl, compare.DefaultOptions())
			require.Equal(t, tt.release == "", c.Modeled)
			for _, name := range []string{"disruption/failed-attempts", "disruption/seconds", "restart/disruption/longest-window"} {
				row := byName(c)[name]
				require.Equal(t, compare.Regressed, row.Verdict, name)
				require.True(t, row.Disruption)
			}
			require.Contains(t, names(c.Failures(compare.Gate{AllowChanges: true})), "disruption/seconds")
			require.NotContains(t, names(c.Failures(compare.Gate{AllowChanges: true, AllowDisruption: true})), "disruption/seconds")

			// Less broken traffic: an improvement, never a failure.
			c = mustCompare(t, head, base, hl, bl, compare.DefaultOptions())
			require.Equal(t, compare.Improved, byName(c)["disruption/failed-attempts"].Verdict)
			require.NotContains(t, names(c.Failures(compare.Gate{AllowChanges: true, Timing: true})), "disruption/failed-attempts")
		})
	}
}

// TestCompareRunIsTheSample: where runs are samples, one run a side never
// decides, however many probe attempts it made (they break together, in
// one window); with enough runs each figure of broken traffic takes the
// verdict of its own direction.
func TestCompareRunIsTheSample(t *testing.T) {
	o := resultstest.Options{Name: "smoke", Seed: 5, Syncs: 8, Probes: true, Release: "kube-proxy@v1.30.3"}
	one := func(run uint64, failures int) *record.File {
		o.Run = run
		f := breakRestart(resultstest.File(o), failures)
		f.Probes.Attempts *= 100
		results.Summarize(f)
		return f
	}
	c := mustCompare(t, []*record.File{one(0, 0)}, []*record.File{one(1, 300)}, []string{"b"}, []string{"h"}, compare.DefaultOptions())
	row := byName(c)["disruption/failed-attempts"]
	require.Equal(t, compare.Undecided, row.Verdict, "0 of 4,000 attempts failed against 300: one window, one sample")
	require.Equal(t, c.MinRuns, row.RunsNeeded)
	require.Empty(t, c.Failures(compare.Gate{Timing: true}))

	// Head's runs break more attempts, in a shorter window than base's:
	// each figure follows its own direction.
	var base, head []*record.File
	var bl, hl []string
	for i := range 8 {
		b := one(uint64(i), 30+i)
		b.Summary.Disruption.FailedAttempts = 10 + i
		h := one(uint64(100+i), 10+i)
		h.Summary.Disruption.FailedAttempts = 50 + i
		base, head = append(base, b), append(head, h)
		bl, hl = append(bl, fmt.Sprintf("b%d", i)), append(hl, fmt.Sprintf("h%d", i))
	}
	c = mustCompare(t, base, head, bl, hl, compare.DefaultOptions())
	rows := byName(c)
	require.Equal(t, compare.Regressed, rows["disruption/failed-attempts"].Verdict)
	require.Equal(t, compare.Improved, rows["disruption/longest-window"].Verdict)
	require.Equal(t, compare.Improved, rows["disruption/seconds"].Verdict)
}

// TestCompareCallsWithTheFewestRuns: a change every base run and every
// head run agree on (no broken traffic in any base run, more than 10 s in
// every head run) is called with c.MinRuns runs a side, and not with one
// fewer, which says how many it needs.
func TestCompareCallsWithTheFewestRuns(t *testing.T) {
	o := resultstest.Options{Name: "smoke", Seed: 5, Syncs: 8, Probes: true, Release: "kube-proxy@v1.30.3"}
	sides := func(n int) ([]*record.File, []*record.File, []string, []string) {
		var base, head []*record.File
		var bl, hl []string
		for i := range n {
			o.Run = uint64(i)
			base, bl = append(base, breakRestart(resultstest.File(o), 0)), append(bl, fmt.Sprintf("b%d", i))
			o.Run = uint64(100 + i)
			head, hl = append(head, breakRestart(resultstest.File(o), 110+7*i)), append(hl, fmt.Sprintf("h%d", i))
		}
		return base, head, bl, hl
	}
	b, h, bl, hl := sides(12)
	c := mustCompare(t, b, h, bl, hl, compare.DefaultOptions())
	least := c.MinRuns
	require.Greater(t, least, 4, "the comparison tests many figures")
	b, h, bl, hl = sides(least)
	c = mustCompare(t, b, h, bl, hl, compare.DefaultOptions())
	require.Equal(t, least, c.MinRuns)
	require.Equal(t, compare.Regressed, byName(c)["disruption/seconds"].Verdict)
	require.Greater(t, byName(c)["disruption/seconds"].Head.Center, 10.0)
	require.NotEmpty(t, c.Failures(compare.Gate{}))

	b, h, bl, hl = sides(least - 1)
	c = mustCompare(t, b, h, bl, hl, compare.DefaultOptions())
	row := byName(c)["disruption/seconds"]
	require.Equal(t, compare.Undecided, row.Verdict)
	require.Equal(t, least, row.RunsNeeded)
	row = byName(c)["restart/disruption/longest-window"]
	require.Equal(t, compare.Undecided, row.Verdict)
	require.Empty(t, c.Failures(compare.Gate{}))
	var text bytes.Buffer
	require.NoError(t, c.WriteText(&text))
	require.Contains(t, text.String(), fmt.Sprintf("%d+%d runs: with %d figures tested, even a change every run agrees on needs %d runs per side", least-1, least-1, c.Tested, least))
	require.Contains(t, text.String(), fmt.Sprintf("CANNOT DECIDE: disruption/seconds median 0 -> ")) // its head runs vary
	require.Contains(t, text.String(), fmt.Sprintf("about %d runs per side would detect a change of this size with this spread", least))
}

// TestComparePairsSeeds: runs over several seeds pair by seed, and a change
// is named by the seeds that show it.
func TestComparePairsSeeds(t *testing.T) {
	var base, head []*record.File
	var bl, hl []string
	for seed := uint64(1); seed <= 3; seed++ {
		o := resultstest.Options{Name: "smoke", Seed: seed, Syncs: 6, Modeled: true}
		base = append(base, resultstest.File(o))
		h := resultstest.File(o)
		if seed == 2 {
			h.Totals.Ops[dataplane.OpIPSetDel]++
		}
		head = append(head, h)
		bl, hl = append(bl, fmt.Sprintf("b%d", seed)), append(hl, fmt.Sprintf("h%d", seed))
	}
	c, err := compare.Compare(base, head, bl, hl, compare.DefaultOptions())
	require.NoError(t, err, "the same seeds on both sides are no difference")
	require.Equal(t, []string{"1", "2", "3"}, c.Seeds)
	row := byName(c)["ops/ipset-del"]
	require.Equal(t, compare.Different, row.Verdict)
	require.Contains(t, row.Warnings[0], "1 of 3 seeds differ (1 up, 0 down), the first seed 2")
	_, err = compare.Compare(base, head[:2], bl, hl[:2], compare.DefaultOptions())
	var de *compare.DifferentError
	require.ErrorAs(t, err, &de, "seeds that do not pair are a difference")
}

// TestCompareKernelTimeSyncBySync: modeled kernel time moved from one sync
// to another is a change even when the total is the same.
func TestCompareKernelTimeSyncBySync(t *testing.T) {
	o := resultstest.Options{Name: "smoke", Seed: 5, Syncs: 8, Modeled: true}
	base := resultstest.File(o)
	head := resultstest.File(o)
	head.Syncs[2].KernelSeconds += 0.25
	head.Syncs[5].KernelSeconds -= 0.25
	results.Summarize(head)
	c := mustCompare(t, []*record.File{base}, []*record.File{head}, []string{"base.json"}, []string{"head.json"}, compare.DefaultOptions())
	k := byName(c)["kernel/seconds"]
	require.InDelta(t, k.Base.Center, k.Head.Center, 1e-12)
	require.Equal(t, compare.Different, k.Verdict)
	require.Contains(t, k.Warnings[0], "seed 5: 2 of 8 paired syncs differ, the first proxier 0 IPv4 #3")
}

// TestCompareIncompleteRuns: a run that ended early did less; where it
// counts less the difference is not judged, where it counts more it is,
// and a run that failed is a regression.
func TestCompareIncompleteRuns(t *testing.T) {
	o := resultstest.Options{Name: "smoke", Seed: 5, Syncs: 12, Modeled: true}
	cut := func(f *record.File, syncs int, interrupted bool, err string) *record.File {
		f.Syncs = f.Syncs[:syncs]
		f.Totals.Ops = dataplane.Ops{}
		for i := range f.Syncs {
			f.Totals.Ops.Add(&f.Syncs[i].Ops)
		}
		f.Interrupted, f.Error = interrupted, err
		results.Summarize(f)
		return f
	}
	tests := []struct {
		name     string
		head     *record.File
		allow    bool
		verdicts map[string]compare.Verdict
		warning  string
		fails    []string // under Gate{}
	}{
		{name: "interrupted head", head: cut(resultstest.File(o), 5, true, ""),
			verdicts: map[string]compare.Verdict{"ops/writes": compare.Incomplete, "ops/ipset-add": compare.Incomplete, "kernel/seconds": compare.Incomplete, "run/failed": compare.Same},
			warning:  "head.json was interrupted before its timeline finished: it did less than a whole run, so exact figures it counts lower are not judged"},
		{name: "interrupted head judged when allowed", head: cut(resultstest.File(o), 5, true, ""), allow: true,
			verdicts: map[string]compare.Verdict{"ops/writes": compare.Different},
			warning:  "its exact figures are judged as if it had run to the end",
			fails:    []string{"kernel/seconds", "ops/writes", "ops/ipvs-service-add", "ops/ipvs-destination-add", "ops/ipvs-destination-update", "ops/ipset-add", "ops/ipset-del", "ops/iptables-restore", "ops/iptables-restore-bytes", "ops/ipvs-list"}},
		{name: "interrupted head that did more", head: func() *record.File {
			f := cut(resultstest.File(o), 5, true, "")
			f.Totals.Ops[dataplane.OpIPVSServiceDelete] = 999
			return f
		}(), verdicts: map[string]compare.Verdict{"ops/ipvs-service-delete": compare.Different, "ops/ipset-add": compare.Incomplete},
			fails: []string{"ops/ipvs-service-delete", "ops/writes"}},
		{name: "failed head", head: cut(resultstest.File(o), 5, false, "waitSynced: timed out after 30s"),
			verdicts: map[string]compare.Verdict{"run/failed": compare.Regressed, "ops/writes": compare.Incomplete},
			warning:  "head.json failed: waitSynced: timed out after 30s", fails: []string{"run/failed"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts := compare.DefaultOptions()
			opts.AllowDifferent = tt.allow
			c, err := compare.Compare([]*record.File{resultstest.File(o)}, []*record.File{tt.head}, []string{"base.json"}, []string{"head.json"}, opts)
			require.NoError(t, err, "a run that ended early is warned about, not refused")
			rows := byName(c)
			for name, v := range tt.verdicts {
				require.Equal(t, v, rows[name].Verdict, name)
			}
			require.Contains(t, strings.Join(c.Warnings, "\n"), tt.warning)
			var failing []string
			for _, m := range c.Failures(compare.Gate{}) {
				failing = append(failing, m.Name)
			}
			if tt.allow {
				// Judged as whole, every figure the short run counts lower fails, segments' too.
				require.Subset(t, failing, tt.fails)
			} else {
				require.ElementsMatch(t, tt.fails, failing)
			}
			var text bytes.Buffer
			require.NoError(t, c.WriteText(&text))
			require.Contains(t, text.String(), "WARNING: ")
		})
	}
}

// TestCompareUnphased: a kube-proxy release records no phases; compared
// (with --allow-different) against kpsim's proxier, its phases are not
// zeros that sped up but not compared, and the comparison says so.
func TestCompareUnphased(t *testing.T) {
	base := resultstest.File(resultstest.Options{Name: "smoke", Seed: 1, Syncs: 6})
	head := resultstest.File(resultstest.Options{Name: "smoke", Seed: 1, Syncs: 6, Run: 2})
	head.Proxier = "kube-proxy@v1.37.1"
	for i := range head.Syncs {
		head.Syncs[i].Phases = nil
	}
	results.Summarize(head)
	o := compare.DefaultOptions()
	o.AllowDifferent = true
	c, err := compare.Compare([]*record.File{base}, []*record.File{head}, []string{"kpsim.json"}, []string{"kube-proxy.json"}, o)
	require.NoError(t, err)
	require.Contains(t, c.Warnings[0], "(proxier under test): kpsim in kpsim.json; kube-proxy@v1.37.1 in kube-proxy.json")
	require.Contains(t, c.Notes, "phases not compared: not phased in kube-proxy.json (kube-proxy@v1.37.1)")
	var names []string
	for _, m := range c.Metrics {
		names = append(names, m.Name)
		require.NotContains(t, m.Name, "phase/")
	}
	require.Contains(t, names, "sync/p99")
	require.Contains(t, names, "ops/writes")
}

// TestCompareFalseAlarmRate: runs of one release compared with each other,
// DefaultRuns a side, runs drawn afresh for every comparison: at most
// alpha of the comparisons may fail (any figure called, at the strictest
// gate), however many figures each tests. The runs vary as a release's do:
// every duration by 10%, the deleted entries and the restart's broken
// traffic by the run's own map order.
func TestCompareFalseAlarmRate(t *testing.T) {
	const comparisons = 200
	o := resultstest.Options{Name: "incident", Seed: 3, Syncs: 10, Services: 300, Noise: 0.1, Probes: true, Release: "kube-proxy@v1.30.3"}
	failed, tested := 0, 0
	for i := range comparisons {
		base, bl := runs(compare.DefaultRuns, o, uint64(1000*i))
		head, hl := runs(compare.DefaultRuns, o, uint64(1000*i+500))
		c, err := compare.Compare(base, head, bl, hl, compare.DefaultOptions())
		require.NoError(t, err)
		require.False(t, c.Modeled)
		tested = max(tested, c.Tested)
		if len(c.Failures(compare.Gate{Timing: true})) > 0 {
			failed++
		}
	}
	require.Greater(t, tested, 20, "each comparison tests many figures that vary")
	require.LessOrEqual(t, failed, comparisons*5/100, "%d of %d comparisons of a release with itself failed", failed, comparisons)
	t.Logf("%d of %d comparisons of a release with itself failed (up to %d figures tested each)", failed, comparisons, tested)
}
