package e2e

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kpsim/kpsim/kernel"
	"github.com/kpsim/kpsim/kernel/kerneltest"
)

// sideBySideScenario is kernel/testbed's scale scenario (5,000 ClusterIP
// services, 3 endpoints each: a first sync, ten EndpointSlice changes, a
// periodic full sync, a restart), with deadlines a release's IPVS mode
// meets under emulation: its first sync there took 295 s, past the
// scenario's 5 minutes.
const sideBySideScenario = "../../kernel/testbed/testdata/e2e-scale.yaml"

var sideBySideDeadlines = []string{
	"--set", "timeline[2].waitSynced.timeout=30m",
	"--set", "timeline[4].waitSynced.timeout=10m",
	"--set", "timeline[7].waitSynced.timeout=30m",
}

// TestSideBySide: kpsim's proxier and kube-proxy v1.37.1 in IPVS mode on
// the same 5,000-service scenario on this kernel, in one boot: kpsim, the
// release, kpsim again (the machine's speed moves from minute to minute;
// the two kpsim runs bracket the release's). It prints, per figure, each
// run's time and the release's over the mean of kpsim's two. Not a check
// CI runs (make side-by-side runs it in the VM): the figures are reported,
// and only a run that lacks a figure, or a periodic or restart sync that
// wrote, fails it.
func TestSideBySide(t *testing.T) {
	dir := binDir(t, kernel.Needs{})
	out := outDir(t)
	var kinds []kerneltest.SyncKinds
	var labels []string
	for i, p := range []proxier{kpsim, v1_37, kpsim} {
		label := fmt.Sprintf("%s-%d", p.label, i+1)
		f := run(t, dir, p, sideBySideScenario, filepath.Join(out, "side-by-side-"+label+".json"), sideBySideDeadlines...)
		k := kerneltest.Kinds(t, f)
		require.Zero(t, k.Periodic.Ops.Writes(), "%s: a periodic full sync with no change: %s", label, k.Periodic.Ops)
		require.Zero(t, k.Restart.Ops.Writes(), "%s: a restart onto matching state: %s", label, k.Restart.Ops)
		kinds = append(kinds, k)
		labels = append(labels, label)
	}
	fmt.Printf("SIDE-BY-SIDE %-24s %12s %12s %12s  %s\n", "figure", labels[0], labels[1], labels[2], v1_37.label+"/kpsim")
	for _, fig := range []struct {
		name string
		of   func(kerneltest.SyncKinds) time.Duration
	}{
		{"first sync", func(k kerneltest.SyncKinds) time.Duration { return kerneltest.Seconds(k.First.Seconds) }},
		{"ten changes (slowest sync)", kerneltest.SyncKinds.SlowestChange},
		{"periodic sync, 0 writes", func(k kerneltest.SyncKinds) time.Duration { return kerneltest.Seconds(k.Periodic.Seconds) }},
		{"restart, 0 writes", func(k kerneltest.SyncKinds) time.Duration { return kerneltest.Seconds(k.Restart.Seconds) }},
	} {
		var cells []string
		for _, k := range kinds {
			cells = append(cells, fig.of(k).Round(time.Millisecond).String())
		}
		kpsimMean := (fig.of(kinds[0]) + fig.of(kinds[2])) / 2
		fmt.Printf("SIDE-BY-SIDE %-24s %12s %12s %12s  %.1f\n", fig.name, cells[0], cells[1], cells[2],
			float64(fig.of(kinds[1]))/float64(kpsimMean))
	}
	fmt.Printf("SIDE-BY-SIDE ten changes: the syncs that wrote after them, each run: %s\n", strings.Join(changeSyncs(kinds), "; "))
}

// changeSyncs lists each run's syncs after the changes, in milliseconds.
func changeSyncs(kinds []kerneltest.SyncKinds) []string {
	var out []string
	for _, k := range kinds {
		var each []string
		for _, c := range k.Changes {
			each = append(each, fmt.Sprintf("%.1fms", c.Seconds*1e3))
		}
		out = append(out, strings.Join(each, " "))
	}
	return out
}
