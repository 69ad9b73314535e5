package cli

import (
	"bytes"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kpsim/kpsim/dataplane/state"
	"github.com/kpsim/kpsim/record"
	"github.com/kpsim/kpsim/results"
	"github.com/kpsim/kpsim/scenarios"
)

// lockedBuffer is a bytes.Buffer safe to read while a run writes to it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func TestRunWritesResults(t *testing.T) {
	out := filepath.Join(t.TempDir(), "r.json")
	var stdout, stderr bytes.Buffer
	code := run([]string{"run", "-s", "smoke", "-o", out, "--set", "cluster.services=8", "--set", "probes.services=2"}, &stdout, &stderr)
	require.Equal(t, 0, code, stderr.String())
	require.Contains(t, stdout.String(), "kpsim smoke")
	require.Contains(t, stdout.String(), "results: "+out)
	require.Contains(t, stderr.String(), "kpsim run: smoke (13 steps) on the sim backend", "no progress bar when stderr is not a terminal")
	require.Regexp(t, `(?m)^kpsim run: step 1/13 create-cluster: at 0s modeled, \S+ wall$`, stderr.String(), "a line per step instead")
	require.Regexp(t, `(?m)^kpsim run: step 13/13 `, stderr.String())

	f, err := results.Read(out)
	require.NoError(t, err)
	require.Equal(t, record.SchemaVersion, f.SchemaVersion)
	require.Equal(t, version, f.Kpsim.Version)
	require.NotEmpty(t, f.Kpsim.Commit)
	require.Positive(t, f.Environment.CPUs)
	require.Contains(t, f.Environment.Kernel, "Linux")
	require.NotEmpty(t, f.Environment.GoVersion)
	require.Equal(t, "sim", f.Backend)
	require.False(t, f.Interrupted)
	require.NotEmpty(t, f.Syncs)
	var sc struct {
		Name    string `json:"name"`
		Cluster struct {
			Services int `json:"services"`
		} `json:"cluster"`
		Dataplane struct {
			IPSet string `json:"ipset"`
		} `json:"dataplane"`
	}
	require.NoError(t, json.Unmarshal(f.Scenario, &sc))
	require.Equal(t, "smoke", sc.Name)
	require.Equal(t, 8, sc.Cluster.Services, "the scenario as run, overrides applied")
	require.Equal(t, "restore", sc.Dataplane.IPSet, "the scenario as run, defaults filled")
}

// TestRunOnTheWallClock: a sim run at a time scale above 0 says its
// durations are modeled kernel time and measured proxier time, prints a
// line per step in wall time only, and its results file reads back.
func TestRunOnTheWallClock(t *testing.T) {
	out := filepath.Join(t.TempDir(), "r.json")
	var stdout, stderr bytes.Buffer
	code := run([]string{"run", "-s", "smoke", "-o", out, "--set", "sim.timeScale=0.01", "--set", "cluster.services=8", "--set", "probes.services=2"}, &stdout, &stderr)
	require.Equal(t, 0, code, stderr.String())
	require.Regexp(t, `(?m)^kpsim run: step 2/13 start-proxier: at \S+ wall \(the run's only clock\)$`, stderr.String())
	require.Contains(t, stdout.String(), "durations modeled kernel + measured proxier (cost profile")
	require.Regexp(t, `(?m)^syncs +\d+: .*\(modeled kernel \+ measured proxier\)$`, stdout.String())
	f, err := results.Read(out)
	require.NoError(t, err)
	require.Equal(t, record.ModeledKernel, f.Basis)
	require.Equal(t, record.ClockWall, f.Clock)
}

