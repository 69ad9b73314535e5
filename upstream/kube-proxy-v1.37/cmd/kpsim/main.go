// Command kpsim is kpsim with kube-proxy v1.37's IPVS and nftables
// proxiers as a proxier implementation (proxier.mode says which), the release go.mod pins (kube-proxy@v1.37.1, which has
// the initial-sync fix, kubernetes PR #126532, and resyncs every
// syncPeriod, kubernetes PR #135631):
//
//	kpsim run -s restart-stale-ipsets --set backend=kernel --set proxier.implementation=kube-proxy@v1.37.1
//
// Build it with make bin/kpsim-kube-proxy-v1.37.
package main

import (
	"context"

	"k8s.io/kubernetes/pkg/proxy"
	kubeproxyconfig "k8s.io/kubernetes/pkg/proxy/apis/config"
	"k8s.io/kubernetes/pkg/proxy/ipvs"
	"k8s.io/kubernetes/pkg/proxy/nftables"

	kubeproxy "github.com/kpsim/kpsim/upstream/kube-proxy"
	parity "github.com/kpsim/kpsim/upstream/kube-proxy-v1.37/kubeproxy"
)

// Set by the Makefile: go build -ldflags "-X main.version=... -X main.commit=...".
var version, commit = "dev", ""

// release is v1.37.1 in either mode.
var release = kubeproxy.Release{NewProxier: newProxier, NewNFTablesProxier: newNFTablesProxier}

func main() { release.Main(version, commit) }

// newProxier is v1.37's ipvs.NewProxier as cmd/kube-proxy calls it, on the
// configuration parity holds kpsim's proxier against (no health server).
func newProxier(ctx context.Context, p kubeproxy.Params) (*ipvs.Proxier, error) {
	return ipvs.NewProxier(ctx, parity.Configuration(p.Config), p.Family, p.IPTables, p.IPVS, p.IPSet, p.Sysctl,
		p.LocalDetector(), p.Config.NodeName, p.NodeIP, p.Recorder, nil, false)
}

// newNFTablesProxier is v1.37's nftables.NewProxier as cmd/kube-proxy
// calls it in nftables mode (--proxy-mode=nftables), on the same
// configuration, no health server.
func newNFTablesProxier(ctx context.Context, p kubeproxy.Params) (proxy.Provider, error) {
	cfg := parity.Configuration(p.Config)
	cfg.Mode = kubeproxyconfig.ProxyModeNFTables
	cfg.NFTables.MasqueradeBit = cfg.IPTables.MasqueradeBit
	return nftables.NewProxier(ctx, cfg, p.Family, p.LocalDetector(), p.Config.NodeName, p.NodeIP, p.Recorder, nil, false)
}
