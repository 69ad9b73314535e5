package sweeps

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kpsim/kpsim/dataplane"
	"github.com/kpsim/kpsim/record"
	"github.com/kpsim/kpsim/results/compare"
	"github.com/kpsim/kpsim/results/sweep"
)

var build = record.Build{Version: "v1", Commit: "abc"}

func plan(t *testing.T, spec string) *sweep.Plan {
	t.Helper()
	s, err := Parse("x.yaml", []byte(spec))
	require.NoError(t, err)
	p, err := s.Plan(build)
	require.NoError(t, err)
	return p
}

func names(cells []sweep.Cell) []string {
	out := make([]string, len(cells))
	for i, c := range cells {
		out[i] = c.Name
	}
	return out
}

// TestPlanRunsSamples: without runs in the spec, a cell whose runs repeat
// exactly (kpsim's proxier on the modeled clock) runs once, and every
// other cell (a release, the kernel, the wall clock) as many times as a
// comparison needs to decide: each run is one sample.
func TestPlanRunsSamples(t *testing.T) {
	p := plan(t, `
name: samples
scenarios:
  - scenario: smoke
    modes:
      modeled:
      wall: {sim.timeScale: 1}
proxiers: [kpsim, kube-proxy@v1.37.1]
backends: [sim, kernel]
kernels: [6.1.0-56-amd64]
`)
	runs := map[string]int{}
	for _, c := range p.Cells {
		runs[c.Mode+" "+c.Proxier+" "+c.Backend] = c.Runs
	}
	require.Equal(t, map[string]int{
		"modeled kpsim sim": 1, "modeled kpsim kernel": compare.DefaultRuns,
		"modeled kube-proxy@v1.37.1 sim": compare.DefaultRuns, "modeled kube-proxy@v1.37.1 kernel": compare.DefaultRuns,
		"wall kpsim sim": compare.DefaultRuns, "wall kpsim kernel": compare.DefaultRuns,
		"wall kube-proxy@v1.37.1 sim": compare.DefaultRuns, "wall kube-proxy@v1.37.1 kernel": compare.DefaultRuns,
	}, runs)
	// The spec's runs are every cell's.
	p = plan(t, "name: two\nscenarios: [{scenario: smoke}]\nproxiers: [kpsim, kube-proxy@v1.37.1]\nruns: 2\n")
	require.Equal(t, []int{2, 2}, []int{p.Cells[0].Runs, p.Cells[1].Runs})
}

// TestPlanExpandsAxes: every combination of the axes' values (the first
// axis outermost), each mode, proxier, backend and kernel is a cell, a
// kube-proxy release on the sim included.
func TestPlanExpandsAxes(t *testing.T) {
	p := plan(t, `
name: grid
scenarios:
  - scenario: smoke
    set: {seed: 7}
    axes:
      cluster.services: [10, 20]
      cluster.endpointsPerService: [1, 2]
    modes:
      legacy: {proxier.initialSync: legacy}
      defaults:
proxiers: [kpsim, kube-proxy@v1.37.1]
backends: [sim, kernel]
kernels: [6.1.0-56-amd64, 6.12.100+deb12-amd64]
runs: 3
`)
	// 4 combinations x 2 modes x 2 proxiers x 3 targets.
	require.Len(t, p.Cells, 4*2*2*3)

	first := p.Cells[0]
	require.Equal(t, sweep.Cell{Name: first.Name, Scenario: "smoke", Set: []string{"seed=7"},
		Axes: []sweep.Setting{{Key: "cluster.services", Value: "10"}, {Key: "cluster.endpointsPerService", Value: "1"}},
		Mode: "legacy", ModeSet: []string{"proxier.initialSync=legacy"}, Proxier: "kpsim", Backend: "sim", Runs: 3}, first)
	require.Equal(t, []string{"seed=7", "cluster.services=10", "cluster.endpointsPerService=1", "proxier.initialSync=legacy", "backend=sim"}, first.Sets())
	require.Equal(t, "kernel", p.Cells[1].Backend)
	require.Equal(t, "6.1.0-56-amd64", p.Cells[1].Kernel)
	require.Equal(t, "6.12.100+deb12-amd64", p.Cells[2].Kernel)
	require.Equal(t, "kube-proxy@v1.37.1", p.Cells[3].Proxier)
	require.Equal(t, dataplane.BackendSim, p.Cells[3].Backend)
	require.Equal(t, "defaults", p.Cells[6].Mode)
	require.Empty(t, p.Cells[6].ModeSet)
	// The second axis turns before the first.
	require.Equal(t, "2", p.Cells[12].Axes[1].Value)
	require.Equal(t, "10", p.Cells[12].Axes[0].Value)
	require.Equal(t, "20", p.Cells[24].Axes[0].Value)
	require.Equal(t, []sweep.Axis{
		{Scenario: "smoke", Key: "cluster.services", Values: []string{"10", "20"}},
		{Scenario: "smoke", Key: "cluster.endpointsPerService", Values: []string{"1", "2"}},
	}, p.Axes)

	seen := map[string]bool{}
	for _, c := range p.Cells {
		require.False(t, seen[c.Name], "two cells named %s", c.Name)
		seen[c.Name] = true
	}
}

