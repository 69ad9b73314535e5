package scenarios

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/client-go/kubernetes"

	"github.com/kpsim/kpsim/dataplane"
	"github.com/kpsim/kpsim/proxier"
	"github.com/kpsim/kpsim/record"
)

// Stand-ins for kube-proxy releases, registered once per test binary:
// kpsim's proxier with a release's initial sync, since a real release
// needs the k8s.io/kubernetes module (upstream/) and a kernel with IPVS.
const (
	racyRelease  = "kube-proxy@v0.0.0-racy"  // syncs once its informers' stores are full (before kubernetes PR #126532)
	fixedRelease = "kube-proxy@v0.0.0-fixed" // waits for its handlers (PR #126532)
)

func init() {
	for name, mode := range map[string]proxier.InitialSyncMode{racyRelease: proxier.InitialSyncLegacy, fixedRelease: proxier.InitialSyncHandlers} {
		proxier.Register(proxier.Implementation{Name: name, Run: func(ctx context.Context, c kubernetes.Interface, dp dataplane.Dataplane, cfg proxier.Config, o proxier.Options) error {
			cfg.InitialSync = mode
			return proxier.Run(ctx, c, dp, cfg, o)
		}})
	}
}

const restartLagging = `name: restart-lagging
description: does a restart with lagging handlers break a release?
seed: 3
backend: kernel
cluster:
  services: 50
proxier:
  minSyncPeriod: 10ms
timeline:
  - createCluster
  - startProxier
  - waitSynced: {timeout: 1m}
  - restartProxier: {knownAtFirstSync: 0.36}
  - waitSynced: {timeout: 1m}
`

// TestUpstreamHandlersBlock: a release's handlers that lag are blocked, not
// queued, so its own initial sync decides: one that syncs on its stores
// knows 36% of the services at its first sync after the restart, one that
// waits for its handler registrations knows all of them: it syncs only
// once the held events are released, holdBackLimit (wall time) after the
// first was held, while the modeled clock waits for it. (The stand-ins
// run on the in-memory kernel, on the modeled clock.)
func TestUpstreamHandlersBlock(t *testing.T) {
	defer func(d time.Duration) { holdBackLimit = d }(holdBackLimit)
	holdBackLimit = 300 * time.Millisecond
	for _, tc := range []struct {
		impl       string
		firstKnows int
	}{
		{racyRelease, 18},
		{fixedRelease, 50},
	} {
		t.Run(tc.impl, func(t *testing.T) {
			s, err := Parse("r.yaml", []byte(restartLagging), []string{"proxier.implementation=" + tc.impl})
			require.NoError(t, err)
			b := simBackend(t, s)
			f, err := s.run(context.Background(), RunOptions{Backend: b}, nil)
			require.NoError(t, err)
			require.Equal(t, tc.impl, f.Proxier)
			require.Equal(t, record.ClockModeled, f.Clock)
			first, _ := syncsOf(f, 1)
			require.Equal(t, tc.firstKnows, first.Services, "services the first sync after the restart knew")
		})
	}
}

// TestHoldBackBlocks: a blocked event waits until the events are released
// (by the first sync, or holdBackLimit after it was held) and is then
// delivered by its caller, or until the generation stops, and is dropped.
func TestHoldBackBlocks(t *testing.T) {
	defer func(d time.Duration) { holdBackLimit = d }(holdBackLimit)
	for _, tc := range []struct {
		name   string
		limit  time.Duration
		end    func(h *holdBack, stop chan struct{})
		wantOK bool // delivered (hold returned false)
	}{
		{"released by the first sync", time.Hour, func(h *holdBack, _ chan struct{}) { h.release() }, true},
		{"released after holdBackLimit", time.Millisecond, func(*holdBack, chan struct{}) {}, true},
		{"the generation stopped", time.Hour, func(_ *holdBack, stop chan struct{}) { close(stop) }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			holdBackLimit = tc.limit
			stop := make(chan struct{})
			h := newHoldBack(0.5, map[string]int{"Service": 2, "Node": 1}, true, stop, &wallDriver{})
			require.False(t, h.hold("Service", true, nil), "the first half passes")
			require.False(t, h.hold("Node", true, nil), "nodes are never held")
			held := make(chan bool)
			go func() { held <- h.hold("Service", true, nil) }()
			if tc.limit == time.Hour {
				select {
				case <-held:
					require.Fail(t, "the second Service passed while held")
				case <-time.After(20 * time.Millisecond):
				}
			}
			tc.end(h, stop)
			require.Equal(t, !tc.wantOK, <-held)
			if tc.wantOK {
				require.False(t, h.hold("Service", false, nil), "after the release everything passes")
			}
		})
	}
}

// TestImplementationChecks: a release on the sim writes its ipsets as it
// does (one process per entry: the exec strategy, its default), and a
// binary without it says which one has it.
func TestImplementationChecks(t *testing.T) {
	s, err := Parse("r.yaml", []byte(restartLagging), []string{"backend=sim", "proxier.implementation=kube-proxy@v1.37.1"})
	require.NoError(t, err)
	require.Equal(t, dataplane.IPSetExec, s.Dataplane.IPSet)
	s, err = Parse("r.yaml", []byte(restartLagging), []string{"backend=sim", "proxier.implementation=kube-proxy@v1.37.1", "dataplane.ipset=restore"})
	require.NoError(t, err)
	require.Contains(t, strings.Join(s.Warnings(), "\n"), "dataplane.ipset: kube-proxy@v1.37.1 writes ipsets one `ipset add|del` process per entry, which the sim prices as exec")

	s, err = Parse("r.yaml", []byte(restartLagging), []string{"proxier.implementation=kube-proxy@v1.30.3"})
	require.NoError(t, err)
	_, err = s.Implementation()
	require.ErrorContains(t, err, "proxier.implementation kube-proxy@v1.30.3 is not in this kpsim binary, which has "+
		strings.Join([]string{"kpsim", fixedRelease, racyRelease}, ", "))
	require.ErrorContains(t, err, "bin/kpsim-kube-proxy-v1.30 when upstream/kube-proxy-v1.30 pins it (make kube-proxy)")
	_, err = Run(context.Background(), s, RunOptions{Backend: simBackend(t, s)})
	require.ErrorContains(t, err, "is not in this kpsim binary")

	s, err = Parse("r.yaml", []byte(restartLagging), []string{"backend=sim"})
	require.NoError(t, err)
	impl, err := s.Implementation()
	require.NoError(t, err)
	require.Equal(t, proxier.ImplementationKpsim, impl.Name)

	s, err = Parse("r.yaml", []byte(restartLagging), []string{"proxier.implementation=" + fixedRelease, "proxier.initialSync=legacy"})
	require.NoError(t, err)
	require.Contains(t, s.Warnings(), "proxier.initialSync is a setting of kpsim's proxier: "+fixedRelease+" does what its own code does")
}
