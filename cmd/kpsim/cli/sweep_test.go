package cli

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kpsim/kpsim/dataplane"
	"github.com/kpsim/kpsim/results"
	"github.com/kpsim/kpsim/results/sweep"
)

// kpsimRun runs a command line in this process and returns its output.
func kpsimRun(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errb bytes.Buffer
	code = run(args, &out, &errb)
	return out.String(), errb.String(), code
}

func writeSpec(t *testing.T, spec string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "spec.yaml")
	require.NoError(t, os.WriteFile(p, []byte(spec), 0o644))
	return p
}

func TestSweepSubcommandsHelp(t *testing.T) {
	for _, sub := range []string{"plan", "run", "merge"} {
		out, errb, code := kpsimRun(t, "sweep", sub, "--help")
		require.Equal(t, 0, code, errb)
		require.Contains(t, out, "Usage:\n  kpsim sweep "+sub+" ")
		require.Contains(t, out, "Examples:\n  ")
		require.NotContains(t, out, "[flags]")
	}
	_, errb, code := kpsimRun(t, "sweep", "bogus")
	require.Equal(t, 2, code)
	require.Contains(t, errb, `unknown sweep command "bogus": want plan, run or merge`)
}

const planSpec = `
name: formats
scenarios:
  - scenario: smoke
    axes:
      cluster.services: [10, 20]
proxiers: [kpsim, kube-proxy@v1.37.1]
`

// TestSweepPlanFormats: the plan, the matrix on one line for
// $GITHUB_OUTPUT, and the names.
func TestSweepPlanFormats(t *testing.T) {
	spec := writeSpec(t, planSpec)
	out, errb, code := kpsimRun(t, "sweep", "plan", spec, "--format", "names")
	require.Equal(t, 0, code, errb)
	names := strings.Fields(out)
	require.Len(t, names, 4)
	require.Contains(t, errb, "sweep formats: 4 cells to run")

	out, errb, code = kpsimRun(t, "sweep", "plan", spec, "--format", "matrix")
	require.Equal(t, 0, code, errb)
	require.Equal(t, 1, strings.Count(out, "\n"), "one line, for $GITHUB_OUTPUT")
	var m sweep.Matrix
	require.NoError(t, json.Unmarshal([]byte(out), &m))
	require.Equal(t, []sweep.MatrixEntry{
		{Cell: names[0], Scenario: "smoke", Proxier: "kpsim", Backend: "sim"},
		{Cell: names[1], Scenario: "smoke", Proxier: "kube-proxy@v1.37.1", Backend: "sim"},
		{Cell: names[2], Scenario: "smoke", Proxier: "kpsim", Backend: "sim"},
		{Cell: names[3], Scenario: "smoke", Proxier: "kube-proxy@v1.37.1", Backend: "sim"},
	}, m.Include)

	planPath := filepath.Join(t.TempDir(), "plan.json")
	out, errb, code = kpsimRun(t, "sweep", "plan", spec, "-o", planPath)
	require.Equal(t, 0, code, errb)
	require.Equal(t, "plan: "+planPath+"\n", out)
	p, err := sweep.ReadPlan(planPath)
	require.NoError(t, err)
	require.Len(t, p.Cells, 4)
	require.Equal(t, buildInfo(), p.Kpsim)

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"sweep", "plan", spec, "--format", "yaml"}, `--format "yaml": want json, matrix or names`},
		{[]string{"sweep", "plan", writeSpec(t, "name: x\nscenarios:\n  - scenario: smoke\n    axes: {seed: [1, 1]}\n")}, "spec.yaml:4: scenarios[0].axes.seed[1]: 1 is listed twice"},
		{[]string{"sweep", "plan"}, "want one sweep spec, got 0 arguments"},
	} {
		_, errb, code := kpsimRun(t, tc.args...)
		require.Equal(t, 2, code, errb)
		require.Contains(t, errb, tc.want)
	}
}

