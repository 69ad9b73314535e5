package testbed_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kpsim/kpsim/dataplane"
	"github.com/kpsim/kpsim/dataplane/state"
	"github.com/kpsim/kpsim/kernel"
	"github.com/kpsim/kpsim/kernel/kerneltest"
	"github.com/kpsim/kpsim/kernel/netns"
	"github.com/kpsim/kpsim/kernel/netns/netnstest"
	"github.com/kpsim/kpsim/record"
	"github.com/kpsim/kpsim/results"
)

// The end-to-end tests run a kpsim binary on a kernel that can run kernel
// scenarios: the VM that `make test-kernel` boots (or the Vagrant VM). They
// need root, KPSIM_E2E_BIN naming the kpsim binary, and a kernel whose
// Detect().Missing("kernel") is empty; otherwise they skip and say why.
const e2eBinEnv = "KPSIM_E2E_BIN"

func e2eKpsim(t *testing.T) string {
	t.Helper()
	return kerneltest.Bin(t, e2eBinEnv, "a kpsim binary to run the end-to-end scenarios", kernel.Needs{})
}

// kpsimRun runs one scenario and returns its results file; sets are --set
// overrides, or flags of their own ("--state=FILE").
func kpsimRun(t *testing.T, bin, scenario string, sets ...string) *record.File {
	t.Helper()
	out := filepath.Join(t.TempDir(), "run.json")
	args := []string{"run", "-s", scenario, "-o", out}
	for _, s := range sets {
		if strings.HasPrefix(s, "--") {
			args = append(args, s) // a flag of its own
			continue
		}
		args = append(args, "--set", s)
	}
	start := time.Now()
	cmd := exec.Command(bin, args...)
	log, err := cmd.CombinedOutput()
	t.Logf("kpsim %s (%s):\n%s", strings.Join(args, " "), time.Since(start).Round(time.Millisecond), log)
	require.NoError(t, err)
	f, err := results.Read(out)
	require.NoError(t, err)
	require.Empty(t, f.Error)
	return f
}

// disruptionLine is a run's disruption on one line, then one line per
// window: the service, the step it began in and its failures' outcomes.
func disruptionLine(name string, f *record.File) string {
	d := f.Summary.Disruption
	var ws strings.Builder
	for _, w := range d.Windows {
		outcomes := map[string]int{}
		for _, fl := range f.Probes.Failures {
			if fl.Target == w.Target && !fl.Time.Before(w.Start) && !fl.Time.After(w.End) {
				outcomes[fl.Outcome]++
			}
		}
		step := stepOf(f, w.Start)
		label := ""
		if step >= 0 && step < len(f.Steps) {
			label = f.Steps[step].Label
		}
		fmt.Fprintf(&ws, "\n  window %s (%s): step %d %q, %d failures %v, %.2fs",
			w.Service, f.Probes.Targets[w.Target].Kind, step, label, w.Failures, outcomes, w.End.Sub(w.Start).Seconds())
	}
	return fmt.Sprintf("E2E %s: backend=%s basis=%s attempts=%d failed=%d services-affected=%d disruption=%.2fs longest-gap=%.2fs syncs=%d",
		name, f.Backend, d.Basis, d.Attempts, d.FailedAttempts, d.ServicesAffected, d.Seconds, d.LongestGap, f.Summary.Syncs) + ws.String()
}

// TestE2ERestartStale is the end-to-end check: a restart with
// lagging handlers is harmless with kpsim's defaults and breaks connections
// with the legacy initial sync and one ipset process per entry.
func TestE2ERestartStale(t *testing.T) {
	bin := e2eKpsim(t)
	const scenario = "testdata/e2e-restart-stale.yaml"

	def := kpsimRun(t, bin, scenario)
	fmt.Println(disruptionLine("defaults", def))
	require.NotNil(t, def.Probes)
	require.Equal(t, record.Measured, def.Probes.Basis)
	require.Positive(t, def.Probes.Attempts)
	require.Zero(t, def.Summary.Disruption.FailedAttempts, "failures with kpsim's defaults: %+v", def.Probes.Failures)

	legacy := kpsimRun(t, bin, scenario, "proxier.initialSync=legacy", "proxier.ipset=exec")
	fmt.Println(disruptionLine("legacy+exec", legacy))
	require.NotNil(t, legacy.Probes)
	require.Positive(t, legacy.Summary.Disruption.FailedAttempts, "the legacy initial sync must break connections")
	// Every failure happens after the restart began.
	restart := kerneltest.StepStart(t, legacy, "restart-proxier")
	for _, f := range legacy.Probes.Failures {
		require.False(t, f.Time.Before(restart), "failure at %s before the restart at %s", f.Time, restart)
	}
}

