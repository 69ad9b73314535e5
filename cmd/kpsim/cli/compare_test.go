package cli

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kpsim/kpsim/dataplane"
	"github.com/kpsim/kpsim/results"
	"github.com/kpsim/kpsim/results/resultstest"
)

func TestCompareCommand(t *testing.T) {
	dir := t.TempDir()
	shape := resultstest.Options{Name: "smoke", Seed: 3, Syncs: 16, Services: 200, Probes: true, Noise: 0.08}
	exec := shape
	exec.IPSetExec = true
	base := writeRuns(t, dir, "base", 8, shape)
	head := writeRuns(t, dir, "head", 8, shape)
	slow := writeRuns(t, dir, "slow", 8, exec)
	// Same timing, one more ipset deletion per run: a behaviour change.
	opsHead := writeRuns(t, dir, "ops", 8, shape)
	for _, p := range opsHead {
		f, err := results.Read(p)
		require.NoError(t, err)
		f.Totals.Ops[dataplane.OpIPSetDel]++
		require.NoError(t, results.Write(p, f))
	}
	// Two syncs of every run failed.
	failing := writeRuns(t, dir, "failing", 8, shape)
	for _, p := range failing {
		f, err := results.Read(p)
		require.NoError(t, err)
		f.Syncs[1].Error, f.Syncs[2].Error = "ipset add: set is full", "ipset add: set is full"
		require.NoError(t, results.Write(p, f))
	}
	// Nothing broke in any run: the synthetic runs' restart breaks two services.
	clean := writeRuns(t, dir, "clean", 8, shape)
	for _, p := range clean {
		f, err := results.Read(p)
		require.NoError(t, err)
		f.Probes.Failures = nil
		for i := range f.Probes.Targets {
			f.Probes.Targets[i].Recovered = nil
		}
		require.NoError(t, results.Write(p, f))
	}
	// Stopped after half its syncs.
	interrupted := writeRuns(t, dir, "stopped", 1, shape)
	{
		f, err := results.Read(interrupted[0])
		require.NoError(t, err)
		f.Syncs, f.Interrupted = f.Syncs[:8], true
		f.Totals.Ops = dataplane.Ops{}
		for i := range f.Syncs {
			f.Totals.Ops.Add(&f.Syncs[i].Ops)
		}
		require.NoError(t, results.Write(interrupted[0], f))
	}
	join := func(ps []string) string { return strings.Join(ps, ",") }
	sides := func(b, h []string, flags ...string) []string {
		args := append([]string{"compare"}, flags...)
		args = append(args, b...)
		args = append(args, "--")
		return append(args, h...)
	}

	runCases(t, []cliCase{
		{name: "same build is noise", args: sides(base, head), stdout: []string{"no significant change"}},
		{name: "another setting is refused", args: sides(base, slow), code: 2,
			stderr: "the runs did not run the same scenario with the same settings:\n  proxier.ipset: \"netlink\" in base-0.json, "},
		{name: "refusal says how to compare anyway", args: sides(base, slow), code: 2, stderr: "pass --allow-different to compare them anyway"},
		{name: "exec ipset regresses, naming the phase", args: sides(base, slow, "--allow-different"), code: 1,
			stdout: []string{"REGRESSED: phase/ipset-entries/p50", "WARNING: the runs ran different scenarios or settings"}, stderr: "phase/ipset-entries/p50"},
		{name: "latency only reported", args: sides(base, slow, "--latency=report", "--allow-different"), stdout: []string{"REGRESSED: phase/ipset-entries/p50"}},
		{name: "huge threshold", args: sides(base, slow, "--threshold", "1e9", "--allow-different"), stdout: []string{"no significant change"}},
		{name: "more failed syncs fail whatever the gate", args: sides(base, failing, "--latency=report", "--allow-ops-change"), code: 1,
			stdout: []string{"REGRESSED: failed-syncs median 0 -> 2"}, stderr: "failed-syncs"},
		{name: "more broken traffic fails whatever the latency gate", args: sides(clean, base, "--latency=report"), code: 1,
			stdout: []string{"REGRESSED: disruption/seconds median 0 -> "}, stderr: "more broken traffic: disruption/seconds"},
		{name: "help says so too", args: []string{"compare", "--help"},
			stdout: []string{"unless --allow-disruption declares it; --latency does not change this", "Broken traffic fails either way"}},
		{name: "less broken traffic is no failure", args: sides(base, clean, "--latency=gate"), stdout: []string{"IMPROVED: disruption/seconds"}},
		{name: "interrupted head warned, its lower counts not judged", args: sides(base, interrupted, "--latency=report"),
			stdout: []string{"WARNING: stopped-0.json was interrupted before its timeline finished", "NOT JUDGED (incomplete run): ops/writes"}},
		{name: "ops change fails", args: sides(base, opsHead, "--latency", "report"), code: 1,
			stdout: []string{"CHANGED: ops/ipset-del"}, stderr: "--allow-ops-change"},
		{name: "declared ops change passes", args: sides(base, opsHead, "--latency=report", "--allow-ops-change"),
			stdout: []string{"CHANGED: ops/ipset-del"}},
		{name: "flags after files", args: append(sides(base, slow), "--format", "md", "--allow-different"), code: 1,
			stdout: []string{"| `phase/ipset-entries/p50` | modeled |", "**regressed**"}},
		{name: "--base/--head lists", args: []string{"compare", "--base", join(base), "--head", join(head)}, stdout: []string{"no significant change"}},
		{name: "two files: one run a side cannot decide", args: []string{"compare", "--allow-different", base[0], slow[0]},
			stdout: []string{"1+1 runs: with", "CANNOT DECIDE: phase/ipset-entries", "runs per side are needed to decide", "no significant change"}},
		{name: "benchstat", args: sides(base[:1], head[:1], "--format", "benchstat"),
			stdout: []string{"kpsim-side: base", "kpsim-side: head", "BenchmarkKpsim/smoke/sync/p50 1 ", " ns/op", "BenchmarkKpsim/smoke/ops/ipset-add 1 "}},
		{name: "one side empty", args: []string{"compare", base[0], "--"}, code: 2, stderr: "at least one results file on each side"},
		{name: "ambiguous", args: []string{"compare", base[0], base[1], head[0]}, code: 2, stderr: "want BASE.json HEAD.json"},
		{name: "both styles", args: []string{"compare", "--base", base[0], "--head", head[0], base[1]}, code: 2, stderr: "not both"},
		{name: "bad alpha", args: sides(base, head, "--alpha", "2"), code: 2, stderr: "--alpha"},
		{name: "bad latency", args: sides(base, head, "--latency", "maybe"), code: 2, stderr: "report or gate"},
	})

	// -o writes the file and still exits with the verdict.
	mdPath := filepath.Join(dir, "cmp.md")
	var out, errb bytes.Buffer
	require.Equal(t, 1, run(sides(base, slow, "--format", "md", "-o", mdPath, "--allow-different"), &out, &errb))
	b, err := os.ReadFile(mdPath)
	require.NoError(t, err)
	require.Contains(t, string(b), "### kpsim compare: smoke")
}

