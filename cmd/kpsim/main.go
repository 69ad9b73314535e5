// Command kpsim runs kube-proxy scenarios against an in-memory or a real
// kernel, and turns their results files into reports and comparisons: the
// command line of package cli, with kpsim's own proxier, which is an IPVS
// proxier. kube-proxy's nftables and iptables modes are a release's own
// proxiers, run by the binaries the nested modules under upstream/ build.
package main

import "github.com/kpsim/kpsim/cmd/kpsim/cli"

// Set by the Makefile: go build -ldflags "-X main.version=... -X main.commit=...".
var (
	version = "dev"
	commit  = ""
)

func main() { cli.Main(version, commit) }
