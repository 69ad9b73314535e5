package compare_test

import (
	"bytes"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/perf/benchfmt"

	"github.com/kpsim/kpsim/proxier/dataplane"
	"github.com/kpsim/kpsim/results"
	"github.com/kpsim/kpsim/results/compare"
	"github.com/kpsim/kpsim/results/resultstest"
)

// runs returns n repetitions of one scenario: same seed, different noise.
func runs(n int, o resultstest.Options, firstRun uint64) ([]*results.File, []string) {
	fs := make([]*results.File, n)
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
	}{
		{name: "same build, 5 runs each", head: shape, perSide: 5},
		{name: "same build, one run each", head: shape, perSide: 1},
		{name: "exec ipset, 5 runs each", head: exec, perSide: 5, regressed: []string{"phase/ipset-entries/p50", "phase/ipset-entries/p99", "sync/p99", "sync/max"}},
		{name: "exec ipset, one run each", head: exec, perSide: 1, regressed: []string{"phase/ipset-entries/p50", "phase/ipset-entries/p99", "sync/p50", "sync/p99"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			base, bl := runs(tt.perSide, shape, 0)
			head, hl := runs(tt.perSide, tt.head, 100)
			c := compare.Compare(base, head, bl, hl, compare.DefaultOptions())
			require.Equal(t, tt.perSide == 1, c.PerSync)
			rows := byName(c)
			var regressed []string
			for _, m := range regressions(c, results.Timing) {
				regressed = append(regressed, m.Name)
			}
			if len(tt.regressed) == 0 {
				require.Empty(t, regressed)
			}
			for _, name := range tt.regressed {
				require.Contains(t, regressed, name)
				require.Less(t, rows[name].P, 0.05)
				require.Greater(t, rows[name].DeltaPct, 100.0)
			}
			for _, name := range regressed {
				require.True(t, strings.HasPrefix(name, "sync/") || strings.HasPrefix(name, "phase/ipset-entries/"),
					"only the ipset phase and the syncs containing it may regress, got %s", name)
			}
			// The ipset strategy changes timing, not what is programmed.
			require.Empty(t, regressions(c, results.Exact))
			require.Equal(t, compare.Same, rows["ops/ipset-add"].Verdict)
			require.Equal(t, "modeled", rows["sync/p50"].Basis)
			require.Equal(t, "measured", rows["process/cpu"].Basis)

			var text bytes.Buffer
			require.NoError(t, c.WriteText(&text))
			if len(tt.regressed) > 0 {
				require.Contains(t, text.String(), "REGRESSED: phase/ipset-entries/p50")
			} else {
				require.Contains(t, text.String(), "no significant change")
			}
		})
	}
}

