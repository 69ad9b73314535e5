//go:build kpsim_k8s_before_1_33

package kubeproxy

import (
	"context"

	v1 "k8s.io/api/core/v1"
	coreinformers "k8s.io/client-go/informers/core/v1"
	discoveryinformers "k8s.io/client-go/informers/discovery/v1"
	"k8s.io/kubernetes/pkg/proxy"
	"k8s.io/kubernetes/pkg/proxy/config"
	"k8s.io/kubernetes/pkg/proxy/conntrack"
	utilipset "k8s.io/kubernetes/pkg/proxy/ipvs/ipset"
	"k8s.io/kubernetes/pkg/proxy/metrics"
	utiliptables "k8s.io/kubernetes/pkg/util/iptables"
	utilexec "k8s.io/utils/exec"

	"github.com/kpsim/kpsim/dataplane"
	"github.com/kpsim/kpsim/proxier"
)

// What kube-proxy 1.30 has where later releases differ (release.go).

// labelledMetrics: the sync metrics carry no ip_family yet.
const labelledMetrics = false

// registerReleaseMetrics registers the release's metrics (1.30 registers
// every mode's at once; kpsim runs it in IPVS mode only).
func registerReleaseMetrics(proxier.Mode) { metrics.RegisterMetrics() }

func newIPSet() utilipset.Interface { return utilipset.New(utilexec.New()) }

func newIPTables(f v1.IPFamily) utiliptables.Interface {
	if f == v1.IPv6Protocol {
		return utiliptables.New(utilexec.New(), utiliptables.ProtocolIPv6)
	}
	return utiliptables.New(utilexec.New(), utiliptables.ProtocolIPv4)
}

// runConfigs registers p with the Service, EndpointSlice and Node configs
// as cmd/kube-proxy does (the proxier itself reads its Node's labels), and
// runs them.
func runConfigs(ctx context.Context, svcs coreinformers.ServiceInformer, slices discoveryinformers.EndpointSliceInformer, nodes coreinformers.NodeInformer, p proxy.Provider) {
	sc := config.NewServiceConfig(svcs, configSyncPeriod)
	sc.RegisterEventHandler(p)
	go sc.Run(ctx.Done())
	ec := config.NewEndpointSliceConfig(slices, configSyncPeriod)
	ec.RegisterEventHandler(p)
	go ec.Run(ctx.Done())
	nc := config.NewNodeConfig(nodes, configSyncPeriod)
	nc.RegisterEventHandler(p)
	go nc.Run(ctx.Done())
}

// simConntrack is upstream's fake: 1.30's conntrack utility clears flows
// by address and port, which the in-memory kernel's table does not take
// from it (its stale flows stay).
func simConntrack(dataplane.Dataplane) conntrack.Interface { return conntrack.NewFake() }

// releaseCleanupIPVSMode: kpsim runs 1.30 in IPVS mode only, where
// kube-proxy cleans nothing of IPVS mode up.
func releaseCleanupIPVSMode(context.Context) bool { return false }

// releaseCleanupNFTablesMode: kpsim runs releases before 1.33 in IPVS mode
// only.
func releaseCleanupNFTablesMode(context.Context) bool { return false }

// adoptIPTablesMode: kpsim runs releases before 1.33 in IPVS mode only.
func adoptIPTablesMode(any) (bool, error) { return false, nil }
