package sweep

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kpsim/kpsim/dataplane"
	"github.com/kpsim/kpsim/record"
	"github.com/kpsim/kpsim/results"
	"github.com/kpsim/kpsim/results/resultstest"
)

func cellOf(services, mode string, modeSet ...string) Cell {
	c := Cell{Scenario: "smoke", Axes: []Setting{{"cluster.services", services}}, Mode: mode, ModeSet: modeSet,
		Proxier: record.ProxierKpsim, Backend: dataplane.BackendSim, Runs: 1}
	c.Name = CellName(&c)
	return c
}

// TestCellName: a cell's name is a function of its settings: the same
// settings give the same name, any setting changed (even one the readable
// part leaves out) another, and the number of runs none.
func TestCellName(t *testing.T) {
	base := cellOf("1000", "legacy+exec", "proxier.initialSync=legacy")
	safe := regexp.MustCompile(`^[A-Za-z0-9.+-]+(_[A-Za-z0-9.+-]+)*_[0-9a-f]{8}$`)
	for _, tc := range []struct {
		name   string
		change func(*Cell)
		same   bool
		want   string // the name's readable part, when it is asserted
	}{
		{"unchanged", func(*Cell) {}, true, "smoke_services-1000_legacy+exec_kpsim_sim_"},
		{"more runs", func(c *Cell) { c.Runs = 5 }, true, ""},
		{"another value", func(c *Cell) { c.Axes[0].Value = "2500" }, false, "smoke_services-2500_legacy+exec_kpsim_sim_"},
		{"a fixed override the name does not show", func(c *Cell) { c.Set = []string{"seed=7"} }, false, "smoke_services-1000_legacy+exec_kpsim_sim_"},
		{"the mode's overrides", func(c *Cell) { c.ModeSet = []string{"proxier.initialSync=handlers"} }, false, ""},
		{"a kube-proxy release on a kernel", func(c *Cell) {
			c.Proxier, c.Backend, c.Kernel = "kube-proxy@v1.37.1", dataplane.BackendKernel, "6.12.100+deb12-amd64"
		}, false, "smoke_services-1000_legacy+exec_kube-proxy-v1.37.1_kernel-6.12.100+deb12-amd64_"},
		{"a value with characters a file name does not take", func(c *Cell) { c.Axes[0].Value = `"a b/c"` }, false, "smoke_services-a-b-c_legacy+exec_kpsim_sim_"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := base
			c.Axes = append([]Setting(nil), base.Axes...)
			tc.change(&c)
			name := CellName(&c)
			require.Regexp(t, safe, name)
			require.Equal(t, tc.same, name == base.Name, "%s vs %s", name, base.Name)
			if tc.want != "" {
				require.Equal(t, tc.want+c.Key()[:8], name)
			}
		})
	}
}

// TestCellKeyIgnoresOrder: overrides never share a key, so the order they
// are listed in does not change what the cell runs, nor its key.
func TestCellKeyIgnoresOrder(t *testing.T) {
	a := Cell{Scenario: "smoke", Set: []string{"seed=1", "cluster.nodes=3"}, Proxier: "kpsim", Backend: dataplane.BackendSim}
	b := Cell{Scenario: "smoke", Set: []string{"cluster.nodes=3", "seed=1"}, Proxier: "kpsim", Backend: dataplane.BackendSim}
	require.Equal(t, a.Key(), b.Key())
	require.Equal(t, []string{"seed=1", "cluster.nodes=3", "backend=sim"}, a.Sets())
}

// TestCellSetsNameTheRelease: a kube-proxy cell's runs select the release;
// a kpsim cell's runs leave the default.
func TestCellSetsNameTheRelease(t *testing.T) {
	c := Cell{Scenario: "smoke", Proxier: "kube-proxy@v1.37.1", Backend: dataplane.BackendKernel, Kernel: "6.1.0-56-amd64"}
	require.Equal(t, []string{"proxier.implementation=kube-proxy@v1.37.1", "backend=kernel"}, c.Sets())
	c.Proxier = record.ProxierKpsim
	require.Equal(t, []string{"backend=kernel"}, c.Sets())
}