// stepOf returns the index of the step during which t fell.
func stepOf(f *record.File, t time.Time) int {
	for i := len(f.Steps) - 1; i >= 0; i-- {
		if !t.Before(f.Steps[i].Start) {
			return f.Steps[i].Index
		}
	}
	return -1
}

// affected maps each disrupted service to the steps its windows overlap.
// A window no longer than the proxier's minSyncPeriod is left out: it is
// probes that raced an API change the proxier was still waiting to sync
// (an endpoint gone from the API but not yet from IPVS and conntrack, which
// a UDP client keeping its source port meets on both kernels), and two runs
// whose clocks differ (the sim does not sleep its modeled kernel time)
// cannot be expected to lose the same races.
func affected(f *record.File, minSyncPeriod time.Duration) map[string][]int {
	out := map[string][]int{}
	for _, w := range f.Summary.Disruption.Windows {
		if w.Failures < 2 || w.End.Sub(w.Start) <= minSyncPeriod {
			continue
		}
		for s := stepOf(f, w.Start); s >= 0 && s <= stepOf(f, w.End); s++ {
			if !containsInt(out[w.Service], s) {
				out[w.Service] = append(out[w.Service], s)
			}
		}
	}
	for _, v := range out {
		sort.Ints(v)
	}
	return out
}

func containsInt(xs []int, x int) bool {
	for _, y := range xs {
		if x == y {
			return true
		}
	}
	return false
}

// TestE2ESmokeAgreement runs the smoke scenario on the in-memory kernel and
// on this kernel: the modeled and the measured disruption must name the
// same services, and each service's windows must overlap in the timeline
// (the same steps; the two runs' clocks differ, since the sim does not
// sleep its modeled kernel time); both kernels must end in the same state,
// and have counted the same operations of every kind that counts objects,
// but for objects the kernel's syncs saw come and go (below).
func TestE2ESmokeAgreement(t *testing.T) {
	bin := e2eKpsim(t)
	dir := t.TempDir()
	simState, kernState := filepath.Join(dir, "sim-state.json"), filepath.Join(dir, "kernel-state.json")
	simRun := kpsimRun(t, bin, "smoke", "backend=sim", "--state="+simState)
	kernRun := kpsimRun(t, bin, "smoke", "backend=kernel", "--state="+kernState)
	fmt.Println(disruptionLine("smoke-sim", simRun))
	fmt.Println(disruptionLine("smoke-kernel", kernRun))
	require.Equal(t, record.Modeled, simRun.Probes.Basis)
	require.Equal(t, record.Measured, kernRun.Probes.Basis)
	require.Equal(t, len(simRun.Probes.Targets), len(kernRun.Probes.Targets), "both runs probe the same targets")
	// smoke's minSyncPeriod.
	const minSync = 100 * time.Millisecond
	simAff, kernAff := affected(simRun, minSync), affected(kernRun, minSync)
	require.Equal(t, keys(simAff), keys(kernAff), "services affected: modeled vs measured")
	for svc, steps := range simAff {
		require.NotEmpty(t, intersect(steps, kernAff[svc]), "%s: modeled windows in steps %v, measured in %v", svc, steps, kernAff[svc])
	}

	// The same state, read back from each kernel, and the same operations.
	a, err := state.ReadFile(simState)
	require.NoError(t, err)
	b, err := state.ReadFile(kernState)
	require.NoError(t, err)
	require.Empty(t, state.Diff(a, b), "state of the sim (A) and of the kernel (B) after smoke")
	simOps, kernOps := runOps(simRun), runOps(kernRun)
	fmt.Printf("OPS smoke sim    %s\nOPS smoke kernel %s\n", simOps, kernOps)
	// An iptables-restore is one per sync whose rules changed, its bytes the
	// whole ruleset: how many follows from how a step's API writes fall into
	// syncs. On the modeled clock a step's writes land at one instant and in
	// one sync; on the wall clock a sync may run between two of them, and if
	// the rules it writes differ (a set the first deletions emptied drops
	// its rules), it restores once more. Measured in the VM: 3 or 4 restores
	// where the sim issues 2. Every other kind counts objects, the same
	// whatever the batching, and the rules both kernels end with are the same
	// (the state diff above).
	for _, op := range []dataplane.Op{dataplane.OpIPTablesRestore, dataplane.OpIPTablesRestoreBytes} {
		require.GreaterOrEqual(t, kernOps[op], simOps[op], "%s: the kernel restores at least what the sim does", op)
		simOps[op], kernOps[op] = 0, 0
	}
	// A real server removed while it still has connections is drained
	// (graceful termination): the proxier lists the virtual server's real
	// servers again at each retry and deletes once they have none. Real
	// probe connections linger in the kernel's IPVS table by its own
	// timers, the sim's by its model, so the kernel may take more retries:
	// measured in the VM, 56, 62 and 68 deletes where the sim issues 56 (the
	// same state at the end).
	require.GreaterOrEqual(t, kernOps[dataplane.OpIPVSDestinationList], simOps[dataplane.OpIPVSDestinationList], "the kernel drains at least what the sim does")
	simOps[dataplane.OpIPVSDestinationList], kernOps[dataplane.OpIPVSDestinationList] = 0, 0
	// And the churn's endpoints come and go on the wall clock: a sync that
	// runs between the write adding an endpoint and the one removing it
	// programs an object the sim's syncs, at the churn's modeled instants,
	// never see, and removes it at the next. Measured in the VM: 2 ipset
	// entries and 1 real server more added, and as many more removed. So
	// the kernel adds at least what the sim does, and removes at least as
	// many more as it adds.
	for _, p := range [][2]dataplane.Op{{dataplane.OpIPSetAdd, dataplane.OpIPSetDel}, {dataplane.OpIPVSDestinationAdd, dataplane.OpIPVSDestinationDelete}} {
		added, removed := kernOps[p[0]]-simOps[p[0]], kernOps[p[1]]-simOps[p[1]]
		require.GreaterOrEqual(t, added, int64(0), "%s: the kernel adds at least what the sim does", p[0])
		require.GreaterOrEqual(t, removed, added, "%s: as many more removed (%s) as added", p[0], p[1])
		for _, op := range p {
			simOps[op], kernOps[op] = 0, 0
		}
	}
	require.Equal(t, simOps, kernOps, "kernel operations by kind over the run, sim vs kernel, restores and drain retries aside")
}

