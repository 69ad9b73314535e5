package cli

import (
	"bytes"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kpsim/kpsim/results/sweep"
)

// TestLongSetValueErrorIsShort: a --set of thousands of service names with
// one missing says which, in a few lines: each error repeated the whole
// value, megabytes of it.
func TestLongSetValueErrorIsShort(t *testing.T) {
	names := make([]string, 4000)
	for i := range names {
		names[i] = fmt.Sprintf("ns-%03d/svc-%05d", i%3, i)
	}
	names[2345] = "ns-001/missing-svc"
	set := "probes.services=[" + strings.Join(names, ", ") + "]"
	for _, args := range [][]string{
		{"run", "-s", "smoke", "--set", "cluster.services=4000", "--set", set, "-o", t.TempDir() + "/r.json"},
		{"validate", "smoke", "--set", "cluster.services=4000", "--set", set},
	} {
		t.Run(args[0], func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			require.Equal(t, 2, run(args, &stdout, &stderr))
			out := stdout.String() + stderr.String()
			require.Less(t, len(out), 10_000, "%.500s", out)
			require.Contains(t, out, "probes.services[2345]: no service ns-001/missing-svc in the cluster")
		})
	}
}

// TestTooManyProbeTargetsRefusedBeforeTheRun: probes of more targets
// than a run takes are refused while the scenario loads: validate names
// the field, and run exits 2 with nothing written (it failed with exit 3
// once started, after validate had said ok).
func TestTooManyProbeTargetsRefusedBeforeTheRun(t *testing.T) {
	out := filepath.Join(t.TempDir(), "r.json")
	sets := []string{"--set", "cluster.services=200", "--set", "probes.services=200", "--set", "probes.kinds=[clusterip]", "--set", "probes.from=[pod, node]"}
	for _, args := range [][]string{
		append([]string{"validate", "smoke"}, sets...),
		append([]string{"run", "-s", "smoke", "-o", out}, sets...),
	} {
		t.Run(args[0], func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			require.Equal(t, 2, run(args, &stdout, &stderr))
			require.Contains(t, stdout.String()+stderr.String(),
				"--set probes.services=200: probes.services: 400 probe targets, at most 256")
			require.NoFileExists(t, out)
		})
	}
}

// TestSweepPlanIsNotResults: a sweep's plan given to report (or compare)
// says how to get from it to something to report, instead of "not a
// complete kpsim results file: no scenario, start, backend, basis".
func TestSweepPlanIsNotResults(t *testing.T) {
	plan := filepath.Join(t.TempDir(), "plan.json")
	spec := filepath.Join("..", "..", "..", "sweeps", "restart-scale.yaml")
	var stdout, stderr bytes.Buffer
	require.Equal(t, 0, run([]string{"sweep", "plan", spec, "-o", plan}, &stdout, &stderr), stderr.String())
	want := plan + " is a sweep plan, not results: run its cells (kpsim sweep run " + spec + " CELL, for each CELL of kpsim sweep plan " + spec +
		" --format names), merge them (kpsim sweep merge out/sweep/restart-scale/cells --plan " + plan +
		" -o out/sweep/restart-scale/index.json), then report the index (kpsim report out/sweep/restart-scale/index.json)"
	for _, args := range [][]string{{"report", plan}, {"compare", plan, plan}} {
		t.Run(args[0], func(t *testing.T) {
			stdout.Reset()
			stderr.Reset()
			require.Equal(t, 2, run(args, &stdout, &stderr))
			require.Equal(t, "kpsim "+args[0]+": "+want+"\n", stderr.String())
		})
	}
}

// TestSweepCellRecordIsNotResults: a cell's record points at its runs.
func TestSweepCellRecordIsNotResults(t *testing.T) {
	dir := t.TempDir()
	rec := filepath.Join(dir, "cell.json")
	require.NoError(t, sweep.WriteRecord(rec, &sweep.Record{}))
	var stdout, stderr bytes.Buffer
	require.Equal(t, 2, run([]string{"report", rec}, &stdout, &stderr))
	require.Contains(t, stderr.String(), rec+" is a sweep cell's record, not results: its runs are beside it (kpsim report "+filepath.Join(dir, "run-*.json")+")")
}
