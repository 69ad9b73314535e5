// Package e2e runs kube-proxy releases as the proxier under test on a real
// kernel, next to kpsim's own proxier, with real traffic: the VM that
// `make test-kernel` boots runs it (kernel/vm/tests.sh), or any machine
// whose kernel has IPVS, as root. It needs KPSIM_E2E_BIN_DIR naming a
// folder with the binaries `make kube-proxy` builds and kpsim's own:
// kpsim, kpsim-kube-proxy-v1.30, -v1.34 and -v1.37; otherwise it skips and
// says why. KPSIM_E2E_OUT, when set, keeps the results files, comparisons
// and reports there.
package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kpsim/kpsim/dataplane"
	"github.com/kpsim/kpsim/dataplane/state"
	"github.com/kpsim/kpsim/kernel"
	"github.com/kpsim/kpsim/kernel/kerneltest"
	"github.com/kpsim/kpsim/record"
	"github.com/kpsim/kpsim/results"
)

// proxier is one proxier under test: the binary that has it and its name.
type proxier struct {
	label string // for files and logs
	bin   string // in KPSIM_E2E_BIN_DIR
	impl  string // proxier.implementation
}

// The releases the modules under upstream/ pin.
var (
	kpsim = proxier{"kpsim", "kpsim", "kpsim"}
	v1_30 = proxier{"kube-proxy-v1.30.3", "kpsim-kube-proxy-v1.30", "kube-proxy@v1.30.3"}
	v1_34 = proxier{"kube-proxy-v1.34.3", "kpsim-kube-proxy-v1.34", "kube-proxy@v1.34.3"}
	v1_37 = proxier{"kube-proxy-v1.37.1", "kpsim-kube-proxy-v1.37", "kube-proxy@v1.37.1"}
)

const binDirEnv = "KPSIM_E2E_BIN_DIR"

// binDir is where the binaries are, or the test skips and says why
// (needs: what the runs need of the kernel; kernel.Needs{} is IPVS mode).
func binDir(t *testing.T, needs kernel.Needs) string {
	t.Helper()
	return kerneltest.Bin(t, binDirEnv, "the folder of kpsim and the kpsim-kube-proxy-* binaries", needs)
}

// outDir keeps what the runs wrote: KPSIM_E2E_OUT, or the test's own.
func outDir(t *testing.T) string {
	if d := os.Getenv("KPSIM_E2E_OUT"); d != "" {
		require.NoError(t, os.MkdirAll(d, 0o755))
		return d
	}
	return t.TempDir()
}

// kpsimCmd runs a kpsim binary; a verdict (exit 1) is an outcome, not a failure.
func kpsimCmd(t *testing.T, bin string, okCodes []int, args ...string) string {
	t.Helper()
	start := time.Now()
	out, err := exec.Command(bin, args...).CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else {
		require.NoError(t, err)
	}
	t.Logf("%s %s (%s, exit %d):\n%s", filepath.Base(bin), strings.Join(args, " "), time.Since(start).Round(time.Millisecond), code, out)
	require.Contains(t, okCodes, code, "exit status of %s %s", filepath.Base(bin), strings.Join(args, " "))
	return string(out)
}

// calibrate has p's binary calibrate this kernel (--entries entries, and
// flags) into out/NAME-profile.json, a profile named calibrated-NAME whose
// source says where (KPSIM_E2E_WHERE), and returns the file's path.
func calibrate(t *testing.T, dir string, p proxier, out, name string, entries int, flags ...string) string {
	t.Helper()
	where := os.Getenv("KPSIM_E2E_WHERE")
	if where == "" {
		where = "the end-to-end test's machine"
	}
	profile := filepath.Join(out, name+"-profile.json")
	args := append([]string{"calibrate", "--name", "calibrated-" + name, "--where", where, "--entries", strconv.Itoa(entries), "-o", profile}, flags...)
	kpsimCmd(t, filepath.Join(dir, p.bin), []int{0}, args...)
	return profile
}

