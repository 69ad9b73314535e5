//go:build !kpsim_k8s_before_1_33

package kubeproxy

import (
	"context"

	v1 "k8s.io/api/core/v1"
	coreinformers "k8s.io/client-go/informers/core/v1"
	discoveryinformers "k8s.io/client-go/informers/discovery/v1"
	"k8s.io/kubernetes/pkg/proxy"
	kubeproxyconfig "k8s.io/kubernetes/pkg/proxy/apis/config"
	"k8s.io/kubernetes/pkg/proxy/config"
	"k8s.io/kubernetes/pkg/proxy/ipvs"
	utilipset "k8s.io/kubernetes/pkg/proxy/ipvs/ipset"
	"k8s.io/kubernetes/pkg/proxy/metrics"
	utiliptables "k8s.io/kubernetes/pkg/util/iptables"
	"k8s.io/utils/clock"

	"github.com/kpsim/kpsim/proxier/observed"
)

// What kube-proxy 1.33 and later share (the signatures 1.30 has are in
// release_before_1_33.go).

// labelledMetrics: the sync metrics carry ip_family.
const labelledMetrics = true

func registerReleaseMetrics() { metrics.RegisterMetrics(kubeproxyconfig.ProxyModeIPVS) }

func newIPSet() utilipset.Interface { return utilipset.New() }

func newIPTables(f v1.IPFamily) utiliptables.Interface {
	if f == v1.IPv6Protocol {
		return utiliptables.New(utiliptables.ProtocolIPv6)
	}
	return utiliptables.New(utiliptables.ProtocolIPv4)
}

// runConfigs registers p with the Service and EndpointSlice configs and
// the node's topology labels as cmd/kube-proxy does, and runs them.
// (Its node manager, which exits kube-proxy when the node's IPs change, is
// not run: kpsim restarts a proxier only when its timeline says.)
func runConfigs(ctx context.Context, svcs coreinformers.ServiceInformer, slices discoveryinformers.EndpointSliceInformer, nodes coreinformers.NodeInformer, p proxy.Provider) {
	sc := config.NewServiceConfig(ctx, svcs, configSyncPeriod)
	sc.RegisterEventHandler(p)
	go sc.Run(ctx.Done())
	ec := config.NewEndpointSliceConfig(ctx, slices, configSyncPeriod)
	ec.RegisterEventHandler(p)
	go ec.Run(ctx.Done())
	config.NewNodeTopologyConfig(ctx, nodes, configSyncPeriod).RegisterEventHandler(p)
}

// modelRunner puts the release's sync runner (pkg/proxy/runner, whose
// timers come from its clock field) on the modeled clock when the
// generation runs there: its runs wait on timers of observed.RunnerClock,
// and it has a request when its run channel holds one as it waits on its
// next-run timer (the select that also takes requests).
func modelRunner(p *ipvs.Proxier, f *observed.Family) error {
	run, err := observed.Field(p, "syncRunner.run")
	if err != nil {
		return err
	}
	next, err := observed.Field(p, "syncRunner.nextRunTimer")
	if err != nil {
		return err
	}
	rc := f.RunnerClock(func(t clock.Timer) bool {
		cur, _ := next.Interface().(clock.Timer)
		return t == cur && run.Len() > 0
	})
	if rc == nil {
		return nil
	}
	return observed.SetField(p, "syncRunner.clock", clock.Clock(rc))
}