// TestPlanScenarioProxiers: a scenario's own proxiers replace the spec's
// for its cells (a setting only a release has), and a mode kpsim's proxier
// does not have is refused in a cell that would run it.
func TestPlanScenarioProxiers(t *testing.T) {
	p := plan(t, `
name: modes
scenarios:
  - scenario: smoke
  - scenario: smoke
    modes:
      nftables: {proxier.mode: nftables}
    proxiers: [kube-proxy@v1.37.1]
proxiers: [kpsim, kube-proxy@v1.37.1]
`)
	var got []string
	for _, c := range p.Cells {
		got = append(got, c.Mode+" "+c.Proxier)
	}
	require.Equal(t, []string{" kpsim", " kube-proxy@v1.37.1", "nftables kube-proxy@v1.37.1"}, got)

	twice := plan(t, `
name: modes
scenarios:
  - scenario: smoke
    axes: {cluster.services: [10, 20]}
  - scenario: smoke
    axes: {cluster.services: [10, 20]}
    modes:
      nftables: {proxier.mode: nftables}
    proxiers: [kube-proxy@v1.37.1]
`)
	require.Len(t, twice.Cells, 4)
	require.Len(t, twice.Axes, 1, "one scenario's axis, charted once with every line")

	s, err := Parse("x.yaml", []byte(`name: m
scenarios:
  - scenario: smoke
    modes: {nftables: {proxier.mode: nftables}}
`))
	require.NoError(t, err)
	_, err = s.Plan(build)
	require.ErrorContains(t, err, "x.yaml:4: scenarios[0].modes.nftables.proxier.mode")
	require.ErrorContains(t, err, "kpsim's own proxier is an IPVS proxier")

	_, err = Parse("x.yaml", []byte(`name: m
scenarios:
  - scenario: smoke
    proxiers: []
`))
	require.ErrorContains(t, err, "x.yaml:4: scenarios[0].proxiers: empty")
}

// TestPlanNamesAreStable: a cell keeps its name when the spec grows around
// it or is reordered: names follow settings, not positions.
func TestPlanNamesAreStable(t *testing.T) {
	small := plan(t, `
name: s
scenarios:
  - scenario: smoke
    axes: {cluster.services: [20]}
    modes:
      exec: {dataplane.ipset: exec}
`)
	grown := plan(t, `
name: s
scenarios:
  - scenario: dual-stack
  - scenario: smoke
    axes: {cluster.services: [40, 20, 10]}
    modes:
      restore: {dataplane.ipset: restore}
      exec: {dataplane.ipset: exec}
proxiers: [kube-proxy@v1.37.1, kpsim]
`)
	require.Len(t, small.Cells, 1)
	require.Contains(t, names(grown.Cells), small.Cells[0].Name)
}

