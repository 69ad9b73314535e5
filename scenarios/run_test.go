package scenarios

import (
	"context"
	"net/netip"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	v1 "k8s.io/api/core/v1"

	"github.com/kpsim/kpsim/proxier/dataplane"
	"github.com/kpsim/kpsim/results"
)

// runScenario parses and runs a scenario on the in-memory kernel; inspect
// (optional) sees the run after its timeline.
func runScenario(t *testing.T, file string, data []byte, sets []string, inspect func(*run)) *results.File {
	t.Helper()
	s, err := Parse(file, data, sets)
	require.NoError(t, err)
	b, err := NewSimBackend(s)
	require.NoError(t, err)
	f, err := s.run(context.Background(), RunOptions{Backend: b}, inspect)
	require.NoError(t, err)
	return f
}

func runShipped(t *testing.T, name string, sets []string, inspect func(*run)) *results.File {
	t.Helper()
	file, data, err := Read(name)
	require.NoError(t, err)
	return runScenario(t, file, data, sets, inspect)
}

// requireKernelMatchesAPI checks, after the timeline, that every live
// service port has its ClusterIP virtual server with exactly the API's
// ready endpoints as destinations of positive weight, and that deleted
// services left no virtual server behind.
func requireKernelMatchesAPI(t *testing.T, x *run) {
	t.Helper()
	k := x.o.Backend.(*SimBackend).Kernel()
	vss, err := k.Services()
	require.NoError(t, err)
	inKernel := map[dataplane.ServiceKey]bool{}
	for _, vs := range vss {
		inKernel[vs.ServiceKey] = true
	}
	wantVS := map[dataplane.ServiceKey]bool{}
	for _, key := range x.r.liveKeys() {
		ls := x.r.service(key)
		for _, ipStr := range ls.svc.Spec.ClusterIPs {
			ip := netip.MustParseAddr(ipStr)
			for _, p := range ls.svc.Spec.Ports {
				sk := dataplane.ServiceKey{Address: ip, Port: uint16(p.Port), Protocol: dataplane.Protocol(p.Protocol)}
				wantVS[sk] = true
				require.True(t, inKernel[sk], "service %s: no virtual server %s", key, sk)
				var ready []netip.AddrPort
				for _, s := range ls.slices {
					if string(s.AddressType) != string(dataplane.FamilyOf(ip)) {
						continue
					}
					for _, ep := range s.Endpoints {
						if ep.Conditions.Ready == nil || *ep.Conditions.Ready {
							ready = append(ready, netip.AddrPortFrom(netip.MustParseAddr(ep.Addresses[0]), uint16(p.TargetPort.IntVal)))
						}
					}
				}
				if len(ready) == 0 {
					continue // terminating endpoints may serve; not this check's business
				}
				dests, err := k.Destinations(sk)
				require.NoError(t, err)
				var live []netip.AddrPort
				for _, d := range dests {
					if d.Weight > 0 {
						live = append(live, d.AddrPort())
					}
				}
				slices.SortFunc(ready, netip.AddrPort.Compare)
				slices.SortFunc(live, netip.AddrPort.Compare)
				require.Equal(t, ready, live, "service %s %s: destinations", key, sk)
			}
		}
	}
	for _, vs := range vss {
		if x.s.Cluster.ServiceCIDRs != nil && inServiceCIDR(x, vs.Address) {
			require.True(t, wantVS[vs.ServiceKey], "virtual server %s belongs to no live service", vs.ServiceKey)
		}
	}
}

func inServiceCIDR(x *run, a netip.Addr) bool {
	for _, c := range x.s.Cluster.ServiceCIDRs {
		if netip.MustParsePrefix(c).Contains(a) {
			return true
		}
	}
	return false
}