// run runs a scenario on p and returns its results file, written to out.
func run(t *testing.T, dir string, p proxier, scenario, out string, extra ...string) *record.File {
	t.Helper()
	args := []string{"run", "-s", scenario, "-o", out, "--set", "proxier.implementation=" + p.impl}
	kpsimCmd(t, filepath.Join(dir, p.bin), []int{0}, append(args, extra...)...)
	f, err := results.Read(out)
	require.NoError(t, err)
	require.Empty(t, f.Error)
	require.Equal(t, p.impl, f.Proxier)
	fmt.Println(summary(p.label, f))
	return f
}

// summary is a run's disruption and every sync on lines of their own: the
// figures the VM log reports per proxier.
func summary(label string, f *record.File) string {
	var b strings.Builder
	d := f.Summary.Disruption
	fmt.Fprintf(&b, "E2E %s %s: attempts=%d failed=%d services-affected=%d disruption=%.2fs longest-gap=%.2fs syncs=%d p50=%s max=%s",
		results.ScenarioName(f), label, d.Attempts, d.FailedAttempts, d.ServicesAffected, d.Seconds, d.LongestGap,
		f.Summary.Syncs, results.FormatSeconds(f.Summary.Sync.P50), results.FormatSeconds(f.Summary.Sync.Max))
	for _, s := range f.Syncs {
		fmt.Fprintf(&b, "\n  SYNC %s proxier %d %s #%d %-8s %4d services %8s %v", label, s.Proxier, s.Family, s.Seq, s.Trigger, s.Services,
			results.FormatSeconds(s.Seconds), s.Ops)
		if s.Error != "" {
			fmt.Fprintf(&b, " error: %s", s.Error)
		}
	}
	return b.String()
}

// TestKubeProxyRestart is the end-to-end check: the restart whose
// handlers have passed on 36% of the initial list when the first sync runs,
// with real traffic, on kpsim's proxier and on two releases: v1.30.3 (before
// the initial-sync fix) breaks connections, v1.37.1 and kpsim's proxier
// none. The comparison and the report list the three side by side.
func TestKubeProxyRestart(t *testing.T) {
	dir := binDir(t, kernel.Needs{})
	out := outDir(t)
	const scenario = "../../kernel/testbed/testdata/e2e-restart-stale.yaml"
	files := map[proxier]string{}
	runs := map[proxier]*record.File{}
	for _, p := range []proxier{kpsim, v1_30, v1_37} {
		files[p] = filepath.Join(out, "restart-"+p.label+".json")
		runs[p] = run(t, dir, p, scenario, files[p])
		require.NotNil(t, runs[p].Probes)
		require.Positive(t, runs[p].Probes.Attempts)
	}
	require.Zero(t, runs[kpsim].Summary.Disruption.FailedAttempts, "kpsim's proxier: %+v", runs[kpsim].Probes.Failures)
	require.Zero(t, runs[v1_37].Summary.Disruption.FailedAttempts, "v1.37.1 waits for its handlers: %+v", runs[v1_37].Probes.Failures)
	old := runs[v1_30]
	require.Positive(t, old.Summary.Disruption.FailedAttempts, "v1.30.3's first sync after the restart takes what it has not heard of for stale")
	restart := kerneltest.StepStart(t, old, "restart-proxier")
	for _, f := range old.Probes.Failures {
		require.False(t, f.Time.Before(restart), "failure at %s before the restart at %s", f.Time, restart)
	}

	// kpsim compare holds each release against kpsim's proxier (a
	// different proxier: --allow-different; a regression is an answer).
	kp := filepath.Join(dir, kpsim.bin)
	for _, p := range []proxier{v1_30, v1_37} {
		cmp := filepath.Join(out, "compare-kpsim-"+p.label+".txt")
		kpsimCmd(t, kp, []int{0, 1}, "compare", "--allow-different", "--latency", "report", "-o", cmp, files[kpsim], files[p])
		b, err := os.ReadFile(cmp)
		require.NoError(t, err)
		fmt.Printf("COMPARE kpsim vs %s\n%s", p.label, b)
		require.Contains(t, string(b), "(proxier under test): kpsim in restart-kpsim.json; "+p.impl+" in restart-"+p.label+".json")
	}
	md := filepath.Join(out, "restart-report.md")
	all := []string{files[kpsim], files[v1_30], files[v1_37]}
	kpsimCmd(t, kp, []int{0}, append([]string{"report", "--format", "md", "-o", md}, all...)...)
	kpsimCmd(t, kp, []int{0}, append([]string{"report", "-o", filepath.Join(out, "restart-report.html")}, all...)...)
	b, err := os.ReadFile(md)
	require.NoError(t, err)
	fmt.Printf("REPORT\n%s", b)
	for _, p := range []proxier{kpsim, v1_30, v1_37} {
		require.Contains(t, string(b), p.impl, "the report lists every proxier")
	}
}

