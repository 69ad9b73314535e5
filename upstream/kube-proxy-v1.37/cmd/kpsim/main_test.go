package main

import (
	"testing"

	kubeproxy "github.com/kpsim/kpsim/upstream/kube-proxy"
	"github.com/kpsim/kpsim/upstream/kube-proxy/kubeproxytest"
)

// TestRestartLagging: v1.37.1 waits for its handlers (kubernetes PR
// #126532) before its first sync after a restart.
func TestRestartLagging(t *testing.T) {
	kubeproxytest.RestartLagging(t, kubeproxy.Release{NewProxier: newProxier}, false)
}

// TestRestartOnSim: the same release on the in-memory kernel, on the
// modeled clock: its own code programs it, its runner runs on modeled time.
func TestRestartOnSim(t *testing.T) {
	kubeproxytest.RestartOnSim(t, kubeproxy.Release{NewProxier: newProxier}, false)
}

// TestFitRelease: kpsim calibrate in this binary prices v1.37.1's own work.
func TestFitRelease(t *testing.T) {
	kubeproxytest.FitRelease(t, kubeproxy.Release{NewProxier: newProxier})
}
