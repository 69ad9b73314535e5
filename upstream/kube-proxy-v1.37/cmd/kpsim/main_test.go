package main

import (
	"testing"

	kubeproxy "github.com/kpsim/kpsim/upstream/kube-proxy"
	"github.com/kpsim/kpsim/upstream/kube-proxy/kubeproxytest"
)

// TestRestartLagging: v1.37.1 waits for its handlers (kubernetes PR
// #126532) before its first sync after a restart.
func TestRestartLagging(t *testing.T) {
	kubeproxytest.RestartLagging(t, kubeproxy.Built, false)
}

// TestRestartOnSim: the same release on the in-memory kernel, on the
// modeled clock: its own code programs it, its runner runs on modeled time.
func TestRestartOnSim(t *testing.T) {
	kubeproxytest.RestartOnSim(t, kubeproxy.Built, false)
}

// TestFitRelease: kpsim calibrate in this binary prices v1.37.1's own work.
func TestFitRelease(t *testing.T) {
	kubeproxytest.FitRelease(t, kubeproxy.Built)
}

// TestNFTablesOnSim: v1.37.1 in nftables mode on the in-memory kernel.
func TestNFTablesOnSim(t *testing.T) {
	kubeproxytest.NFTablesOnSim(t, kubeproxy.Built)
}

// TestIPTablesOnSim: v1.37.1 in iptables mode on the in-memory kernel.
func TestIPTablesOnSim(t *testing.T) {
	kubeproxytest.IPTablesOnSim(t, kubeproxy.Built)
}

// TestIPTablesOnKernel: v1.37.1 in iptables mode on this machine's kernel,
// with real traffic, in a namespace of its own, against the sim.
func TestIPTablesOnKernel(t *testing.T) {
	kubeproxytest.IPTablesOnKernel(t, kubeproxy.Built)
}

// TestNFTablesOnTheModeledClock: v1.37.1 in nftables mode decides by the
// modeled clock: it deletes the chains it flushed a second later and
// resyncs in full once an hour of modeled time.
func TestNFTablesOnTheModeledClock(t *testing.T) {
	kubeproxytest.NFTablesOnTheModeledClock(t, kubeproxy.Built)
}

// TestNFTablesOnKernel: v1.37.1 in nftables mode on this machine's kernel,
// with real traffic, in a namespace of its own.
func TestNFTablesOnKernel(t *testing.T) {
	kubeproxytest.NFTablesOnKernel(t, kubeproxy.Built)
}

// TestSwitchToNFTablesOnSim: v1.37.1 switched from IPVS mode to nftables
// mode on the in-memory kernel (the shipped migrate-to-nftables, reduced).
func TestSwitchToNFTablesOnSim(t *testing.T) {
	kubeproxytest.SwitchToNFTablesOnSim(t, kubeproxy.Built)
}

// TestDeadlineOnSim: v1.37.1's first sync, in each mode, cut by
// waitSynced's deadline is recorded as stopped there, not as finished.
func TestDeadlineOnSim(t *testing.T) {
	for _, mode := range []string{"ipvs", "nftables"} {
		t.Run(mode, func(t *testing.T) { kubeproxytest.DeadlineOnSim(t, kubeproxy.Built, mode) })
	}
}

// TestFullIPSetOnSim: v1.37.1 past its ipsets' maxelem syncs without the
// entries that do not fit, and the records count them.
func TestFullIPSetOnSim(t *testing.T) {
	kubeproxytest.FullIPSetOnSim(t, kubeproxy.Built)
}

// TestIssueShapesOnSim: v1.37.1 in nftables mode runs the shipped clusters
// of kubernetes #139513 and #135639, reduced, to their end.
func TestIssueShapesOnSim(t *testing.T) {
	kubeproxytest.IssueShapesOnSim(t, kubeproxy.Built)
}

// BenchmarkNFTablesGrowth: v1.37.1's nftables mode on the in-memory kernel
// at 10,000, 50,000 and 100,000 services (kubeproxytest.NFTablesGrowth).
func BenchmarkNFTablesGrowth(b *testing.B) {
	kubeproxytest.NFTablesGrowth(b, kubeproxy.Built)
}