func TestMatrix(t *testing.T) {
	p := &Plan{Sweep: "s"}
	_, err := p.Matrix()
	require.ErrorContains(t, err, "no cell to run")
	for i := 0; i <= MaxMatrixJobs; i++ {
		p.Cells = append(p.Cells, cellOf(fmt.Sprint(i), ""))
	}
	_, err = p.Matrix()
	require.ErrorContains(t, err, "257 cells, and a GitHub Actions matrix runs at most 256 jobs")
	p.Cells = p.Cells[:2]
	m, err := p.Matrix()
	require.NoError(t, err)
	require.Equal(t, []MatrixEntry{
		{Cell: p.Cells[0].Name, Scenario: "smoke", Proxier: "kpsim", Backend: "sim"},
		{Cell: p.Cells[1].Name, Scenario: "smoke", Proxier: "kpsim", Backend: "sim"},
	}, m.Include)
}

// fixture is a sweep on disk: a plan and, per cell, what its run left.
type fixture struct {
	t    *testing.T
	root string
	plan *Plan
}

func newFixture(t *testing.T, cells ...Cell) *fixture {
	f := &fixture{t: t, root: t.TempDir(), plan: &Plan{Sweep: "s", Spec: "s.yaml", Kpsim: build, Cells: cells}}
	require.NoError(t, WritePlan(filepath.Join(f.root, "plan", "plan.json"), f.plan))
	return f
}

var build = record.Build{Version: "v0.0.0-test", Commit: "0123456789ab"} // resultstest's

// ran writes cell c's directory as `kpsim sweep run` leaves it, under
// the artifact's name, with one results file per given file (nil: the
// run wrote none).
func (f *fixture) ran(c Cell, status, why string, files ...*record.File) string {
	dir := filepath.Join(f.root, "cell-"+c.Name)
	rec := &Record{Cell: c, Kpsim: build, Status: status, Error: why}
	for i, rf := range files {
		run := RunRecord{Error: why}
		if rf != nil {
			run.File = fmt.Sprintf("run-%d.json", i+1)
			require.NoError(f.t, results.Write(filepath.Join(dir, run.File), rf))
		}
		rec.Runs = append(rec.Runs, run)
	}
	require.NoError(f.t, WriteRecord(filepath.Join(dir, RecordFile), rec))
	return dir
}

func synth() *record.File {
	return resultstest.File(resultstest.Options{Seed: 1, Syncs: 4, Modeled: true})
}

func (f *fixture) merge(o MergeOptions) (*Index, error) {
	o.IndexDir = f.root
	return Merge([]string{f.root}, o)
}

func statuses(ix *Index) map[string]string {
	out := map[string]string{}
	for _, c := range ix.Cells {
		out[c.Name] = c.Status + ": " + c.Error
	}
	return out
}

// TestMergeShowsEveryCell: a cell that ran is ok; one without a record is
// missing; one whose record or results say it failed, or that never
// finished, has failed. None is dropped.
func TestMergeShowsEveryCell(t *testing.T) {
	ok, missing, failed, unfinished := cellOf("1", ""), cellOf("2", ""), cellOf("3", ""), cellOf("4", "")
	brokenRun, unreadable := cellOf("5", ""), cellOf("6", "")
	f := newFixture(t, ok, missing, failed, unfinished, brokenRun, unreadable)

	f.ran(ok, StatusOK, "", synth())
	f.ran(failed, StatusFailed, "run 1: kpsim run exited 3: proxier gave up", synth())
	f.ran(unfinished, StatusRunning, "")
	bad := synth()
	bad.Error = "waitSynced timed out"
	f.ran(brokenRun, StatusOK, "", bad)
	dir := f.ran(unreadable, StatusOK, "", synth())
	require.NoError(t, os.WriteFile(filepath.Join(dir, "run-1.json"), []byte(`{"schemaVersion": 99}`), 0o644))

	ix, err := f.merge(MergeOptions{})
	require.NoError(t, err)
	got := statuses(ix)
	require.Len(t, got, 6)
	require.Equal(t, "ok: ", got[ok.Name])
	require.Equal(t, "missing: no record of a run: its job never ran, or ended before it started the cell", got[missing.Name])
	require.Equal(t, "failed: run 1: kpsim run exited 3: proxier gave up", got[failed.Name])
	require.Equal(t, "failed: did not finish: its record stops after 0 of 1 run", got[unfinished.Name])
	require.Equal(t, "failed: run 1 failed: waitSynced timed out", got[brokenRun.Name])
	require.Contains(t, got[unreadable.Name], "failed: run 1: read results")
	require.Equal(t, "6 cells: 1 ok, 4 failed, 1 missing", ix.Summary())
	require.Equal(t, []string{"cell-" + ok.Name + "/run-1.json"}, ix.Cells[0].Files)

	// What the index names, Load reads, relative to the index.
	require.NoError(t, WriteIndex(filepath.Join(f.root, "index.json"), ix))
	l, err := Load(filepath.Join(f.root, "index.json"))
	require.NoError(t, err)
	require.Len(t, l.Files, 1)
	require.Len(t, l.Files[ok.Name], 1)
	require.Equal(t, "smoke", l.Index.Cells[0].Scenario)

	// An index moved away from its results files says so.
	moved := filepath.Join(t.TempDir(), "index.json")
	require.NoError(t, WriteIndex(moved, ix))
	_, err = Load(moved)
	require.ErrorContains(t, err, "cell "+ok.Name)
	require.ErrorContains(t, err, "keep them together")
}

