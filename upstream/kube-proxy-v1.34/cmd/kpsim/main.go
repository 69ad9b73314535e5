// Command kpsim is kpsim with kube-proxy v1.34.3's IPVS, nftables and
// iptables proxiers as a proxier implementation (proxier.mode says
// which), the release go.mod pins: its sync runner, rewritten in kubernetes PR #131615,
// resyncs IPVS mode once an hour whatever syncPeriod says, until PR #135631
// reverted it in v1.34.4.
//
//	kpsim run -s FILE --set backend=kernel --set proxier.implementation=kube-proxy@v1.34.3
//
// Package kubeproxy's adapter calls the release, compiled with the build
// tags `releasemodule -tags v1.34.3` prints: make bin/kpsim-kube-proxy-v1.34.
package main

import (
	"github.com/kpsim/kpsim/cmd/kpsim/cli"
	kubeproxy "github.com/kpsim/kpsim/upstream/kube-proxy"
)

// Set by the Makefile: go build -ldflags "-X main.version=... -X main.commit=...".
var version, commit = "dev", ""

// main is kpsim's command line with the release as a proxier implementation.
func main() {
	kubeproxy.Built.Register()
	cli.Main(version, commit)
}