func TestCompareOpsExactly(t *testing.T) {
	shape := resultstest.Options{Name: "smoke", Seed: 7, Syncs: 6, Noise: 0.05}
	base, bl := runs(2, shape, 0)
	head, hl := runs(2, shape, 10)
	for _, f := range head {
		f.Totals.Ops[dataplane.OpIPSetDel]++
	}
	c := compare.Compare(base, head, bl, hl, compare.DefaultOptions())
	ex := regressions(c, results.Exact)
	require.Len(t, ex, 2)
	require.Equal(t, "ops/writes", ex[0].Name)
	require.Equal(t, "ops/ipset-del", ex[1].Name)
	for _, m := range ex {
		require.Equal(t, 1.0, m.Head.Center-m.Base.Center)
		require.Equal(t, compare.Different, m.Verdict, "an operation count has no better direction")
	}
	require.Contains(t, c.Notes[0], "at least 4 runs per side")

	// Repetitions that disagree are compared statistically: a count that
	// merely varies is no change, a count that shifts every run is.
	base5, bl5 := runs(5, shape, 0)
	head5, hl5 := runs(5, shape, 10)
	for i, f := range base5 {
		f.Totals.Ops[dataplane.OpIPSetDel] += int64(i % 2)
	}
	for i, f := range head5 {
		f.Totals.Ops[dataplane.OpIPSetDel] += int64((i + 1) % 2)
	}
	c = compare.Compare(base5, head5, bl5, hl5, compare.DefaultOptions())
	rows := byName(c)
	require.Equal(t, compare.NoChange, rows["ops/ipset-del"].Verdict)
	require.Contains(t, rows["ops/ipset-del"].Warnings[0], "compared statistically")
	require.Contains(t, strings.Join(c.Notes, "\n"), "not deterministic")
	for _, f := range head5 {
		f.Totals.Ops[dataplane.OpIPSetDel] += 5
	}
	c = compare.Compare(base5, head5, bl5, hl5, compare.DefaultOptions())
	rows = byName(c)
	require.Equal(t, compare.Different, rows["ops/ipset-del"].Verdict)
	require.Less(t, rows["ops/ipset-del"].P, 0.05)

	// Different scenarios are flagged.
	other := resultstest.File(resultstest.Options{Name: "churn-endpoints", Seed: 7, Syncs: 6})
	c = compare.Compare(base[:1], []*results.File{other}, bl[:1], []string{"x"}, compare.DefaultOptions())
	require.Contains(t, c.Notes[0], "different scenarios")
}

func TestCompareFormats(t *testing.T) {
	shape := resultstest.Options{Name: "smoke", Seed: 1, Syncs: 10, Noise: 0.1}
	exec := shape
	exec.IPSetExec = true
	base, bl := runs(4, shape, 0)
	head, hl := runs(4, exec, 50)
	c := compare.Compare(base, head, bl, hl, compare.DefaultOptions())

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
	require.Equal(t, map[string]int{"base": 4 * defs, "head": 4 * defs}, n)
}

func TestCompareIgnoresMicrosecondJitter(t *testing.T) {
	shape := resultstest.Options{Name: "smoke", Seed: 9, Syncs: 10, Noise: 0.05}
	base, bl := runs(5, shape, 0)
	head, hl := runs(5, shape, 20)
	set := func(fs []*results.File, seconds float64) {
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
	c := compare.Compare(base, head, bl, hl, compare.DefaultOptions())
	require.Equal(t, compare.NoChange, byName(c)["phase/cleanup/p50"].Verdict)
	o := compare.DefaultOptions()
	o.MinDeltaSeconds = 0
	c = compare.Compare(base, head, bl, hl, o)
	require.Equal(t, compare.Regressed, byName(c)["phase/cleanup/p50"].Verdict)
}

// TestCatalogIsTheTable: comparisons cover every compared figure of the
// table, a distribution by each of its quantiles, and nothing else.
func TestCatalogIsTheTable(t *testing.T) {
	f := resultstest.File(resultstest.Options{Name: "smoke", Seed: 1, Syncs: 4, Probes: true})
	want := map[string]bool{}
	for _, fg := range results.Figures(f) {
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
	for _, d := range compare.Catalog([]*results.File{f}) {
		got[d.Name] = true
	}
	require.Equal(t, want, got)
	require.True(t, got["failed-syncs"])
	require.True(t, got["sync/p99"])
}

// TestCompareFailedSyncs: more failed syncs is a regression that fails the
// comparison whatever the gate; fewer is an improvement.
func TestCompareFailedSyncs(t *testing.T) {
	shape := resultstest.Options{Name: "smoke", Seed: 7, Syncs: 8, Noise: 0.05}
	fail := func(fs []*results.File, n int) {
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
			base, bl := runs(2, shape, 0)
			head, hl := runs(2, shape, 10)
			fail(base, tt.base)
			fail(head, tt.head)
			c := compare.Compare(base, head, bl, hl, compare.DefaultOptions())
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
				require.Contains(t, text.String(), "REGRESSED: failed-syncs 0 -> 3")
			}
		})
	}
}