func TestMergeRefusesMixedBuilds(t *testing.T) {
	a, b := cellOf("1", ""), cellOf("2", "")
	f := newFixture(t, a, b)
	f.ran(a, StatusOK, "", synth())
	other := synth()
	other.Kpsim = record.Build{Version: "v0.0.1", Commit: "fedcba987654"}
	f.ran(b, StatusOK, "", other)

	_, err := f.merge(MergeOptions{})
	var mixed *MixedError
	require.ErrorAs(t, err, &mixed)
	require.Equal(t, []string{
		"v0.0.0-test (commit 0123456789ab) in the plan, " + a.Name + ", " + b.Name,
		"v0.0.1 (commit fedcba987654) in " + b.Name,
	}, mixed.Builds)

	ix, err := f.merge(MergeOptions{AllowMixed: true})
	require.NoError(t, err)
	require.Len(t, ix.Kpsim, 2)
	require.Len(t, ix.Notes, 1)
	require.Contains(t, ix.Notes[0], "merged although different kpsim builds planned and ran the cells")
	require.Equal(t, "2 cells: 2 ok", ix.Summary())
}

func TestMergeRefusesAmbiguousInput(t *testing.T) {
	a := cellOf("1", "")
	for _, tc := range []struct {
		name  string
		setup func(f *fixture) MergeOptions
		want  string
	}{
		{"no plan", func(f *fixture) MergeOptions {
			require.NoError(t, os.RemoveAll(filepath.Join(f.root, "plan")))
			return MergeOptions{}
		}, "no plan (kpsim-sweep-plan) in"},
		{"two plans", func(f *fixture) MergeOptions {
			require.NoError(t, WritePlan(filepath.Join(f.root, "other", "plan.json"), f.plan))
			return MergeOptions{}
		}, "2 plans"},
		{"a plan named that is not one", func(f *fixture) MergeOptions {
			dir := f.ran(a, StatusOK, "", synth())
			return MergeOptions{Plan: filepath.Join(dir, "run-1.json")}
		}, "a document without a kind (a results file?), not a kpsim-sweep-plan"},
		{"two records of one cell", func(f *fixture) MergeOptions {
			f.ran(a, StatusOK, "", synth())
			require.NoError(t, WriteRecord(filepath.Join(f.root, "again", RecordFile), &Record{Cell: a, Kpsim: build, Status: StatusOK}))
			return MergeOptions{}
		}, "cell " + a.Name + " has two records"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, a)
			_, err := f.merge(tc.setup(f))
			require.ErrorContains(t, err, tc.want)
		})
	}
}

// TestMergeNotesWhatItIgnores: records of cells the plan does not have and
// results files no record names are not silently dropped: the notes say so.
func TestMergeNotesWhatItIgnores(t *testing.T) {
	a := cellOf("1", "")
	f := newFixture(t, a)
	f.ran(a, StatusOK, "", synth())
	f.ran(cellOf("999", ""), StatusOK, "", synth())
	require.NoError(t, results.Write(filepath.Join(f.root, "loose", "stray.json"), synth()))
	ix, err := f.merge(MergeOptions{})
	require.NoError(t, err)
	require.Len(t, ix.Notes, 2)
	require.Contains(t, ix.Notes[0], "ignored 1 record of cells the plan does not have")
	require.Contains(t, ix.Notes[1], "ignored 2 results files that no cell record names")
	require.True(t, strings.Contains(ix.Notes[1], "stray.json"))
	require.Equal(t, "1 cell: 1 ok", ix.Summary())
}

func TestPlanFind(t *testing.T) {
	p := &Plan{Cells: []Cell{cellOf("1", ""), cellOf("2", "")}}
	require.Equal(t, &p.Cells[1], p.Find(p.Cells[1].Name))
	require.Nil(t, p.Find("nope"))
}