// TestShippedScenariosRun runs every shipped scenario at a reduced size and
// checks the kernel against the API at the end.
func TestShippedScenariosRun(t *testing.T) {
	if testing.Short() {
		t.Skip("runs every shipped scenario")
	}
	fast := []string{"sim.timeScale=0"}
	for _, tc := range []struct {
		name string
		sets []string
		// check looks at scenario-specific results.
		check func(t *testing.T, f *results.File)
	}{
		{"smoke", nil, func(t *testing.T, f *results.File) {
			require.Equal(t, 2, generations(f), "smoke restarts the proxier once")
		}},
		{"scale-10k", []string{"cluster.services=300", "timeline[4].churnEndpoints.duration=500ms"}, nil},
		{"restart-stale-ipsets", []string{"cluster.services=300"}, func(t *testing.T, f *results.File) {
			require.Equal(t, 2, generations(f))
		}},
		{"churn-endpoints", []string{"cluster.services=100", "timeline[4].churnEndpoints.duration=1s"}, func(t *testing.T, f *results.File) {
			require.Positive(t, f.Totals.Ops[dataplane.OpIPVSDestinationDelete], "rolled endpoints go away")
			require.Positive(t, f.Summary.Programming.N, "programming latency per change")
		}},
		{"coredns-restart", []string{"cluster.services=20", "timeline[7].sleep=200ms"}, func(t *testing.T, f *results.File) {
			require.NotNil(t, f.Probes)
			require.Equal(t, dataplane.UDP, f.Probes.Targets[0].Protocol)
			require.Equal(t, "kube-system/kube-dns:dns", f.Probes.Targets[0].Service)
		}},
		{"dual-stack", []string{"cluster.services=100", "timeline[4].churnEndpoints.duration=1s"}, func(t *testing.T, f *results.File) {
			fams := map[dataplane.Family]int{}
			for _, s := range f.Syncs {
				fams[s.Family]++
			}
			require.Positive(t, fams[dataplane.IPv4])
			require.Positive(t, fams[dataplane.IPv6])
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := runShipped(t, tc.name, append(slices.Clone(fast), tc.sets...), func(x *run) { requireKernelMatchesAPI(t, x) })
			require.Empty(t, f.Error)
			require.NotEmpty(t, f.Syncs)
			require.Positive(t, f.Totals.Ops.Writes())
			require.Equal(t, results.Modeled, f.Basis)
			require.NotNil(t, f.CostProfile)
			require.Equal(t, f.Summary.Syncs, len(f.Syncs))
			require.NotEmpty(t, f.Metrics)
			require.Positive(t, f.Totals.PeakRSS)
			require.Len(t, f.Steps, countStepsOf(t, tc.name))
			if f.Probes != nil {
				require.Positive(t, f.Probes.Attempts)
			}
			if tc.check != nil {
				tc.check(t, f)
			}
		})
	}
}

func countStepsOf(t *testing.T, name string) int {
	s, err := Load(name, nil)
	require.NoError(t, err)
	return s.StepCount()
}

func generations(f *results.File) int {
	seen := map[int]bool{}
	for _, s := range f.Syncs {
		seen[s.Proxier] = true
	}
	return len(seen)
}

const determinism = `name: determinism
description: does the same seed give the same kernel operations?
seed: 11
sim: {timeScale: 0}
cluster:
  services: 80
  dualStack: 0.5
  types: {nodePort: 0.2, loadBalancer: 0.1, externalIPs: 0.1}
  portsPerService: 2
  endpointsPerService: 3
  udp: 0.2
  sessionAffinity: 0.2
  externalTrafficPolicyLocal: 0.5
  nodes: 4
proxier:
  families: [IPv4, IPv6]
  minSyncPeriod: 10ms
  syncPeriod: 1h
timeline:
  - createCluster
  - startProxier
  - waitSynced: {timeout: 1m}
  - addServices: {count: 20}
  - waitSynced: {timeout: 1m}
  - deleteServices: {count: 15}
  - waitSynced: {timeout: 1m}
  - restartProxier
  - waitSynced: {timeout: 1m}
`

func TestReplayIsDeterministic(t *testing.T) {
	a := runScenario(t, "d.yaml", []byte(determinism), nil, nil)
	b := runScenario(t, "d.yaml", []byte(determinism), nil, nil)
	require.Positive(t, a.Totals.Ops.Writes())
	require.Equal(t, a.Totals.Ops.String(), b.Totals.Ops.String())
	require.Equal(t, a.Totals.Readded, b.Totals.Readded)
	c := runScenario(t, "d.yaml", []byte(determinism), []string{"seed=12"}, nil)
	require.NotEqual(t, a.Totals.Ops.String(), c.Totals.Ops.String(), "another seed is another cluster")
}

// TestIncidentReproduction is restart-stale-ipsets at 300 services: the
// legacy initial sync with one ipset process per entry deletes what its
// lagging handlers have not reported yet and adds it back in the next sync;
// kpsim's defaults wait for the handlers and write nothing.
func TestIncidentReproduction(t *testing.T) {
	small := []string{"cluster.services=300", "sim.timeScale=0", "probes.services=5"}

	legacy := runShipped(t, "restart-stale-ipsets", append(slices.Clone(small), "proxier.initialSync=legacy", "proxier.ipset=exec"), nil)
	first, second := syncsOf(legacy, 1)
	require.Less(t, first.Services, 300, "the first sync after the restart ran before the handlers caught up")
	require.Positive(t, first.Ops[dataplane.OpIPSetDel], "it deleted entries it had not heard of")
	require.Positive(t, second.Ops[dataplane.OpIPSetAdd], "the next sync put them back")
	require.Positive(t, legacy.Totals.Readded[dataplane.OpIPSetAdd])
	require.Positive(t, legacy.Totals.Readded[dataplane.OpIPVSServiceAdd])

	defaults := runShipped(t, "restart-stale-ipsets", small, nil)
	first, _ = syncsOf(defaults, 1)
	require.Equal(t, 300, first.Services, "the first sync after the restart waited for every handler")
	require.Zero(t, first.Ops.Writes(), "state that already matches is left alone: %v", first.Ops)
	require.Zero(t, defaults.Totals.Readded.Writes()+defaults.Totals.Readded[dataplane.OpIPSetAdd])
	require.Equal(t, dataplane.Ops{}, defaults.Totals.Readded)
}