// TestSweepRunAndMerge runs the cells of a small sweep as `make sweep`
// does, one `kpsim sweep run` each, and merges them: the cells that ran
// are ok, the kernel cells this machine cannot run failed and say why, the
// cell that never ran is missing; a record from another build is refused
// unless --allow-mixed.
func TestSweepRunAndMerge(t *testing.T) {
	t.Setenv("KPSIM_TEST_MAIN", "1") // the runs are this test binary as kpsim (see TestMain)
	spec := writeSpec(t, `
name: runs
scenarios:
  - scenario: smoke
    axes:
      cluster.services: [10, 20, 30]
backends: [sim, kernel]
kernels: [0.0.0-not-this-one]
runs: 2
`)
	out := t.TempDir()
	stdout, errb, code := kpsimRun(t, "sweep", "plan", spec, "-o", filepath.Join(out, "plan.json"))
	require.Equal(t, 0, code, errb)
	p, err := sweep.ReadPlan(filepath.Join(out, "plan.json"))
	require.NoError(t, err)
	require.Len(t, p.Cells, 6, stdout)
	cells := filepath.Join(out, "cells")
	require.NoError(t, os.Mkdir(cells, 0o755)) // outside the working directory, kpsim creates no directory
	for _, c := range p.Cells {
		if c.Axes[0].Value == "30" && c.Backend == dataplane.BackendSim {
			continue // never runs: missing
		}
		stdout, errb, code := kpsimRun(t, "sweep", "run", spec, c.Name, "-o", cells)
		if c.Backend == dataplane.BackendKernel {
			require.Equal(t, 3, code, errb)
			require.Contains(t, errb, "runs on kernel 0.0.0-not-this-one and this machine runs")
			continue
		}
		require.Equal(t, 0, code, errb)
		require.Contains(t, stdout, "cell: "+c.Name+": 2 runs in ")
		require.Contains(t, errb, "kpsim sweep run: "+c.Name+": run 2 of 2: kpsim run -s smoke -o ")
		require.Contains(t, errb, "--set cluster.services="+c.Axes[0].Value+" --set backend=sim")
		rec, err := sweep.ReadRecord(filepath.Join(cells, c.Name, sweep.RecordFile))
		require.NoError(t, err)
		require.Equal(t, sweep.StatusOK, rec.Status)
		require.Equal(t, []sweep.RunRecord{{File: "run-1.json"}, {File: "run-2.json"}}, rec.Runs)
		f, err := results.Read(filepath.Join(cells, c.Name, "run-1.json"))
		require.NoError(t, err)
		require.Equal(t, c.Axes[0].Value, results.Settings(f)["cluster.services"])
	}
	_, errb, code = kpsimRun(t, "sweep", "run", spec, "smoke_services-10_kpsim_sim_00000000", "-o", cells)
	require.Equal(t, 2, code)
	require.Contains(t, errb, "sweep runs has no cell smoke_services-10_kpsim_sim_00000000; its cells: smoke_services-10_kpsim_sim_")

	stdout, errb, code = kpsimRun(t, "sweep", "merge", out)
	require.Equal(t, 0, code, errb)
	require.Contains(t, stdout, "sweep runs: 6 cells: 2 ok, 3 failed, 1 missing\nindex: "+filepath.Join(out, "index.json"))
	ix, err := sweep.Load(filepath.Join(out, "index.json"))
	require.NoError(t, err)
	require.Len(t, ix.Files, 2)
	for _, c := range ix.Index.Cells {
		switch {
		case c.Backend == dataplane.BackendKernel:
			require.Equal(t, sweep.StatusFailed, c.Status)
			require.Contains(t, c.Error, "runs on kernel 0.0.0-not-this-one")
			require.Contains(t, stdout, c.Name)
		case c.Axes[0].Value == "30":
			require.Equal(t, sweep.StatusMissing, c.Status)
		default:
			require.Equal(t, sweep.StatusOK, c.Status)
			require.Len(t, ix.Files[c.Name], 2)
		}
	}

	// The index is what report and compare read in place of results files.
	index := filepath.Join(out, "index.json")
	stdout, errb, code = kpsimRun(t, "report", index)
	require.Equal(t, 0, code, errb)
	require.Equal(t, "report: "+filepath.Join(out, "index.html")+"\n", stdout)
	page, err := os.ReadFile(filepath.Join(out, "index.html"))
	require.NoError(t, err)
	require.Contains(t, string(page), "<h1>kpsim sweep: runs</h1>")
	require.Contains(t, string(page), `id="sweep-smoke-cluster-services-disruption"`)
	_, errb, code = kpsimRun(t, "report", index, filepath.Join(cells, p.Cells[0].Name, "run-1.json"))
	require.Equal(t, 2, code)
	require.Contains(t, errb, "a sweep index is reported on its own")

	stdout, errb, code = kpsimRun(t, "compare", index, index)
	require.Equal(t, 0, code, errb)
	require.Regexp(t, regexp.QuoteMeta(p.Cells[0].Name)+`\s+ok\s+ok\s+no significant change in \d+ metrics`, stdout)
	require.Contains(t, stdout, "WARNING: 4 of 6 cells were not compared (see why below)")
	_, errb, code = kpsimRun(t, "compare", index, filepath.Join(cells, p.Cells[0].Name, "run-1.json"))
	require.Equal(t, 2, code)
	require.Contains(t, errb, "sweeps are compared one index against one")

	// A cell run by another build.
	recPath := filepath.Join(cells, p.Cells[0].Name, sweep.RecordFile)
	rec, err := sweep.ReadRecord(recPath)
	require.NoError(t, err)
	rec.Kpsim.Commit = "another"
	require.NoError(t, sweep.WriteRecord(recPath, rec))
	_, errb, code = kpsimRun(t, "sweep", "merge", out)
	require.Equal(t, 2, code)
	require.Contains(t, errb, "the sweep was planned and run by different kpsim builds")
	require.Contains(t, errb, "pass --allow-mixed to merge them anyway")
	stdout, errb, code = kpsimRun(t, "sweep", "merge", out, "--allow-mixed")
	require.Equal(t, 0, code, errb)
	require.Contains(t, stdout, "note: merged although different kpsim builds planned and ran the cells")
}

