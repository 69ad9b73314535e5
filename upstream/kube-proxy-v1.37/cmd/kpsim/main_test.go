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