// cliCase is a command line, its exit status, what its standard output
// must contain and what its standard error must contain.
type cliCase struct {
	name   string
	args   []string
	code   int
	stdout []string
	stderr string
}

// runCases runs each case's command line as a subtest.
func runCases(t *testing.T, cases []cliCase) {
	t.Helper()
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			require.Equal(t, tt.code, run(tt.args, &out, &errb), "stdout:\n%s\nstderr:\n%s", out.String(), errb.String())
			for _, s := range tt.stdout {
				require.Contains(t, out.String(), s)
			}
			require.Contains(t, errb.String(), tt.stderr)
		})
	}
}

// TestMain lets the test binary stand in for kpsim: with KPSIM_TEST_MAIN=1
// it runs the command line instead of the tests, so a test can start real
// kpsim processes (whose CPU and RSS are their own) without building one.
func TestMain(m *testing.M) {
	if os.Getenv("KPSIM_TEST_MAIN") == "1" {
		trap := trapSignals() // as Main does
		os.Exit(execute(trap.context(), os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// kpsimProcess runs kpsim (this test binary, see TestMain) as a process of
// its own and returns its combined output and exit status.
func kpsimProcess(t *testing.T, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "KPSIM_TEST_MAIN=1")
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return string(out), ee.ExitCode()
	}
	require.NoError(t, err)
	return string(out), 0
}

// TestCompareRealRuns runs the simulator, each run its own process, and
// compares: the same build twice is the same, copies of one modeled run
// count once, and the one-process-per-entry ipset strategy against netlink
// regresses in phase ipset-entries, compared exactly.
func TestCompareRealRuns(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the simulator 6 times: skipped with -short")
	}
	scenario := filepath.Join("..", "..", "..", "scenarios", "smoke.yaml")
	_, err := os.Stat(scenario)
	require.NoError(t, err)
	dir := t.TempDir()
	kpsim := func(args ...string) (string, int) { return kpsimProcess(t, args...) }
	runs := func(name string, set string) []string {
		var out []string
		for i := 0; i < 2; i++ {
			p := filepath.Join(dir, fmt.Sprintf("%s-%d.json", name, i))
			log, code := kpsim("run", "-s", scenario, "-o", p, "--set", set)
			require.Equal(t, 0, code, "kpsim run:\n%s", log)
			out = append(out, p)
		}
		return out
	}
	a := runs("a", "dataplane.ipset=netlink")
	b := runs("b", "dataplane.ipset=netlink")
	e := runs("exec", "dataplane.ipset=exec")

	// The same build twice: what is modeled or counted repeats exactly on
	// the modeled clock, so none of it may be called a change. What is
	// measured (process CPU, RSS) varies with the machine's load and is only
	// reported here: a busy machine is not a regression.
	args := append(append(append([]string{"compare", "--latency=report"}, a...), "--"), b...)
	out, code := kpsim(args...)
	require.Equal(t, 0, code, "same build:\n%s", out)
	require.Contains(t, out, "a-0.json and 1 identical copies of it (a-1.json) are one run of seed 1 on the modeled clock: counted once")
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "REGRESSED:") || strings.HasPrefix(line, "IMPROVED:") {
			require.Contains(t, line, "measured", "same build, a modeled or counted figure changed:\n%s", out)
		}
	}

	args = append(append(append([]string{"compare", "--latency=gate", "--allow-different"}, a...), "--"), e...)
	out, code = kpsim(args...)
	require.Equal(t, 1, code, "exec vs netlink:\n%s", out)
	require.Contains(t, out, "REGRESSED: phase/ipset-entries/")
	require.Contains(t, out, "compared exactly")
	t.Logf("exec vs netlink:\n%s", out)
}
