package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kpsim/kpsim/results"
	"github.com/kpsim/kpsim/results/resultstest"
)

// writeRuns writes synthetic results files named NAME-i.json into dir.
func writeRuns(t *testing.T, dir, name string, n int, o resultstest.Options) []string {
	t.Helper()
	var paths []string
	for i := 0; i < n; i++ {
		o.Run = uint64(i) + uint64(len(name))*100
		p := filepath.Join(dir, name+"-"+string(rune('0'+i))+".json")
		require.NoError(t, results.Write(p, resultstest.File(o)))
		paths = append(paths, p)
	}
	return paths
}

func TestReportCommand(t *testing.T) {
	dir := t.TempDir()
	smoke := resultstest.Options{Name: "smoke", Seed: 1, Syncs: 8, Probes: true, Metrics: true, Noise: 0.05}
	one := writeRuns(t, dir, "smoke", 1, smoke)[0]
	bad := filepath.Join(dir, "future.json")
	require.NoError(t, os.WriteFile(bad, []byte(`{"schemaVersion": 4}`), 0o644))

	tests := []struct {
		name     string
		args     []string
		code     int
		stdout   string // substring
		stderr   string // substring
		wantFile string // written, containing
		fileHas  string // and this
	}{
		{name: "default html next to the file", args: []string{"report", one}, stdout: "report: " + filepath.Join(dir, "smoke-0.html"),
			wantFile: filepath.Join(dir, "smoke-0.html")},
		{name: "flags after files", args: []string{"report", one, one, "-o", filepath.Join(dir, "two.html")}, stdout: "two.html",
			wantFile: filepath.Join(dir, "two.html")},
		{name: "md to stdout", args: []string{"report", "--format", "md", one}, stdout: "### kpsim report: smoke"},
		{name: "md to file", args: []string{"report", "--format=md", "-o", filepath.Join(dir, "r.md"), one}, wantFile: filepath.Join(dir, "r.md")},
		{name: "no files", args: []string{"report"}, code: 2, stderr: "want at least one results file"},
		{name: "bad format", args: []string{"report", "--format", "pdf", one}, code: 2, stderr: `--format "pdf"`},
		{name: "unknown schema", args: []string{"report", bad}, code: 2, stderr: "schemaVersion 4, this kpsim reads versions 1 to 3"},
		{name: "missing file", args: []string{"report", filepath.Join(dir, "nope.json")}, code: 2, stderr: "nope.json"},
		{name: "aligned at a step", args: []string{"report", one, one, "--align", "restart", "-o", filepath.Join(dir, "aligned.html")},
			stdout: "aligned.html", wantFile: filepath.Join(dir, "aligned.html"), fileHas: "seconds from restart-proxier"},
		{name: "align at a step no run has", args: []string{"report", one, "--align", "bogus"}, code: 2,
			stderr: `--align: run "smoke" has no step whose kind or label matches "bogus"; its steps: create-cluster: 100 services; churn-endpoints: rolling restarts; restart-proxier`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			require.Equal(t, tt.code, run(tt.args, &out, &errb), errb.String())
			require.Contains(t, out.String(), tt.stdout)
			require.Contains(t, errb.String(), tt.stderr)
			if tt.wantFile != "" {
				b, err := os.ReadFile(tt.wantFile)
				require.NoError(t, err)
				require.Contains(t, string(b), "kpsim report")
				require.Contains(t, string(b), tt.fileHas)
			}
		})
	}
}

// TestReportOfRealRun reports a real smoke run, each step its own process:
// every chart is drawn from what the runner records (the smoke run has
// syncs, changes and probes, so no chart may fall back to "no data" except
// the disruption chart when no probe failed).
func TestReportOfRealRun(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the simulator: skipped with -short")
	}
	if _, ok := commands["run"]; !ok {
		t.Skip("kpsim run is not built yet (the scenario runner registers it)")
	}
	dir := t.TempDir()
	res := filepath.Join(dir, "smoke.json")
	out, code := kpsimProcess(t, "run", "-s", filepath.Join("..", "..", "scenarios", "smoke.yaml"), "-o", res)
	require.Equal(t, 0, code, out)
	html := filepath.Join(dir, "smoke.html")
	out, code = kpsimProcess(t, "report", res, "-o", html)
	require.Equal(t, 0, code, out)
	b, err := os.ReadFile(html)
	require.NoError(t, err)
	page := string(b)
	for _, id := range []string{"sync-timeline", "phase-stack", "phase-distribution", "programming-cdf", "disruption-timeline", "kernel-ops"} {
		i := strings.Index(page, `<figure class="chart" id="`+id+`">`)
		require.GreaterOrEqual(t, i, 0, "chart %s missing", id)
		fig := page[i : i+strings.Index(page[i:], "</figure>")]
		require.Contains(t, fig, "<figcaption>")
		if id == "disruption-timeline" && strings.Contains(fig, "No failed probes") {
			continue
		}
		require.Contains(t, fig, "<svg", "chart %s has no SVG", id)
		require.Greater(t, strings.Count(fig, "<path"), 10, "chart %s nearly empty", id)
	}
	require.NotContains(t, page, "inconsistent</span>", "a histogram of a real run disagrees with its raw samples")

	out, code = kpsimProcess(t, "report", "--format", "md", res)
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "| slowest sync |")
	require.Contains(t, out, "internally consistent")
}
