//go:build !kpsim_k8s_before_1_34

package kubeproxy

import (
	"context"

	coreinformers "k8s.io/client-go/informers/core/v1"
	discoveryinformers "k8s.io/client-go/informers/discovery/v1"
	"k8s.io/kubernetes/pkg/proxy"
	"k8s.io/kubernetes/pkg/proxy/config"
	"k8s.io/kubernetes/pkg/proxy/iptables"
	"k8s.io/kubernetes/pkg/proxy/ipvs"
	"k8s.io/utils/clock"

	"github.com/kpsim/kpsim/internal/private"
	"github.com/kpsim/kpsim/proxier/observed"
)

// How cmd/kube-proxy starts a proxier, 1.34 on (1.33's is in
// startup_before_1_34.go, 1.30 to 1.32's in release_before_1_33.go).

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

// releaseCleanupIPVSMode is what the release's cmd/kube-proxy runs as it
// starts in nftables mode (platformCleanup): iptables mode's cleanup, then
// IPVS mode's (which does nothing where `modprobe -va ip_vs` fails).
func releaseCleanupIPVSMode(ctx context.Context) (failed bool) {
	failed = iptables.CleanupLeftovers(ctx)
	return ipvs.CleanupLeftovers(ctx) || failed
}

// The sync runner's fields modelRunner reaches (fields.go).
const (
	runnerRun       = "syncRunner.run"
	runnerNextTimer = "syncRunner.nextRunTimer"
	runnerClock     = "syncRunner.clock"
)

var runnerFields = []string{runnerRun, runnerNextTimer, runnerClock}

// modelRunner puts the release's sync runner (pkg/proxy/runner, whose
// timers come from its clock field) on the modeled clock when the
// generation runs there: its runs wait on timers of observed.RunnerClock,
// and it has a request when its run channel holds one as it waits on its
// next-run timer (the select that also takes requests).
func modelRunner(p any, f *observed.Family) error {
	run, err := private.Field(p, runnerRun)
	if err != nil {
		return err
	}
	next, err := private.Field(p, runnerNextTimer)
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
	return private.Set(p, runnerClock, clock.Clock(rc))
}