// TestRunMemoryLimit: a scenario's memoryLimit is the process's soft
// memory limit, unless GOMEMLIMIT says otherwise.
func TestRunMemoryLimit(t *testing.T) {
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(-1)) // a negative reads it
	args := []string{"run", "-s", "smoke", "-o", filepath.Join(t.TempDir(), "r.json"), "--set", "cluster.services=8", "--set", "probes.services=2", "--set", "memoryLimit=700Mi"}
	var stdout, stderr bytes.Buffer
	require.Equal(t, 0, run(args, &stdout, &stderr), stderr.String())
	require.Equal(t, int64(700<<20), debug.SetMemoryLimit(-1))
	require.Contains(t, stderr.String(), "kpsim run: the heap's soft limit is 700Mi (memoryLimit)")

	debug.SetMemoryLimit(math.MaxInt64)
	t.Setenv("GOMEMLIMIT", "900MiB")
	stderr.Reset()
	require.Equal(t, 0, run(args, &stdout, &stderr), stderr.String())
	require.Contains(t, stderr.String(), "kpsim run: GOMEMLIMIT=900MiB holds, not the scenario's memoryLimit 700Mi")
	require.Equal(t, int64(math.MaxInt64), debug.SetMemoryLimit(-1), "the environment's limit is the runtime's own")
}

// TestStepLine: without a progress bar each step prints where the run is,
// on the modeled clock in modeled and wall time, on the wall clock once.
func TestStepLine(t *testing.T) {
	tests := []struct {
		name string
		st   scenarios.StepStart
		wall time.Duration
		want string
	}{
		{"modeled", scenarios.StepStart{Done: 5, Total: 9, Label: "restart proxier (36% known at first sync)",
			Elapsed: 3214 * time.Millisecond, Clock: record.ClockModeled}, 804 * time.Millisecond,
			"kpsim run: step 6/9 restart proxier (36% known at first sync): at 3.21s modeled, 800ms wall"},
		{"wall", scenarios.StepStart{Done: 0, Total: 9, Label: "create-cluster", Clock: record.ClockWall}, 0,
			"kpsim run: step 1/9 create-cluster: at 0s wall (the run's only clock)"},
		{"wall, later", scenarios.StepStart{Done: 8, Total: 9, Label: "probes off", Elapsed: 75 * time.Second, Clock: record.ClockWall}, 76 * time.Second,
			"kpsim run: step 9/9 probes off: at 1m15s wall (the run's only clock)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, stepLine(tc.st, tc.wall))
		})
	}
}

// TestRunSeeds: --seeds N runs seeds SEED..SEED+N-1, one results file each,
// and compare pairs them by seed.
func TestRunSeeds(t *testing.T) {
	dir := t.TempDir()
	small := []string{"--set", "cluster.services=8", "--set", "probes.services=2"}
	var stdout, stderr bytes.Buffer
	code := run(append([]string{"run", "-s", "smoke", "--seeds", "2", "--set", "seed=40", "-o", filepath.Join(dir, "a.json")}, small...), &stdout, &stderr)
	require.Equal(t, 0, code, stderr.String())
	require.Contains(t, stdout.String(), "2 seeds: "+filepath.Join(dir, "a-seed40.json")+" "+filepath.Join(dir, "a-seed41.json"))
	for _, seed := range []string{"40", "41"} {
		f, err := results.Read(filepath.Join(dir, "a-seed"+seed+".json"))
		require.NoError(t, err)
		require.Equal(t, seed, results.Settings(f)["seed"])
	}
	code = run(append([]string{"run", "-s", "smoke", "--seeds", "2", "--set", "seed=40", "-o", filepath.Join(dir, "b.json")}, small...), &stdout, &stderr)
	require.Equal(t, 0, code, stderr.String())
	stdout.Reset()
	code = run([]string{"compare", filepath.Join(dir, "a-seed40.json"), filepath.Join(dir, "a-seed41.json"), "--",
		filepath.Join(dir, "b-seed40.json"), filepath.Join(dir, "b-seed41.json")}, &stdout, &stderr)
	require.Equal(t, 0, code, "%s\n%s", stdout.String(), stderr.String())
	require.Contains(t, stdout.String(), "modeled clock (2 seeds, paired by seed)")

	require.Equal(t, 2, run([]string{"run", "-s", "smoke", "--seeds", "0"}, &stdout, &stderr))
	require.Contains(t, stderr.String(), "--seeds 0: want 1 to 1000 runs")
}