// TestKubeProxyDrift is the regression between releases: virtual servers
// deleted behind the proxier's back, with no API change after. kpsim's
// proxier and v1.37.1 repair them at their periodic sync (syncPeriod 5s);
// v1.34.3 resyncs once an hour, so its probes fail until the run ends.
func TestKubeProxyDrift(t *testing.T) {
	dir := binDir(t, kernel.Needs{})
	out := outDir(t)
	for _, tc := range []struct {
		p        proxier
		repaired bool
	}{{kpsim, true}, {v1_34, false}, {v1_37, true}} {
		f := run(t, dir, tc.p, "testdata/drift.yaml", filepath.Join(out, "drift-"+tc.p.label+".json"))
		// probes off is the last step: a window ending within its last few
		// rounds is one that never closed.
		drift, end := kerneltest.StepStart(t, f, "kernel-drift"), f.Steps[len(f.Steps)-1].Start
		interval := time.Duration(f.Probes.Interval * float64(time.Second))
		// The drift's windows are those still open at the drift (an attempt
		// that began before it may fail after it). One that closed before
		// it is not the drift's doing: v1.34.3 had a single attempt refused
		// just after its first sync in two CI boots of the VM. It is
		// printed, not held: this test asks about the repair.
		var repair time.Duration
		open, broken := false, 0
		for _, w := range f.Summary.Disruption.Windows {
			if w.End.Before(drift) {
				fmt.Printf("DRIFT %s: %s failed %d times before the drift, from %s to %s before it\n",
					tc.p.label, w.Service, w.Failures, drift.Sub(w.Start).Round(time.Millisecond), drift.Sub(w.End).Round(time.Millisecond))
				continue
			}
			broken++
			repair = max(repair, w.End.Sub(drift))
			if w.End.After(end.Add(-5 * interval)) {
				open = true
			}
		}
		require.NotZero(t, broken, "%s: the drift broke the probed services", tc.p.label)
		if tc.repaired {
			require.False(t, open, "%s: a service still failed as the run ended", tc.p.label)
			fmt.Printf("DRIFT %s: repaired %s after the drift (last failure)\n", tc.p.label, repair.Round(time.Millisecond))
		} else {
			require.True(t, open, "%s: repaired within the run", tc.p.label)
			fmt.Printf("DRIFT %s: not repaired when the run ended, %s after the drift\n", tc.p.label, end.Sub(drift).Round(time.Millisecond))
		}
	}
}

// TestKubeProxyParity: kpsim's proxier and v1.37.1 on the same objects, each
// in a run of its own (its own namespaces), program the same state: the
// virtual servers, ipsets, kube-ipvs0 addresses and iptables rules each
// run read back from the real kernel.
func TestKubeProxyParity(t *testing.T) {
	dir := binDir(t, kernel.Needs{})
	out := outDir(t)
	var states []string
	for _, p := range []proxier{kpsim, v1_37} {
		st := filepath.Join(out, "parity-state-"+p.label+".json")
		f := run(t, dir, p, "testdata/parity.yaml", filepath.Join(out, "parity-"+p.label+".json"), "--state", st)
		require.Zero(t, f.Summary.FailedSyncs)
		states = append(states, st)
	}
	diff := kpsimCmd(t, filepath.Join(dir, kpsim.bin), []int{0, 1}, "state", "--diff", states[0], states[1])
	fmt.Printf("PARITY kpsim vs %s: %s\n", v1_37.label, strings.TrimSpace(diff))
	a, err := state.ReadFile(states[0])
	require.NoError(t, err)
	b, err := state.ReadFile(states[1])
	require.NoError(t, err)
	require.Empty(t, state.Diff(a, b), "kpsim state --diff")
	require.NotEmpty(t, a.VirtualServers)
	require.Contains(t, a.IPSets[0].Name, "KUBE-")
	require.NotEmpty(t, a.IPTables[dataplane.IPv4].NAT)
}

