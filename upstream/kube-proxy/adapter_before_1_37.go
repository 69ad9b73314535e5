//go:build kpsim_k8s_before_1_37 && !kpsim_k8s_before_1_33

package kubeproxy

import (
	"context"

	"k8s.io/kubernetes/pkg/proxy"
	"k8s.io/kubernetes/pkg/proxy/iptables"
	"k8s.io/kubernetes/pkg/proxy/ipvs"
	"k8s.io/kubernetes/pkg/proxy/nftables"
)

// The adapter for 1.33 to 1.36 (adapter.go says what it is): the
// constructors take kpsim's settings one by one.

// Built is the release this binary is compiled with, in IPVS, nftables and
// iptables mode.
var Built = Release{NewProxier: newIPVSProxier, NewNFTablesProxier: newNFTablesProxier, NewIPTablesProxier: newIPTablesProxier}

// newIPVSProxier is ipvs.NewProxier as cmd/kube-proxy calls it, with
// kube-proxy's defaults where kpsim has no setting (IPVS timeouts left as
// the kernel has them, no health server).
func newIPVSProxier(ctx context.Context, p Params) (*ipvs.Proxier, error) {
	c := p.Config
	return ipvs.NewProxier(ctx, p.Family, p.IPTables, p.IPVS, p.IPSet, p.Sysctl,
		c.SyncPeriod, c.MinSyncPeriod, p.ExcludeCIDRs(), c.StrictARP, 0, 0, 0, c.MasqueradeAll, MasqueradeBit,
		p.LocalDetector(), c.NodeName, p.NodeIP, p.Recorder, nil, c.Scheduler, c.NodePortAddresses, false)
}

// newNFTablesProxier is nftables.NewProxier as cmd/kube-proxy calls it in
// nftables mode (--proxy-mode=nftables), no health server.
func newNFTablesProxier(ctx context.Context, p Params) (proxy.Provider, error) {
	c := p.Config
	return nftables.NewProxier(ctx, p.Family, c.SyncPeriod, c.MinSyncPeriod, c.MasqueradeAll, MasqueradeBit,
		p.LocalDetector(), c.NodeName, p.NodeIP, p.Recorder, nil, c.NodePortAddresses, false)
}

// newIPTablesProxier is iptables.NewProxier as cmd/kube-proxy calls it in
// iptables mode (--proxy-mode=iptables, kube-proxy's default on Linux), no
// health server.
func newIPTablesProxier(ctx context.Context, p Params) (proxy.Provider, error) {
	c := p.Config
	return iptables.NewProxier(ctx, p.Family, p.IPTables, p.Sysctl, c.SyncPeriod, c.MinSyncPeriod, c.MasqueradeAll, localhostNodePorts, MasqueradeBit,
		p.LocalDetector(), c.NodeName, p.NodeIP, p.Recorder, nil, c.NodePortAddresses, false)
}
