//go:build kpsim_k8s_before_1_31

package kubeproxy

import (
	"context"

	"k8s.io/kubernetes/pkg/proxy/ipvs"
	proxyutiliptables "k8s.io/kubernetes/pkg/proxy/util/iptables"
	utilexec "k8s.io/utils/exec"
)

// The adapter for 1.30 (adapter.go says what it is): IPVS mode only; the
// constructor takes no context, and its local detector is iptables mode's.

// Built is the release this binary is compiled with, in IPVS mode.
var Built = Release{NewProxier: newIPVSProxier}

// newIPVSProxier is ipvs.NewProxier as cmd/kube-proxy calls it, with
// kube-proxy's defaults where kpsim has no setting (IPVS timeouts left as
// the kernel has them, no health server).
func newIPVSProxier(_ context.Context, p Params) (*ipvs.Proxier, error) {
	c := p.Config
	detector := proxyutiliptables.NewNoOpLocalDetector()
	if cidr := p.ClusterCIDR(); cidr != "" {
		var err error
		if detector, err = proxyutiliptables.NewDetectLocalByCIDR(cidr); err != nil {
			return nil, err
		}
	}
	return ipvs.NewProxier(p.Family, p.IPTables, p.IPVS, p.IPSet, p.Sysctl, utilexec.New(),
		c.SyncPeriod, c.MinSyncPeriod, p.ExcludeCIDRs(), c.StrictARP, 0, 0, 0, c.MasqueradeAll, MasqueradeBit,
		detector, c.NodeName, p.NodeIP, p.Recorder, nil, c.Scheduler, c.NodePortAddresses, false)
}