// TestParseErrors: every problem of a spec is reported at its line, with
// the field path, as scenario errors are.
func TestParseErrors(t *testing.T) {
	for _, tc := range []struct {
		name, spec string
		want       []string
	}{
		{"empty", "", []string{"x.yaml: empty sweep spec"}},
		{"missing name and scenarios", "runs: 1\n", []string{"x.yaml:1: name: missing"}},
		{"no scenarios", "name: a\n", []string{"x.yaml:1: scenarios: missing: list at least one scenario"}},
		{"unknown field", "name: a\nscenarios: [{scenario: smoke}]\nrun: 2\n", []string{"x.yaml:3: run: unknown field (known: backends, description, kernels, name, proxiers, runs, scenarios)"}},
		{"bad name", "name: A_b\nscenarios: [{scenario: smoke}]\n", []string{`x.yaml:1: name: "A_b": use lower-case letters, digits and dashes`}},
		{"scenario without a name", "name: a\nscenarios:\n  - axes: {seed: [1]}\n", []string{"x.yaml:3: scenarios[0].scenario: missing"}},
		{"axis not a list", "name: a\nscenarios:\n  - scenario: smoke\n    axes: {seed: 1}\n", []string{"x.yaml:4: scenarios[0].axes.seed: must be a list, got the number 1"}},
		{"axis of lists", "name: a\nscenarios:\n  - scenario: smoke\n    axes: {seed: [[1]]}\n", []string{"x.yaml:4: scenarios[0].axes.seed[0]: must be a single value (what --set takes), got a list"}},
		{"value twice", "name: a\nscenarios:\n  - scenario: smoke\n    axes:\n      seed: [1, 2, 1]\n", []string{"x.yaml:5: scenarios[0].axes.seed[2]: 1 is listed twice"}},
		{"key in two places", "name: a\nscenarios:\n  - scenario: smoke\n    set: {seed: 1}\n    axes:\n      seed: [2, 3]\n",
			[]string{"x.yaml:6: scenarios[0].axes.seed: seed is also set by set: give each key in one place"}},
		{"backend as an override", "name: a\nscenarios:\n  - scenario: smoke\n    set: {backend: kernel}\n",
			[]string{"x.yaml:4: scenarios[0].set.backend: the backend is swept by the spec's backends, not by an override"}},
		{"two modes alike", "name: a\nscenarios:\n  - scenario: smoke\n    modes:\n      a: {seed: 1}\n      b: {seed: 1}\n",
			[]string{"x.yaml:6: scenarios[0].modes.b: sets what mode a sets"}},
		{"bad proxier", "name: a\nscenarios: [{scenario: smoke}]\nproxiers: [kube-proxy@1.37]\n",
			[]string{`x.yaml:3: proxiers[0]: "kube-proxy@1.37" is not a proxier`}},
		{"kernel backend without kernels", "name: a\nscenarios: [{scenario: smoke}]\nbackends: [kernel]\n",
			[]string{"x.yaml:3: kernels: the kernel backend needs the kernels to run on"}},
		{"kernels without the kernel backend", "name: a\nscenarios: [{scenario: smoke}]\nkernels: [6.1.0-56-amd64]\n",
			[]string{"x.yaml:3: kernels: kernels are for the kernel backend"}},
		{"runs", "name: a\nscenarios: [{scenario: smoke}]\nruns: 0\n", []string{"x.yaml:3: runs: 0: want 1 to 100 runs per cell"}},
		{"no proxier", "name: a\nscenarios: [{scenario: smoke}]\nproxiers: []\n", []string{"x.yaml:3: proxiers: empty: list at least one proxier (kpsim's is the default), or leave the field out"}},
		{"alias", "name: a\nscenarios:\n  - scenario: smoke\n    set: {seed: &s 1}\n    modes: {m: {cluster.nodes: *s}}\n",
			[]string{"x.yaml:5: scenarios[0].modes.m.cluster.nodes: YAML aliases are not supported"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("x.yaml", []byte(tc.spec))
			require.Error(t, err)
			for _, w := range tc.want {
				require.Contains(t, err.Error(), w)
			}
		})
	}
}