// syncsOf returns the first two syncs (of the first family) of a proxier generation.
func syncsOf(f *results.File, gen int) (first, second results.Sync) {
	var out []results.Sync
	for _, s := range f.Syncs {
		if s.Proxier == gen && s.Family == dataplane.IPv4 {
			out = append(out, s)
		}
	}
	if len(out) > 0 {
		first = out[0]
	}
	if len(out) > 1 {
		second = out[1]
	}
	return first, second
}

const faults = `name: faults
description: do delayed and dropped watches reach the proxier as a real API server's would?
seed: 5
sim: {timeScale: 0}
cluster:
  services: 20
proxier:
  minSyncPeriod: 10ms
  syncPeriod: 1h
timeline:
  - createCluster
  - startProxier
  - waitSynced: {timeout: 1m}
  - apiFault: {watchDelay: 300ms}
  - addServices: {count: 5}
  - waitSynced: {timeout: 1m}
  - apiFault: {watchDelay: 0s, dropWatch: true}
  - addServices: {count: 5}
  - waitSynced: {timeout: 1m}
`

func TestAPIFaults(t *testing.T) {
	var lists int
	f := runScenario(t, "f.yaml", []byte(faults), nil, func(x *run) {
		requireKernelMatchesAPI(t, x)
		for _, a := range x.r.client.Actions() {
			if a.GetVerb() == "list" && a.GetResource().Resource == "services" {
				lists++
			}
		}
	})
	require.Equal(t, 2, lists, "the dropped watch made the service informer relist")
	// The five services added under the watch delay cannot have been
	// programmed sooner than the delay after their slices were written.
	delayed := map[string]float64{}
	for _, s := range f.Syncs {
		for _, p := range s.Programmed {
			if _, seen := delayed[p.Object]; !seen && p.Object >= "ns-000/svc-00020" && p.Object < "ns-000/svc-00025" {
				delayed[p.Object] = p.Seconds
			}
		}
	}
	require.Len(t, delayed, 5)
	for obj, d := range delayed {
		require.GreaterOrEqual(t, d, 0.3, obj)
	}
}

func TestInterruptedRunKeepsWhatItMeasured(t *testing.T) {
	s, err := Load("smoke", []string{"sim.timeScale=0"})
	require.NoError(t, err)
	b, err := NewSimBackend(s)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	f, err := Run(ctx, s, RunOptions{Backend: b, OnStep: func(done, _ int, _ string) {
		if done == 4 { // churnEndpoints: the proxier has synced and probes are on
			time.AfterFunc(200*time.Millisecond, cancel)
		}
	}})
	require.ErrorContains(t, err, "interrupted")
	require.True(t, f.Interrupted)
	require.NotEmpty(t, f.Error)
	require.NotEmpty(t, f.Syncs)
	require.NotNil(t, f.Probes)
	require.Positive(t, f.Probes.Attempts)
	require.Len(t, f.Steps, 5, "the interrupted step is recorded, later ones are not")
	_, err = Run(context.Background(), s, RunOptions{Backend: b})
	require.ErrorContains(t, err, "already run")
}

func TestProbeTargets(t *testing.T) {
	s, err := Parse("x.yaml", []byte(base), []string{
		"proxier.families=[IPv4, IPv6]", "cluster.dualStack=1", "cluster.types={loadBalancer: 1}",
		"probes.kinds=[clusterip, nodeport, loadbalancer]", "probes.services=[ns-000/svc-00000]",
	})
	require.NoError(t, err)
	x := &run{s: s, fams: []dataplane.Family{dataplane.IPv4, dataplane.IPv6}}
	targets, err := x.probeTargets()
	require.NoError(t, err)
	svc := s.set.Services[0]
	require.Equal(t, v1.ServiceTypeLoadBalancer, svc.Spec.Type)
	var got []string
	for _, tg := range targets {
		require.Equal(t, "ns-000/svc-00000:p0", tg.Service)
		got = append(got, tg.Kind+" "+tg.Address)
	}
	np := svc.Spec.Ports[0].NodePort
	require.Equal(t, []string{
		"clusterip " + svc.Spec.ClusterIPs[0] + ":80",
		"clusterip [" + svc.Spec.ClusterIPs[1] + "]:80",
		"nodeport 192.168.0.10:" + strconv.Itoa(int(np)),
		"nodeport [fd00::10]:" + strconv.Itoa(int(np)),
		"loadbalancer " + svc.Status.LoadBalancer.Ingress[0].IP + ":80",
		"loadbalancer [" + svc.Status.LoadBalancer.Ingress[1].IP + "]:80",
	}, got)
}