// TestKubeProxyAgreement holds the sim against this kernel for each
// release: the same scenario on the kernel backend and on the in-memory
// kernel (modeled clock, priced by a profile calibrated on this kernel in
// this boot). Both must end in the same state (read back from each
// kernel), and their first syncs must have issued the same operations of
// every kind (a release that synced before its handlers heard the whole
// initial list is run again). The first sync's modeled/measured ratio is
// reported against 0.75-1.25, not held: calibrations in one boot of the VM
// have disagreed by up to 2.3x on one operation (kernel/testbed's
// TestE2EScale). A release's sync is one block: there are no phases to
// compare.
func TestKubeProxyAgreement(t *testing.T) {
	const kernelTries = 3
	dir := binDir(t, kernel.Needs{})
	out := outDir(t)
	profile := calibrate(t, dir, kpsim, out, "agreement", 1000, "--skip", "nftables,iptables-mode") // IPVS mode only
	const scenario = "testdata/agreement.yaml"
	for _, p := range []proxier{v1_30, v1_34, v1_37} {
		kernState, simState := filepath.Join(out, "agreement-state-kernel-"+p.label+".json"), filepath.Join(out, "agreement-state-sim-"+p.label+".json")
		sim := run(t, dir, p, scenario, filepath.Join(out, "agreement-sim-"+p.label+".json"), "--state", simState,
			"--set", "backend=sim", "--set", "sim.profile="+profile)
		require.Equal(t, record.ClockModeled, sim.Clock)
		// v1.30.3 may sync before its handlers have heard the whole initial
		// list (the bug TestKubeProxyRestart shows; on the modeled clock the
		// list arrives at one instant): a kernel run whose first sync knew
		// fewer services or endpoints than the sim's is run again, up to
		// kernelTries times (a run in the VM knew all 300 services and 290
		// of 706 endpoints).
		var kern *record.File
		for try := 1; ; try++ {
			kern = run(t, dir, p, scenario, filepath.Join(out, "agreement-kernel-"+p.label+".json"), "--state", kernState)
			k, m := kern.Syncs[0], sim.Syncs[0]
			if k.Services == m.Services && k.Endpoints == m.Endpoints || try == kernelTries {
				break
			}
			fmt.Printf("AGREEMENT %s: the kernel's first sync knew %d of %d services and %d of %d endpoints; run again\n", p.label, k.Services, m.Services, k.Endpoints, m.Endpoints)
		}

		a, err := state.ReadFile(simState)
		require.NoError(t, err)
		b, err := state.ReadFile(kernState)
		require.NoError(t, err)
		require.Empty(t, state.Diff(a, b), "%s: state of the sim (A) and of the kernel (B)", p.label)

		ks, ss := kern.Syncs[0], sim.Syncs[0]
		require.Equal(t, ks.Services, ss.Services, "%s: the first syncs knew the same services", p.label)
		fmt.Printf("AGREEMENT-OPS %s kernel %v\nAGREEMENT-OPS %s sim    %v\n", p.label, ks.Ops, p.label, ss.Ops)
		require.Equal(t, ks.Ops, ss.Ops, "%s: the first sync's operations by kind, kernel vs sim", p.label)
		ratio := ss.Seconds / ks.Seconds
		verdict := "within"
		if ratio < 0.75 || ratio > 1.25 {
			verdict = "OUTSIDE"
		}
		fmt.Printf("AGREEMENT %s first sync: modeled %s (kernel part %s, its own %s), measured %s: ratio %.2f, %s 0.75-1.25\n", p.label,
			results.FormatSeconds(ss.Seconds), results.FormatSeconds(ss.KernelSeconds), results.FormatSeconds(ss.ProxierSeconds),
			results.FormatSeconds(ks.Seconds), ratio, verdict)
	}
}
