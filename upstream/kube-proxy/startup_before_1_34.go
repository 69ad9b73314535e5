//go:build kpsim_k8s_before_1_34 && !kpsim_k8s_before_1_31

package kubeproxy

import (
	"context"

	v1 "k8s.io/api/core/v1"
	coreinformers "k8s.io/client-go/informers/core/v1"
	discoveryinformers "k8s.io/client-go/informers/discovery/v1"
	"k8s.io/kubernetes/pkg/proxy"
	"k8s.io/kubernetes/pkg/proxy/config"
	"k8s.io/kubernetes/pkg/proxy/iptables"
	"k8s.io/kubernetes/pkg/proxy/ipvs"
	utilipvs "k8s.io/kubernetes/pkg/proxy/ipvs/util"
)

// How cmd/kube-proxy 1.31 to 1.33 starts a proxier (startup.go has 1.34's,
// release_before_1_31.go 1.30's).

// runConfigs registers p with the Service, EndpointSlice and Node configs
// as cmd/kube-proxy does (the proxier itself reads its Node's labels), and
// runs them.
func runConfigs(ctx context.Context, svcs coreinformers.ServiceInformer, slices discoveryinformers.EndpointSliceInformer, nodes coreinformers.NodeInformer, p proxy.Provider) {
	sc := config.NewServiceConfig(ctx, svcs, configSyncPeriod)
	sc.RegisterEventHandler(p)
	go sc.Run(ctx.Done())
	ec := config.NewEndpointSliceConfig(ctx, slices, configSyncPeriod)
	ec.RegisterEventHandler(p)
	go ec.Run(ctx.Done())
	nc := config.NewNodeConfig(ctx, nodes, configSyncPeriod)
	nc.RegisterEventHandler(p)
	go nc.Run(ctx.Done())
}

// releaseCleanupIPVSMode is what the release's cmd/kube-proxy runs as it
// starts in nftables mode (platformCleanup): for each family, iptables
// mode's cleanup, then IPVS mode's, on utilities it makes for them.
func releaseCleanupIPVSMode(ctx context.Context) (failed bool) {
	ipvsUtil, ipsetUtil := utilipvs.New(), newIPSet()
	for _, f := range []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol} {
		ipt := newIPTables(f)
		failed = iptables.CleanupLeftovers(ctx, ipt) || failed
		failed = ipvs.CleanupLeftovers(ctx, ipvsUtil, ipt, ipsetUtil) || failed
	}
	return failed
}