// TestRunRuns: --runs N runs one seed N times, each a kpsim process of its
// own writing FILE-runI.json, and prints each figure's median and range; on
// the modeled clock kpsim's proxier repeats the seed, and says so.
func TestRunRuns(t *testing.T) {
	if testing.Short() {
		t.Skip("runs kpsim processes: skipped with -short")
	}
	dir := t.TempDir()
	out, code := kpsimProcess(t, "run", "-s", "smoke", "--runs", "2", "--set", "cluster.services=8", "--set", "probes.services=2",
		"-o", filepath.Join(dir, "a.json"))
	require.Equal(t, 0, code, out)
	for _, want := range []string{"kpsim smoke: 2 runs", "each figure: the median over the runs, and their range",
		"run 1 of 2: " + filepath.Join(dir, "a-run1.json"), "results: " + filepath.Join(dir, "a-run1.json") + " " + filepath.Join(dir, "a-run2.json"),
		"kpsim compare " + filepath.Join(dir, "a") + "-run*.json -- OTHER-run*.json",
		"kpsim's proxier on the modeled clock repeats a seed exactly: these runs are copies of one answer"} {
		require.Contains(t, out, want)
	}
	for _, p := range []string{"a-run1.json", "a-run2.json"} {
		f, err := results.Read(filepath.Join(dir, p))
		require.NoError(t, err)
		require.Equal(t, "1", results.Settings(f)["seed"])
	}

	var stdout, stderr bytes.Buffer
	require.Equal(t, 2, run([]string{"run", "-s", "smoke", "--runs", "0"}, &stdout, &stderr))
	require.Contains(t, stderr.String(), "--runs 0: want 1 to 1000 runs")
	require.Equal(t, 2, run([]string{"run", "-s", "smoke", "--runs", "2", "--seeds", "2"}, &stdout, &stderr))
	require.Contains(t, stderr.String(), "give one of them")
	require.Equal(t, 2, run([]string{"run", "-s", "smoke", "--runs", "2", "--state", filepath.Join(dir, "s.json")}, &stdout, &stderr))
}

func TestRunDefaultOutput(t *testing.T) {
	dir := t.TempDir()
	wd, err := os.Getwd()
	require.NoError(t, err)
	require.NoError(t, os.Chdir(dir))
	defer func() { require.NoError(t, os.Chdir(wd)) }()
	var stdout, stderr bytes.Buffer
	code := run([]string{"run", "-s", "smoke", "--set", "cluster.services=4", "--set", "probes.services=1"}, &stdout, &stderr)
	require.Equal(t, 0, code, stderr.String())
	m := regexp.MustCompile(`results: (out/smoke-\d{8}-\d{6}\.json)`).FindStringSubmatch(stdout.String())
	require.NotNil(t, m, stdout.String())
	_, err = results.Read(filepath.Join(dir, m[1]))
	require.NoError(t, err)
}

func TestRunErrors(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	require.NoError(t, os.WriteFile(bad, []byte("name: x\ndescription: y\ntimeline:\n  - sleep: soon\n"), 0o644))
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"run", "-s", bad}, 2, bad + `:4: timeline[0].sleep: must be a duration such as "500ms" or "2m": "soon"`},
		{[]string{"run", "-s", "smoke", "--set", "proxier.ipset=fast"}, 2, `--set proxier.ipset=fast: proxier.ipset: "fast" is not one of exec, restore, netlink`},
		{[]string{"run", "-s", "smoke", "--set", "proxier.ipset"}, 2, "--set proxier.ipset: must be key=value"},
		{[]string{"run", "-s", "nope"}, 2, `scenario "nope": no such file, and not a shipped scenario`},
		{[]string{"run", "-s", "smoke", "--set", "backend=vm"}, 2, `--set backend=vm: backend: "vm" is not one of sim, kernel`},
		{[]string{"run", "-s", "smoke", "extra"}, 2, "unexpected arguments"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			require.Equal(t, tc.code, run(tc.args, &stdout, &stderr))
			require.Contains(t, stderr.String(), tc.want)
		})
	}
}

