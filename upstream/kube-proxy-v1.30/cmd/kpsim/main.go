// Command kpsim is kpsim with kube-proxy v1.30.3's IPVS proxier as a
// proxier implementation, the release go.mod pins: before the initial-sync
// fix (kubernetes PR #126532, which reached 1.30 in v1.30.5).
//
//	kpsim run -s restart-stale-ipsets --set backend=kernel --set proxier.implementation=kube-proxy@v1.30.3
//
// Package kubeproxy's adapter calls the release, compiled with the build
// tags `releasemodule -tags v1.30.3` prints: make bin/kpsim-kube-proxy-v1.30.
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