// runOps sums a run's kernel operations by kind over every sync.
func runOps(f *record.File) dataplane.Ops {
	var ops dataplane.Ops
	for _, s := range f.Syncs {
		ops.Add(&s.Ops)
	}
	return ops
}

func keys(m map[string][]int) []string {
	out := []string{}
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func intersect(a, b []int) []int {
	var out []int
	for _, x := range a {
		if containsInt(b, x) {
			out = append(out, x)
		}
	}
	return out
}

// TestE2EHostUntouchedByRun is the host-untouched check on a kernel that
// runs whole scenarios: one kernel run to the end and one interrupted with
// SIGINT mid-run leave the namespace kpsim was started in exactly as it was.
func TestE2EHostUntouchedByRun(t *testing.T) {
	bin := e2eKpsim(t)
	netnstest.RequireHostTools(t)
	const scenario = "testdata/e2e-restart-stale.yaml"
	before := netnstest.HostSnapshot(t)
	kpsimRun(t, bin, scenario)
	require.Equal(t, before, netnstest.HostSnapshot(t), "after a completed kernel run")

	out := filepath.Join(t.TempDir(), "interrupted.json")
	// The last sleep is long, so the interrupt lands mid-run whatever the
	// machine's speed.
	cmd := exec.Command(bin, "run", "-s", scenario, "-o", out, "--set", "timeline[7]={sleep: 10m}")
	var log strings.Builder
	cmd.Stdout, cmd.Stderr = &log, &log
	require.NoError(t, cmd.Start())
	// Mid-run: the run's namespaces exist, then probes have had time to start.
	deadline := time.Now().Add(2 * time.Minute)
	for {
		ns, err := netns.List(0)
		require.NoError(t, err)
		if len(ns) > 0 {
			break
		}
		require.True(t, time.Now().Before(deadline), "the run never created its namespaces:\n%s", log.String())
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(5 * time.Second)
	require.NoError(t, cmd.Process.Signal(os.Interrupt))
	err := cmd.Wait()
	t.Logf("interrupted run:\n%s", log.String())
	require.Error(t, err, "an interrupted run does not succeed")
	f, err := results.Read(out)
	require.NoError(t, err, "the interrupted run still writes its results")
	require.True(t, f.Interrupted)
	require.Equal(t, before, netnstest.HostSnapshot(t), "after an interrupted kernel run")
	left, err := netns.List(0)
	require.NoError(t, err)
	require.Empty(t, left)
}