// TestRunServesMetrics scrapes /metrics while a run is in its final sleep.
func TestRunServesMetrics(t *testing.T) {
	out := filepath.Join(t.TempDir(), "r.json")
	var stdout, stderr lockedBuffer
	done := make(chan int)
	go func() {
		done <- run([]string{"run", "-s", "smoke", "-o", out, "--metrics-addr", "127.0.0.1:0",
			"--set", "cluster.services=4", "--set", "probes.services=1", "--set", "timeline[11].sleep=3s"}, &stdout, &stderr)
	}()
	addr := regexp.MustCompile(`serving metrics on (http://[0-9.:]+/metrics)`)
	var body string
	deadline := time.After(time.Minute)
	for !strings.Contains(body, "kubeproxy_sync_proxy_rules_duration_seconds_bucket") {
		select {
		case code := <-done:
			t.Fatalf("run ended (%d) before metrics were scraped: %s", code, stderr.String())
		case <-deadline:
			t.Fatalf("no metrics: %s", stderr.String())
		case <-time.After(50 * time.Millisecond):
		}
		m := addr.FindStringSubmatch(stderr.String())
		if m == nil {
			continue
		}
		resp, err := http.Get(m[1])
		require.NoError(t, err)
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.NoError(t, err)
		body = string(b)
	}
	require.Contains(t, body, `ip_family="IPv4"`)
	require.Equal(t, 0, <-done, stderr.String())
}

func TestValidateCommand(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	require.NoError(t, os.WriteFile(bad, []byte("name: x\ndescription: y\ncluster: {services: -1}\ntimeline: [createCluster]\n"), 0o644))
	var stdout, stderr bytes.Buffer
	require.Equal(t, 0, run([]string{"validate", "smoke", "scenarios/dual-stack.yaml"}, &stdout, &stderr), stderr.String())
	require.Contains(t, stdout.String(), "smoke: ok: smoke, 20 services")
	require.Contains(t, stdout.String(), "scenarios/dual-stack.yaml: ok: dual-stack")

	stdout.Reset()
	stderr.Reset()
	require.Equal(t, 2, run([]string{"validate", bad, "smoke"}, &stdout, &stderr))
	require.Contains(t, stdout.String(), bad+":3: cluster.services: must not be negative, got -1\n")
	require.Contains(t, stdout.String(), "smoke: ok")
	require.Contains(t, stderr.String(), "1 of 2 scenarios invalid")

	stdout.Reset()
	require.Equal(t, 2, run([]string{"validate", "smoke", "--set", "cluster.services=x"}, &stdout, &stderr))
	require.Contains(t, stdout.String(), `--set cluster.services=x: cluster.services: must be a whole number`)
}

// TestValidateTakesScenarioFlag: validate names scenarios with -s as run
// does (it refused -s as an unknown flag), repeated, beside arguments.
func TestValidateTakesScenarioFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		want []string // in stdout, in this order, or stderr for a usage error
	}{
		{[]string{"-s", "smoke"}, 0, []string{"smoke: ok: smoke, 20 services, 20 endpoint slices, 13 timeline steps"}},
		{[]string{"--scenario", "smoke", "-s", "node-join", "scenarios/dual-stack.yaml"}, 0,
			[]string{"smoke: ok: smoke", "node-join: ok: node-join", "scenarios/dual-stack.yaml: ok: dual-stack"}},
		{[]string{"-s", "smoke", "--set", "cluster.services=x"}, 2, []string{"--set cluster.services=x: cluster.services: must be a whole number"}},
		{nil, 2, []string{"want at least one scenario: -s NAME|FILE or an argument", "See 'kpsim validate --help' for usage."}},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			require.Equal(t, tc.code, run(append([]string{"validate"}, tc.args...), &stdout, &stderr), stderr.String())
			out := stdout.String()
			if len(tc.args) == 0 {
				out = stderr.String()
			}
			at := 0
			for _, w := range tc.want {
				i := strings.Index(out[at:], w)
				require.GreaterOrEqual(t, i, 0, "%q not in (the rest of) %q", w, out)
				at += i + len(w)
			}
		})
	}
}

