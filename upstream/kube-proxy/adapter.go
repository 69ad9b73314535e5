//go:build !kpsim_k8s_before_1_37

package kubeproxy

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/kubernetes/pkg/proxy"
	kubeproxyconfig "k8s.io/kubernetes/pkg/proxy/apis/config"
	"k8s.io/kubernetes/pkg/proxy/iptables"
	"k8s.io/kubernetes/pkg/proxy/ipvs"
	"k8s.io/kubernetes/pkg/proxy/nftables"

	"github.com/kpsim/kpsim/proxier"
)

// The adapter: how cmd/kube-proxy calls the release's proxier
// constructors, for the release this package is compiled with. Where their
// API moved, a file per era holds the calls (adapter_before_1_*.go, chosen
// by the build tags cmd/releasemodule prints for a release); this one is
// 1.37 on, whose constructors take the KubeProxyConfiguration.

// Built is the release this binary is compiled with, in IPVS, nftables and
// iptables mode.
var Built = Release{NewProxier: newIPVSProxier, NewNFTablesProxier: newNFTablesProxier, NewIPTablesProxier: newIPTablesProxier}

// newIPVSProxier is ipvs.NewProxier as cmd/kube-proxy calls it, on
// Configuration (no health server).
func newIPVSProxier(ctx context.Context, p Params) (*ipvs.Proxier, error) {
	return ipvs.NewProxier(ctx, Configuration(p.Config), p.Family, p.IPTables, p.IPVS, p.IPSet, p.Sysctl,
		p.LocalDetector(), p.Config.NodeName, p.NodeIP, p.Recorder, nil, false)
}

// newNFTablesProxier is nftables.NewProxier as cmd/kube-proxy calls it in
// nftables mode (--proxy-mode=nftables), on the same configuration, no
// health server.
func newNFTablesProxier(ctx context.Context, p Params) (proxy.Provider, error) {
	cfg := Configuration(p.Config)
	cfg.Mode = kubeproxyconfig.ProxyModeNFTables
	cfg.NFTables.MasqueradeBit = cfg.IPTables.MasqueradeBit
	return nftables.NewProxier(ctx, cfg, p.Family, p.LocalDetector(), p.Config.NodeName, p.NodeIP, p.Recorder, nil, false)
}

// newIPTablesProxier is iptables.NewProxier as cmd/kube-proxy calls it in
// iptables mode (--proxy-mode=iptables, kube-proxy's default on Linux), on
// the same configuration, no health server.
func newIPTablesProxier(ctx context.Context, p Params) (proxy.Provider, error) {
	cfg := Configuration(p.Config)
	cfg.Mode = kubeproxyconfig.ProxyModeIPTables
	cfg.IPTables.LocalhostNodePorts = &localhostNodePorts
	return iptables.NewProxier(ctx, cfg, p.Family, p.IPTables, p.Sysctl, p.LocalDetector(), p.Config.NodeName, p.NodeIP, p.Recorder, nil, false)
}

// Configuration is kube-proxy's configuration (IPVS mode) for kpsim's
// settings, with kube-proxy's defaults elsewhere.
func Configuration(c proxier.Config) *kubeproxyconfig.KubeProxyConfiguration {
	bit := int32(MasqueradeBit)
	return &kubeproxyconfig.KubeProxyConfiguration{
		Mode:              kubeproxyconfig.ProxyModeIPVS,
		IPTables:          kubeproxyconfig.KubeProxyIPTablesConfiguration{MasqueradeBit: &bit},
		IPVS:              kubeproxyconfig.KubeProxyIPVSConfiguration{Scheduler: c.Scheduler, ExcludeCIDRs: c.ExcludeCIDRs, StrictARP: c.StrictARP},
		Linux:             kubeproxyconfig.KubeProxyLinuxConfiguration{MasqueradeAll: c.MasqueradeAll},
		NodePortAddresses: c.NodePortAddresses,
		SyncPeriod:        metav1.Duration{Duration: c.SyncPeriod},
		MinSyncPeriod:     metav1.Duration{Duration: c.MinSyncPeriod},
		ConfigSyncPeriod:  metav1.Duration{Duration: configSyncPeriod},
	}
}