// actionlint lints one workflow file with the actionlint make test runs
// (pinned in tools/go.mod), from the repository's root.
func actionlint(t *testing.T, workflow []byte) (string, error) {
	t.Helper()
	p := filepath.Join(t.TempDir(), "workflow.yml")
	require.NoError(t, os.WriteFile(p, workflow, 0o644))
	cmd := exec.Command("go", "tool", "-modfile=tools/go.mod", "actionlint", "-no-color", "-oneline", p)
	cmd.Dir = filepath.Join("..", "..", "..")
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestSweepRunKubeProxyCell: a kube-proxy cell runs only in the binary
// built for its release; any other kpsim records it failed and names that
// binary.
func TestSweepRunKubeProxyCell(t *testing.T) {
	spec := writeSpec(t, `
name: releases
scenarios:
  - scenario: smoke
proxiers: [kube-proxy@v1.37.1]
backends: [kernel]
kernels: [6.1.0-56-amd64]
`)
	out := t.TempDir()
	_, errb, code := kpsimRun(t, "sweep", "plan", spec, "-o", filepath.Join(out, "plan.json"))
	require.Equal(t, 0, code, errb)
	p, err := sweep.ReadPlan(filepath.Join(out, "plan.json"))
	require.NoError(t, err)
	require.Len(t, p.Cells, 1)
	_, errb, code = kpsimRun(t, "sweep", "run", spec, p.Cells[0].Name, "-o", out)
	require.Equal(t, 3, code, errb)
	require.Contains(t, errb, "proxier.implementation kube-proxy@v1.37.1 is not in this kpsim binary")
	require.Contains(t, errb, "bin/kpsim-kube-proxy-v1.37 when upstream/kube-proxy-v1.37 pins it (make kube-proxy)")
	rec, err := sweep.ReadRecord(filepath.Join(out, p.Cells[0].Name, sweep.RecordFile))
	require.NoError(t, err)
	require.Equal(t, sweep.StatusFailed, rec.Status)
	require.Contains(t, rec.Error, "make kube-proxy RELEASE=v1.37.1")
}

// TestSweepPlanInWorkflow: the matrix 'kpsim sweep plan' writes for the
// shipped sweep is one actionlint accepts in the workflow that runs it:
// sweep.yml with the plan written in where the cell job reads the plan
// job's output, so that actionlint checks every matrix.* the job uses
// against the keys the plan gives.
func TestSweepPlanInWorkflow(t *testing.T) {
	matrix, errb, code := kpsimRun(t, "sweep", "plan", filepath.Join("..", "..", "..", "sweeps", "restart-scale.yaml"), "--format", "matrix")
	require.Equal(t, 0, code, errb)
	wf, err := os.ReadFile(filepath.Join("..", "..", "..", ".github", "workflows", "sweep.yml"))
	require.NoError(t, err)
	const fromPlan = "matrix: ${{ fromJSON(needs.plan.outputs.matrix) }}"
	require.Equal(t, 1, strings.Count(string(wf), fromPlan), "the cell job's matrix is the plan job's output")
	withMatrix := func(m string) []byte {
		return []byte(strings.Replace(string(wf), fromPlan, "matrix: "+strings.TrimSpace(m), 1))
	}

	out, err := actionlint(t, withMatrix(matrix))
	require.NoError(t, err, "actionlint refuses sweep.yml with the plan's matrix:\n%s\nmatrix: %s", out, matrix)

	// The check can fail: a matrix without a key the job reads.
	out, err = actionlint(t, withMatrix(`{"include": [{"scenario": "smoke", "proxier": "kpsim", "backend": "sim", "kernel": ""}]}`))
	require.Error(t, err)
	require.Contains(t, out, `property "cell" is not defined`)
}

// TestSweepRunInterrupted: SIGINT to 'kpsim sweep run' (a Ctrl-C, or a
// cancelled job) stops the running 'kpsim run', which still writes its
// results, marked interrupted, and the cell is recorded as failed.
func TestSweepRunInterrupted(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the simulator in real time: skipped with -short")
	}
	spec := writeSpec(t, `
name: stopped
scenarios:
  - scenario: smoke
    set:
      cluster.services: 4
      probes.services: 1
      sim.timeScale: 1
      "timeline[11].sleep": 10m
runs: 2
`)
	names, errb, code := kpsimRun(t, "sweep", "plan", spec, "--format", "names")
	require.Equal(t, 0, code, errb)
	cell := strings.TrimSpace(names)
	dir := t.TempDir()
	cmd, log, done := startKpsim(t, false, "(13 steps)", "sweep", "run", spec, cell, "-o", dir)
	require.NoError(t, cmd.Process.Signal(syscall.SIGINT))
	require.Equal(t, 3, exitCode(t, cmd, done), log.String())
	rec, err := sweep.ReadRecord(filepath.Join(dir, cell, sweep.RecordFile))
	require.NoError(t, err)
	require.Equal(t, sweep.StatusFailed, rec.Status)
	require.Len(t, rec.Runs, 1, "no second run after the interruption")
	require.Equal(t, "run-1.json", rec.Runs[0].File)
	require.Contains(t, rec.Error, "run 1: kpsim run exited 3: interrupted")
	f, err := results.Read(filepath.Join(dir, cell, "run-1.json"))
	require.NoError(t, err)
	require.True(t, f.Interrupted)
	require.Equal(t, "interrupted: received SIGTERM", f.Error, "the one signal the child got is the one sweep run passed on")
}
