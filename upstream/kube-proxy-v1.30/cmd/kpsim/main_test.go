package main

import (
	"testing"

	kubeproxy "github.com/kpsim/kpsim/upstream/kube-proxy"
	"github.com/kpsim/kpsim/upstream/kube-proxy/kubeproxytest"
)

// TestRestartLagging: v1.30.3 predates the initial-sync fix (kubernetes PR
// #126532, in 1.30 from v1.30.5): its first sync after a restart takes the
// services its handlers have not passed on yet for stale.
func TestRestartLagging(t *testing.T) {
	kubeproxytest.RestartLagging(t, kubeproxy.Built, true)
}

// TestRestartOnSim: the same release on the in-memory kernel, on the
// modeled clock: its own code programs it, its runner runs on modeled time.
func TestRestartOnSim(t *testing.T) {
	kubeproxytest.RestartOnSim(t, kubeproxy.Built, true)
}
