//go:build kpsim_k8s_before_1_33 && !kpsim_k8s_before_1_31

package kubeproxy

import (
	"context"

	"k8s.io/kubernetes/pkg/proxy/ipvs"
	utilexec "k8s.io/utils/exec"
)

// The adapter for 1.31 and 1.32 (adapter.go says what it is): IPVS mode
// only, as kpsim runs releases before 1.33 (release_before_1_33.go); the
// constructor takes an exec as well.

// Built is the release this binary is compiled with, in IPVS mode.
var Built = Release{NewProxier: newIPVSProxier}

// newIPVSProxier is ipvs.NewProxier as cmd/kube-proxy calls it, with
// kube-proxy's defaults where kpsim has no setting (IPVS timeouts left as
// the kernel has them, no health server).
func newIPVSProxier(ctx context.Context, p Params) (*ipvs.Proxier, error) {
	c := p.Config
	return ipvs.NewProxier(ctx, p.Family, p.IPTables, p.IPVS, p.IPSet, p.Sysctl, utilexec.New(),
		c.SyncPeriod, c.MinSyncPeriod, p.ExcludeCIDRs(), c.StrictARP, 0, 0, 0, c.MasqueradeAll, MasqueradeBit,
		p.LocalDetector(), c.NodeName, p.NodeIP, p.Recorder, nil, c.Scheduler, c.NodePortAddresses, false)
}
