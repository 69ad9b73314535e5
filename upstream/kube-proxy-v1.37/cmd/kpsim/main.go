// Command kpsim is kpsim with kube-proxy v1.37's IPVS proxier as a proxier
// implementation, the release go.mod pins (kube-proxy@v1.37.1, which has
// the initial-sync fix, kubernetes PR #126532, and resyncs every
// syncPeriod, kubernetes PR #135631):
//
//	kpsim run -s restart-stale-ipsets --set backend=kernel --set proxier.implementation=kube-proxy@v1.37.1
//
// Build it with make bin/kpsim-kube-proxy-v1.37.
package main

import (
	"context"

	"k8s.io/kubernetes/pkg/proxy/ipvs"
	proxyutil "k8s.io/kubernetes/pkg/proxy/util"

	kubeproxy "github.com/kpsim/kpsim/upstream/kube-proxy"
	parity "github.com/kpsim/kpsim/upstream/kube-proxy-v1.37/kubeproxy"
)

// Set by the Makefile: go build -ldflags "-X main.version=... -X main.commit=...".
var version, commit = "dev", ""

func main() { kubeproxy.Release{NewProxier: newProxier}.Main(version, commit) }

// newProxier is v1.37's ipvs.NewProxier as cmd/kube-proxy calls it, on the
// configuration parity holds kpsim's proxier against (no health server).
func newProxier(ctx context.Context, p kubeproxy.Params) (*ipvs.Proxier, error) {
	detector := proxyutil.NewNoOpLocalDetector()
	if cidr := p.ClusterCIDR(); cidr != "" {
		detector = proxyutil.NewDetectLocalByCIDR(cidr)
	}
	return ipvs.NewProxier(ctx, parity.Configuration(p.Config), p.Family, p.IPTables, p.IPVS, p.IPSet, p.Sysctl,
		detector, p.Config.NodeName, p.NodeIP, p.Recorder, nil, false)
}
