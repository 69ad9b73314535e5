//go:build kpsim_k8s_before_1_31

package kubeproxy

import (
	"context"

	coreinformers "k8s.io/client-go/informers/core/v1"
	discoveryinformers "k8s.io/client-go/informers/discovery/v1"
	"k8s.io/kubernetes/pkg/proxy"
	"k8s.io/kubernetes/pkg/proxy/config"
	"k8s.io/kubernetes/pkg/proxy/metrics"

	"github.com/kpsim/kpsim/proxier"
)

// What kube-proxy 1.30 has where 1.31 on differs: no contexts.

// registerReleaseMetrics registers the release's metrics (1.30 registers
// every mode's at once; kpsim runs it in IPVS mode only).
func registerReleaseMetrics(proxier.Mode) { metrics.RegisterMetrics() }

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

// releaseCleanupIPVSMode: kpsim runs 1.30 in IPVS mode only, where
// kube-proxy cleans nothing of IPVS mode up.
func releaseCleanupIPVSMode(context.Context) bool { return false }
