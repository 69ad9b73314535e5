// Command kpsim runs kube-proxy IPVS scenarios against an in-memory or a real
// kernel, and turns their results files into reports and comparisons: the
// command line of package cli, with kpsim's own proxier.
package main

import "github.com/kpsim/kpsim/cmd/kpsim/cli"

// Set by the Makefile: go build -ldflags "-X main.version=... -X main.commit=...".
var (
	version = "dev"
	commit  = ""
)

func main() { cli.Main(version, commit) }
