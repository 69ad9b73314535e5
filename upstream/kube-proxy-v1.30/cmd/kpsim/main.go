// Command kpsim is kpsim with kube-proxy v1.30's IPVS proxier as a proxier
// implementation, the release go.mod pins (kube-proxy@v1.30.3: before the
// initial-sync fix, kubernetes PR #126532, reached 1.30 in v1.30.5):
//
//	kpsim run -s restart-stale-ipsets --set backend=kernel --set proxier.implementation=kube-proxy@v1.30.3
//
// Build it with the tag kpsim_k8s_before_1_33 (make bin/kpsim-kube-proxy-v1.30).
package main

import (
	"context"

	"k8s.io/kubernetes/pkg/proxy/ipvs"
	proxyutiliptables "k8s.io/kubernetes/pkg/proxy/util/iptables"
	utilexec "k8s.io/utils/exec"

	kubeproxy "github.com/kpsim/kpsim/upstream/kube-proxy"
)

// Set by the Makefile: go build -ldflags "-X main.version=... -X main.commit=...".
var version, commit = "dev", ""

func main() { kubeproxy.Release{NewProxier: newProxier}.Main(version, commit) }

// newProxier is v1.30's ipvs.NewProxier as cmd/kube-proxy calls it, with
// kube-proxy's defaults where kpsim has no setting (IPVS timeouts left as
// the kernel has them, no health server).
func newProxier(_ context.Context, p kubeproxy.Params) (*ipvs.Proxier, error) {
	c := p.Config
	detector := proxyutiliptables.NewNoOpLocalDetector()
	if cidr := p.ClusterCIDR(); cidr != "" {
		var err error
		if detector, err = proxyutiliptables.NewDetectLocalByCIDR(cidr); err != nil {
			return nil, err
		}
	}
	return ipvs.NewProxier(p.Family, p.IPTables, p.IPVS, p.IPSet, p.Sysctl, utilexec.New(),
		c.SyncPeriod, c.MinSyncPeriod, p.ExcludeCIDRs(), c.StrictARP, 0, 0, 0, c.MasqueradeAll, kubeproxy.MasqueradeBit,
		detector, c.NodeName, p.NodeIP, p.Recorder, nil, c.Scheduler, c.NodePortAddresses, false)
}
