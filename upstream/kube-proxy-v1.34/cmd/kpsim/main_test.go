package main

import (
	"testing"

	kubeproxy "github.com/kpsim/kpsim/upstream/kube-proxy"
	"github.com/kpsim/kpsim/upstream/kube-proxy/kubeproxytest"
)

// TestRestartLagging: v1.34.3 waits for its handlers (kubernetes PR
// #126532) before its first sync after a restart.
func TestRestartLagging(t *testing.T) {
	kubeproxytest.RestartLagging(t, kubeproxy.Built, false)
}

// TestRestartOnSim: the same release on the in-memory kernel, on the
// modeled clock: its own code programs it, its runner runs on modeled time.
func TestRestartOnSim(t *testing.T) {
	kubeproxytest.RestartOnSim(t, kubeproxy.Built, false)
}

// TestNFTablesOnSim: v1.34.3 in nftables mode on the in-memory kernel.
func TestNFTablesOnSim(t *testing.T) {
	kubeproxytest.NFTablesOnSim(t, kubeproxy.Built)
}

// TestIPTablesOnSim: v1.34.3 in iptables mode on the in-memory kernel.
func TestIPTablesOnSim(t *testing.T) {
	kubeproxytest.IPTablesOnSim(t, kubeproxy.Built)
}

// TestIPTablesOnKernel: v1.34.3 in iptables mode on this machine's kernel,
// with real traffic, in a namespace of its own, against the sim.
func TestIPTablesOnKernel(t *testing.T) {
	kubeproxytest.IPTablesOnKernel(t, kubeproxy.Built)
}

// TestNFTablesOnTheModeledClock: v1.34.3 in nftables mode decides by the
// modeled clock: it deletes the chains it flushed a second later and
// resyncs in full once an hour of modeled time.
func TestNFTablesOnTheModeledClock(t *testing.T) {
	kubeproxytest.NFTablesOnTheModeledClock(t, kubeproxy.Built)
}

// TestNFTablesOnKernel: v1.34.3 in nftables mode on this machine's kernel,
// with real traffic, in a namespace of its own.
func TestNFTablesOnKernel(t *testing.T) {
	kubeproxytest.NFTablesOnKernel(t, kubeproxy.Built)
}