func TestScenariosCommand(t *testing.T) {
	var stdout, stderr bytes.Buffer
	require.Equal(t, 0, run([]string{"scenarios"}, &stdout, &stderr), stderr.String())
	list, err := scenarios.ShippedScenarios()
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	require.Len(t, lines, len(list))
	for i, s := range list {
		require.True(t, strings.HasPrefix(lines[i], s.Name+" "), lines[i])
		require.Contains(t, lines[i], s.Purpose)
	}
}

func TestBuildInfoFallsBack(t *testing.T) {
	b := buildInfo()
	require.Equal(t, version, b.Version)
	require.NotEmpty(t, b.Commit, "unknown rather than empty when neither -X nor VCS stamping gave one")
}

// TestRunWritesState checks --state: what the dataplane holds at the end of
// the run, in the format `kpsim state --diff` reads.
func TestRunWritesState(t *testing.T) {
	dir := t.TempDir()
	out, dump := filepath.Join(dir, "r.json"), filepath.Join(dir, "state.json")
	var stdout, stderr bytes.Buffer
	code := run([]string{"run", "-s", "smoke", "-o", out, "--state", dump, "--set", "cluster.services=8", "--set", "probes.services=2"}, &stdout, &stderr)
	require.Equal(t, 0, code, stderr.String())

	st, err := state.ReadFile(dump)
	require.NoError(t, err)
	require.Len(t, st.IPSets, 17, "kube-proxy's 17 sets always exist")
	require.NotEmpty(t, st.VirtualServers)
	// Every address bound to kube-ipvs0 serves at least one virtual server,
	// and every ClusterIP entry names one.
	vsAddrs := map[string]bool{}
	for _, vs := range st.VirtualServers {
		vsAddrs[vs.Address] = true
	}
	require.NotEmpty(t, st.Addresses)
	for _, a := range st.Addresses {
		require.True(t, vsAddrs[strings.TrimSuffix(strings.TrimSuffix(a, "/32"), "/128")], "address %s has no virtual server", a)
	}
	for _, set := range st.IPSets {
		if set.Name != "KUBE-CLUSTER-IP" {
			continue
		}
		require.NotEmpty(t, set.Entries)
		for _, e := range set.Entries {
			require.True(t, vsAddrs[strings.Split(e, ",")[0]], "KUBE-CLUSTER-IP entry %s has no virtual server", e)
		}
	}

	stdout.Reset()
	require.Equal(t, 0, run([]string{"state", "--diff", dump, dump}, &stdout, &stderr), stderr.String())
}

// TestRunRefusesMissingImplementation: a kube-proxy release this binary
// does not have is refused before anything runs (on the kernel backend,
// before kpsim re-executes itself; on the sim), naming the binary that has it.
func TestRunRefusesMissingImplementation(t *testing.T) {
	out := filepath.Join(t.TempDir(), "r.json")
	for _, tc := range []struct {
		sets []string
		want string
	}{
		{[]string{"backend=kernel", "proxier.implementation=kube-proxy@v1.30.3"},
			"proxier.implementation kube-proxy@v1.30.3 is not in this kpsim binary, which has kpsim; kube-proxy v1.30.3 runs in bin/kpsim-kube-proxy-v1.30.3 (make kube-proxy RELEASE=v1.30.3), or in bin/kpsim-kube-proxy-v1.30 when upstream/kube-proxy-v1.30 pins it (make kube-proxy)"},
		{[]string{"proxier.implementation=kube-proxy@v1.37.1"},
			"proxier.implementation kube-proxy@v1.37.1 is not in this kpsim binary, which has kpsim; kube-proxy v1.37.1 runs in bin/kpsim-kube-proxy-v1.37.1 (make kube-proxy RELEASE=v1.37.1), or in bin/kpsim-kube-proxy-v1.37 when upstream/kube-proxy-v1.37 pins it (make kube-proxy)"},
	} {
		args := []string{"run", "-s", "smoke", "-o", out}
		for _, s := range tc.sets {
			args = append(args, "--set", s)
		}
		var stdout, stderr bytes.Buffer
		require.Equal(t, 2, run(args, &stdout, &stderr), stderr.String())
		require.Contains(t, stderr.String(), tc.want)
		require.NoFileExists(t, out)
	}
}