// TestPlanChecksEveryCell: a cell's scenario is loaded with its overrides
// as `kpsim run` loads it, and a problem an override causes is reported at
// the spec line that gave it, once however many cells share it.
func TestPlanChecksEveryCell(t *testing.T) {
	for _, tc := range []struct {
		name, spec string
		want       string
	}{
		{"unknown key", "name: a\nscenarios:\n  - scenario: smoke\n    axes:\n      cluster.servics: [10, 20]\n",
			"x.yaml:5: scenarios[0].axes.cluster.servics: unknown field (known: fromFile, services,"},
		{"bad value", "name: a\nscenarios:\n  - scenario: smoke\n    modes:\n      m: {proxier.initialSync: sometimes}\n",
			`x.yaml:5: scenarios[0].modes.m.proxier.initialSync: "sometimes" is not one of handlers, legacy`},
		{"no such scenario", "name: a\nscenarios:\n  - scenario: nope\n", `x.yaml:3: scenarios[0].scenario: scenario "nope": no such file`},
		{"the same cell twice", "name: a\nscenarios:\n  - scenario: smoke\n  - scenario: smoke\n",
			"x.yaml:4: scenarios[1]: runs cells scenarios[0] runs too"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Parse("x.yaml", []byte(tc.spec))
			require.NoError(t, err)
			_, err = s.Plan(build)
			require.ErrorContains(t, err, tc.want)
			require.Equal(t, 1, strings.Count(err.Error(), "x.yaml:"), "one problem, reported once:\n%v", err)
		})
	}
}

// TestScenarioRelativeToSpec: a scenario given as a file is read relative
// to the spec; a bare name is a shipped scenario.
func TestScenarioRelativeToSpec(t *testing.T) {
	dir := t.TempDir()
	smoke, err := os.ReadFile("../scenarios/smoke.yaml")
	require.NoError(t, err)
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "scn"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "scn", "mine.yaml"), smoke, 0o644))
	spec := filepath.Join(dir, "specs", "s.yaml")
	require.NoError(t, os.MkdirAll(filepath.Dir(spec), 0o755))
	require.NoError(t, os.WriteFile(spec, []byte("name: a\nscenarios:\n  - scenario: ../scn/mine.yaml\n  - scenario: smoke\n    set: {seed: 2}\n"), 0o644))
	p, err := Load(spec, build)
	require.NoError(t, err)
	require.Len(t, p.Cells, 2)
	require.Equal(t, filepath.Join(dir, "scn", "mine.yaml"), ScenarioPath(spec, p.Cells[0].Scenario))
	require.Equal(t, "smoke", ScenarioPath(spec, p.Cells[1].Scenario))
	require.True(t, strings.HasPrefix(p.Cells[0].Name, "mine_kpsim_sim_"), p.Cells[0].Name)
}

// TestShippedSweeps: every sweep shipped beside this package plans, and
// restart-scale is the incident's scenario at three sizes in two modes.
func TestShippedSweeps(t *testing.T) {
	specs, err := filepath.Glob("*.yaml")
	require.NoError(t, err)
	require.Contains(t, specs, "restart-scale.yaml")
	for _, spec := range specs {
		t.Run(spec, func(t *testing.T) {
			p, err := Load(spec, build)
			require.NoError(t, err)
			require.NotEmpty(t, p.Cells)
			if spec != "restart-scale.yaml" {
				return
			}
			var got []string
			for _, c := range p.Cells {
				got = append(got, strings.Join(append(c.Sets(), c.Scenario), " "))
			}
			require.Equal(t, []string{
				"cluster.services=1000 proxier.initialSync=legacy dataplane.ipset=exec backend=sim restart-stale-ipsets",
				"cluster.services=1000 backend=sim restart-stale-ipsets",
				"cluster.services=2500 proxier.initialSync=legacy dataplane.ipset=exec backend=sim restart-stale-ipsets",
				"cluster.services=2500 backend=sim restart-stale-ipsets",
				"cluster.services=4500 proxier.initialSync=legacy dataplane.ipset=exec backend=sim restart-stale-ipsets",
				"cluster.services=4500 backend=sim restart-stale-ipsets",
			}, got)
		})
	}
}
