// Command kpsim is kpsim with kube-proxy v1.37.1's IPVS, nftables and
// iptables proxiers as a proxier implementation (proxier.mode says
// which), the release go.mod pins: it has the initial-sync fix (kubernetes PR #126532)
// and resyncs every syncPeriod (PR #135631).
//
//	kpsim run -s restart-stale-ipsets --set backend=kernel --set proxier.implementation=kube-proxy@v1.37.1
//
// Package kubeproxy's adapter calls the release (no build tags from 1.37
// on): make bin/kpsim-kube-proxy-v1.37.
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
