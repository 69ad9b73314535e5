// Command kpsim is kpsim with kube-proxy v1.34's IPVS and nftables
// proxiers as a proxier implementation (proxier.mode says which), the release go.mod pins (kube-proxy@v1.34.3: its sync
// runner, rewritten in kubernetes PR #131615, resyncs IPVS mode once an
// hour whatever syncPeriod says, until PR #135631 reverted it in v1.34.4):
//
//	kpsim run -s FILE --set backend=kernel --set proxier.implementation=kube-proxy@v1.34.3
//
// Build it with make bin/kpsim-kube-proxy-v1.34.
package main

import (
	"context"

	"k8s.io/kubernetes/pkg/proxy"
	"k8s.io/kubernetes/pkg/proxy/ipvs"
	"k8s.io/kubernetes/pkg/proxy/nftables"

	kubeproxy "github.com/kpsim/kpsim/upstream/kube-proxy"
)

// Set by the Makefile: go build -ldflags "-X main.version=... -X main.commit=...".
var version, commit = "dev", ""

// release is v1.34.3 in either mode.
var release = kubeproxy.Release{NewProxier: newProxier, NewNFTablesProxier: newNFTablesProxier}

func main() { release.Main(version, commit) }

// newProxier is v1.34's ipvs.NewProxier as cmd/kube-proxy calls it, with
// kube-proxy's defaults where kpsim has no setting (IPVS timeouts left as
// the kernel has them, no health server).
func newProxier(ctx context.Context, p kubeproxy.Params) (*ipvs.Proxier, error) {
	c := p.Config
	return ipvs.NewProxier(ctx, p.Family, p.IPTables, p.IPVS, p.IPSet, p.Sysctl,
		c.SyncPeriod, c.MinSyncPeriod, p.ExcludeCIDRs(), c.StrictARP, 0, 0, 0, c.MasqueradeAll, kubeproxy.MasqueradeBit,
		p.LocalDetector(), c.NodeName, p.NodeIP, p.Recorder, nil, c.Scheduler, c.NodePortAddresses, false)
}

// newNFTablesProxier is v1.34's nftables.NewProxier as cmd/kube-proxy
// calls it in nftables mode (--proxy-mode=nftables), no health server.
func newNFTablesProxier(ctx context.Context, p kubeproxy.Params) (proxy.Provider, error) {
	c := p.Config
	return nftables.NewProxier(ctx, p.Family, c.SyncPeriod, c.MinSyncPeriod, c.MasqueradeAll, kubeproxy.MasqueradeBit,
		p.LocalDetector(), c.NodeName, p.NodeIP, p.Recorder, nil, c.NodePortAddresses, false)
}
