package scenarios

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	v1 "k8s.io/api/core/v1"

	"github.com/kpsim/kpsim/dataplane"
	"github.com/kpsim/kpsim/internal/k8sapi"
	"github.com/kpsim/kpsim/proxier"
	"github.com/kpsim/kpsim/record"
	"github.com/kpsim/kpsim/results"
	"github.com/kpsim/kpsim/scenarios/backend"
	"github.com/kpsim/kpsim/sim"
)

// simBackend builds the in-memory kernel s asks for.
func simBackend(t testing.TB, s *Scenario) *backend.Sim {
	t.Helper()
	spec, err := s.BackendSpec()
	require.NoError(t, err)
	b, err := backend.NewSim(spec)
	require.NoError(t, err)
	return b
}

// runScenario parses and runs a scenario on the in-memory kernel; inspect
// (optional) sees the run after its timeline.
func runScenario(t *testing.T, file string, data []byte, sets []string, inspect func(*run)) *record.File {
	t.Helper()
	s, err := Parse(file, data, sets)
	require.NoError(t, err)
	b := simBackend(t, s)
	f, err := s.run(context.Background(), RunOptions{Backend: b}, inspect)
	require.NoError(t, err)
	return f
}

func runShipped(t *testing.T, name string, sets []string, inspect func(*run)) *record.File {
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
	k := x.o.Backend.(*backend.Sim).Kernel()
	vss, err := k.Services()
	require.NoError(t, err)
	inKernel := map[dataplane.ServiceKey]bool{}
	for _, vs := range vss {
		inKernel[vs.ServiceKey] = true
	}
	wantVS := map[dataplane.ServiceKey]bool{}
	for _, key := range x.r.liveKeys() {
		ls := x.r.service(key)
		svc, err := x.r.currentService(ls)
		require.NoError(t, err)
		current, err := x.r.currentSlices(ls)
		require.NoError(t, err)
		for _, ipStr := range svc.Spec.ClusterIPs {
			ip := netip.MustParseAddr(ipStr)
			for _, p := range svc.Spec.Ports {
				sk := dataplane.ServiceKey{Address: ip, Port: uint16(p.Port), Protocol: dataplane.Protocol(p.Protocol)}
				wantVS[sk] = true
				require.True(t, inKernel[sk], "service %s: no virtual server %s", key, sk)
				var ready []netip.AddrPort
				for _, s := range current {
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
		// check looks at scenario-specific results.
		check func(t *testing.T, f *record.File)
	}{
		{"smoke", func(t *testing.T, f *record.File) {
			require.Equal(t, 2, generations(f), "smoke restarts the proxier once")
		}},
		{"scale-10k", nil},
		{"restart-stale-ipsets", func(t *testing.T, f *record.File) {
			require.Equal(t, 2, generations(f))
		}},
		{"churn-endpoints", func(t *testing.T, f *record.File) {
			require.Positive(t, f.Totals.Ops[dataplane.OpIPVSDestinationDelete], "rolled endpoints go away")
			require.Positive(t, f.Summary.Programming.N, "programming latency per change")
		}},
		{"coredns-restart", func(t *testing.T, f *record.File) {
			require.NotNil(t, f.Probes)
			require.Equal(t, dataplane.UDP, f.Probes.Targets[0].Protocol)
			require.Equal(t, "kube-system/kube-dns:dns", f.Probes.Targets[0].Service)
		}},
		{"dual-stack", func(t *testing.T, f *record.File) {
			fams := map[dataplane.Family]int{}
			for _, s := range f.Syncs {
				fams[s.Family]++
			}
			require.Positive(t, fams[dataplane.IPv4])
			require.Positive(t, fams[dataplane.IPv6])
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := runShipped(t, tc.name, append(slices.Clone(fast), reduced[tc.name]...), func(x *run) { requireKernelMatchesAPI(t, x) })
			require.Empty(t, f.Error)
			require.NotEmpty(t, f.Syncs)
			require.Positive(t, f.Totals.Ops.Writes())
			require.Equal(t, record.Modeled, f.Basis)
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

func generations(f *record.File) int {
	seen := map[int]bool{}
	for _, s := range f.Syncs {
		seen[s.Proxier] = true
	}
	return len(seen)
}

// reduced shrinks each shipped scenario for tests; a new shipped scenario
// needs an entry (TestReplayIsDeterministic says so).
var reduced = map[string][]string{
	"smoke":                nil,
	"scale-10k":            {"cluster.services=300", "timeline[4].churnEndpoints.duration=500ms"},
	"restart-stale-ipsets": {"cluster.services=300"},
	"churn-endpoints":      {"cluster.services=100", "timeline[4].churnEndpoints.duration=1s"},
	"coredns-restart":      {"cluster.services=20", "timeline[7].sleep=200ms"},
	"dual-stack":           {"cluster.services=100", "timeline[4].churnEndpoints.duration=1s"},
	"node-join":            {"cluster.services=200"},
	"scale-100k":           {"cluster.services=300", "timeline[5].churnEndpoints.duration=500ms", "timeline[8].churnEndpoints.duration=500ms"},
	"endpoint-heavy":       {"cluster.services=100", "timeline[4].churnEndpoints.duration=1s", "timeline[7].churnEndpoints.duration=1s"},
	"sync-kinds":           {"cluster.services=200", "timeline[14].churnEndpoints.duration=1s"},
	"ipset-limit":          {"cluster.services=200", "probes.services=20"},
}

// TestReplayIsDeterministic runs every shipped scenario, reduced, on the
// modeled clock twice with its seed: the runs must make the same syncs at
// the same modeled instants, each with the same trigger, the same kernel
// operations (reads and which family creates kube-ipvs0 included), the same
// modeled kernel and proxier time, and the probes must see the same
// outcomes at the same instants; another seed makes another run.
func TestReplayIsDeterministic(t *testing.T) {
	if testing.Short() {
		t.Skip("runs every shipped scenario three times")
	}
	shipped, err := ShippedScenarios()
	require.NoError(t, err)
	for _, sc := range shipped {
		t.Run(sc.Name, func(t *testing.T) {
			ns, err := LoadNodeSettings(sc.Name)
			require.NoError(t, err)
			if impl := ns.Proxier.Defaults().Implementation; impl != proxier.ImplementationKpsim {
				t.Skipf("runs %s, in its release's binary (its module's tests run it), whose runs are samples (map order)", impl)
			}
			sets, ok := reduced[sc.Name]
			require.True(t, ok, "give the new shipped scenario %s a reduced size in reduced", sc.Name)
			sets = append([]string{"sim.timeScale=0"}, sets...)
			a := runShipped(t, sc.Name, sets, nil)
			b := runShipped(t, sc.Name, sets, nil)
			require.Equal(t, record.ClockModeled, a.Clock)
			require.Positive(t, a.Totals.Ops.Writes())
			require.Equal(t, modeledRecord(a), modeledRecord(b))
			require.Equal(t, a.Totals.Ops.String(), b.Totals.Ops.String())
			require.Equal(t, a.Totals.Readded, b.Totals.Readded)
			c := runShipped(t, sc.Name, append(sets, "seed=987654"), nil)
			require.NotEqual(t, a.Totals.Ops.String(), c.Totals.Ops.String(), "another seed is another cluster")
		})
	}
}

// modeledRecord lists what a run on the modeled clock must repeat: every
// sync (relative start, durations and their kernel and proxier parts, what
// it knew, its operations), every step's span, and every probe attempt that
// failed, with times relative to the run's start.
func modeledRecord(f *record.File) []string {
	rel := func(t time.Time) time.Duration { return t.Sub(f.Start) }
	var out []string
	for _, s := range f.Syncs {
		out = append(out, fmt.Sprintf("sync %d %s #%03d %s full=%v at %v took %v (kernel %v proxier %v) services=%d endpoints=%d %v error=%q",
			s.Proxier, s.Family, s.Seq, s.Trigger, s.Full, rel(s.Start), s.Seconds, s.KernelSeconds, s.ProxierSeconds,
			s.Services, s.Endpoints, s.Ops, s.Error))
		for _, p := range s.Phases {
			out = append(out, fmt.Sprintf("  %s %v kernel %v %v", p.Name, p.Seconds, p.KernelSeconds, p.Ops))
		}
	}
	for _, st := range f.Steps {
		out = append(out, fmt.Sprintf("step %d %s %v-%v", st.Index, st.Label, rel(st.Start), rel(st.End)))
	}
	if p := f.Probes; p != nil {
		out = append(out, fmt.Sprintf("probes: %d attempts", p.Attempts))
		for _, fl := range p.Failures {
			out = append(out, fmt.Sprintf("probe %d failed at %v: %s (%vs)", fl.Target, rel(fl.Time), fl.Outcome, fl.Seconds))
		}
	}
	return out
}

// TestIncidentReproduction is restart-stale-ipsets at 300 services: the
// legacy initial sync with one ipset process per entry deletes what its
// lagging handlers have not reported yet and adds it back in the next sync;
// kpsim's defaults wait for the handlers and write nothing.
func TestIncidentReproduction(t *testing.T) {
	small := []string{"cluster.services=300", "sim.timeScale=0", "probes.services=5"}

	legacy := runShipped(t, "restart-stale-ipsets", append(slices.Clone(small), "proxier.initialSync=legacy", "proxier.ipset=exec"), nil)
	first, later := syncsOf(legacy, 1)
	require.Equal(t, 108, first.Services, "the first sync after the restart knew 36%% of 300 services, exactly")
	require.Positive(t, first.Ops[dataplane.OpIPSetDel], "it deleted entries it had not heard of")
	require.Equal(t, first.Ops[dataplane.OpIPSetDel], later[dataplane.OpIPSetAdd], "later syncs put every one of them back")
	require.Positive(t, legacy.Totals.Readded[dataplane.OpIPSetAdd])
	require.Positive(t, legacy.Totals.Readded[dataplane.OpIPVSServiceAdd])

	defaults := runShipped(t, "restart-stale-ipsets", small, nil)
	first, _ = syncsOf(defaults, 1)
	require.Equal(t, 300, first.Services, "the first sync after the restart waited for every handler")
	require.Zero(t, first.Ops.Writes(), "state that already matches is left alone: %v", first.Ops)
	require.Zero(t, defaults.Totals.Readded.Writes()+defaults.Totals.Readded[dataplane.OpIPSetAdd])
	require.Equal(t, dataplane.Ops{}, defaults.Totals.Readded)
}

// syncsOf returns the first IPv4 sync of a proxier generation and the
// operations of its later syncs.
func syncsOf(f *record.File, gen int) (first record.Sync, later dataplane.Ops) {
	n := 0
	for _, s := range f.Syncs {
		if s.Proxier != gen || s.Family != dataplane.IPv4 {
			continue
		}
		if n == 0 {
			first = s
		} else {
			later.Add(&s.Ops)
		}
		n++
	}
	return first, later
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
			// A streamed initial list (the informers', as from 1.35 on a node).
			if s := k8sapi.ListOptions(a).SendInitialEvents; a.GetVerb() == "watch" && a.GetResource().Resource == "services" && s != nil && *s {
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
	b := simBackend(t, s)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Stopped by the first sync during churnEndpoints (step 4): the proxier
	// has synced and probes are on. Smoke runs in lockstep, so a wall-clock
	// delay could outlast the whole run; a sync lands inside the step.
	var step atomic.Int32
	f, err := Run(ctx, s, RunOptions{Backend: b,
		OnStep: func(st StepStart) { step.Store(int32(st.Done)) },
		OnSync: func(record.Sync) {
			if step.Load() == 4 {
				cancel()
			}
		},
	})
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

// TestRunTellsItsClock: each step's start is told with its place in the
// timeline and the run's time on its clock, as its results record has it;
// and the durations' basis says what of them is measured: on the wall
// clock the proxier's own time.
func TestRunTellsItsClock(t *testing.T) {
	tests := []struct {
		scale string
		clock string
		basis string
	}{
		{"sim.timeScale=0", record.ClockModeled, record.Modeled},
		{"sim.timeScale=0.01", record.ClockWall, record.ModeledKernel},
	}
	for _, tc := range tests {
		t.Run(tc.clock, func(t *testing.T) {
			s, err := Parse("x.yaml", []byte(base), []string{tc.scale, "timeline[4].churnEndpoints.duration=200ms"})
			require.NoError(t, err)
			var told []StepStart
			f, err := Run(context.Background(), s, RunOptions{Backend: simBackend(t, s),
				OnStep: func(st StepStart) { told = append(told, st) }})
			require.NoError(t, err)
			require.Equal(t, tc.clock, f.Clock)
			require.Equal(t, tc.basis, f.Basis)
			require.Len(t, told, len(f.Steps))
			for i, st := range told {
				rec := f.Steps[i]
				require.Equal(t, StepStart{Done: i, Total: 5, Label: rec.Label, Elapsed: rec.Start.Sub(f.Start), Clock: tc.clock}, st)
			}
			require.Positive(t, told[4].Elapsed, "the churn starts after the proxier has synced")
		})
	}
}

func TestProbeTargets(t *testing.T) {
	s, err := Parse("x.yaml", []byte(base), []string{
		"proxier.families=[IPv4, IPv6]", "cluster.dualStack=1", "cluster.types={loadBalancer: 1}",
		"probes.kinds=[clusterip, nodeport, loadbalancer]", "probes.services=[ns-000/svc-00000]",
	})
	require.NoError(t, err)
	targets := s.targets
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

const export = `apiVersion: v1
kind: Service
metadata: {name: web, namespace: shop}
spec:
  type: NodePort
  clusterIP: 10.96.5.5
  ports: [{name: http, port: 80, targetPort: 8080, nodePort: 30080, protocol: TCP}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: web-abcde, namespace: shop, labels: {kubernetes.io/service-name: web}}
addressType: IPv4
ports: [{name: http, port: 8080, protocol: TCP}]
endpoints:
- addresses: [10.244.1.5]
  conditions: {ready: true}
  nodeName: node-1
- addresses: [10.244.2.7]
  nodeName: peer
`

const fromFile = `name: from-file
description: does a cluster exported from kubectl replay like a generated one?
seed: 9
sim: {timeScale: 0}
cluster:
  fromFile: export.yaml
proxier: {minSyncPeriod: 10ms}
probes:
  services: [shop/web]
  kinds: [clusterip, nodeport]
timeline:
  - createCluster
  - startProxier
  - waitSynced: {timeout: 1m}
  - probes: on
  - churnEndpoints: {rate: 20, duration: 300ms, services: [shop/web]}
  - addServices: {count: 3}
  - waitSynced: {timeout: 1m}
  - probes: off
`

func TestFromFile(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "export.yaml"), []byte(export), 0o644))
	file := filepath.Join(dir, "s.yaml")
	require.NoError(t, os.WriteFile(file, []byte(fromFile), 0o644))
	s, err := Load(file, nil)
	require.NoError(t, err)
	require.Len(t, s.set.Services, 1)
	require.Len(t, s.set.EndpointSlices, 1)
	f := runScenario(t, file, []byte(fromFile), nil, func(x *run) {
		requireKernelMatchesAPI(t, x)
		require.Len(t, x.r.liveKeys(), 4)
		for _, k := range x.r.liveKeys()[1:] {
			svc, err := x.r.currentService(x.r.service(k))
			require.NoError(t, err)
			require.NotEqual(t, "10.96.5.5", svc.Spec.ClusterIP, "added services avoid the file's addresses")
		}
	})
	require.Equal(t, []string{"clusterip", "nodeport"}, []string{f.Probes.Targets[0].Kind, f.Probes.Targets[1].Kind})
	require.Equal(t, "10.96.5.5:80", f.Probes.Targets[0].Address)
	require.Equal(t, "192.168.0.10:30080", f.Probes.Targets[1].Address)
	require.Positive(t, f.Totals.Ops[dataplane.OpIPVSDestinationAdd])
}

// BenchmarkScale10k runs the shipped scale-10k scenario (10,000 services,
// time scale 0) end to end: go test -run '^$' -bench Scale10k -benchtime 1x.
func BenchmarkScale10k(b *testing.B) {
	for b.Loop() {
		s, err := Load("scale-10k", nil)
		require.NoError(b, err)
		f, err := Run(context.Background(), s, RunOptions{Backend: simBackend(b, s)})
		require.NoError(b, err)
		b.ReportMetric(float64(len(f.Syncs)), "syncs/op")
		b.ReportMetric(f.Summary.Slowest.Seconds, "slowest-sync-modeled-s/op")
	}
}

// TestStopsAfterFailedSyncs: a proxier that cannot program the node (here
// every ipset write fails, as when a set is full) retries for ever; the run
// stops once stopAfterFailedSyncs syncs in a row have failed, says why, and
// still returns what it measured, the failed syncs counted apart.
func TestStopsAfterFailedSyncs(t *testing.T) {
	for _, tc := range []struct {
		name  string
		sets  []string
		limit int
	}{
		{"default", nil, 5},
		{"set", []string{"stopAfterFailedSyncs=3"}, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			file, data, err := Read("smoke")
			require.NoError(t, err)
			s, err := Parse(file, data, append([]string{"sim.timeScale=0"}, tc.sets...))
			require.NoError(t, err)
			b := simBackend(t, s)
			require.NoError(t, b.Kernel().InjectFault(sim.Fault{Op: dataplane.OpIPSetAdd, Err: syscall.ENOSPC}))
			f, err := s.run(context.Background(), RunOptions{Backend: b}, nil)
			require.ErrorContains(t, err, fmt.Sprintf("%d syncs in a row failed", tc.limit))
			require.ErrorContains(t, err, "no space left on device")
			require.NotNil(t, f)
			require.Equal(t, tc.limit, f.Summary.FailedSyncs)
			require.Contains(t, f.Error, "syncs in a row failed")
		})
	}
}

const drift = `name: drift
description: does the proxier repair the kernel when something else changes it?
seed: 11
cluster:
  services: 30
proxier:
  minSyncPeriod: 100ms
  syncPeriod: 5s
probes:
  interval: 100ms
  services: 3
timeline:
  - createCluster
  - startProxier
  - waitSynced
  - probes: on
  - sleep: 1s
  - kernelDrift: {services: 2, delete: virtualServers}
  - sleep: 6s
  - kernelDrift: {services: 2, delete: clusterIPEntries}
  - sleep: 6s
  - probes: off
`

// TestKernelDrift: virtual servers or KUBE-CLUSTER-IP entries deleted behind
// the proxier's back break the probed services until its next periodic full
// sync reads the kernel back and repairs it, within syncPeriod.
func TestKernelDrift(t *testing.T) {
	f := runScenario(t, "drift.yaml", []byte(drift), nil, func(x *run) { requireKernelMatchesAPI(t, x) })
	require.Empty(t, f.Error)
	vsDrift, entryDrift := f.Steps[5], f.Steps[7]
	require.Equal(t, "kernel-drift", vsDrift.Kind)
	outcomes := map[string]int{}
	services := map[string]bool{}
	for _, w := range f.Summary.Disruption.Windows {
		require.False(t, w.Start.Before(vsDrift.Start), "a window before any drift: %+v", w)
		require.LessOrEqual(t, w.End.Sub(w.Start), 5*time.Second+200*time.Millisecond, "repaired within syncPeriod: %+v", w)
		services[w.Service] = true
	}
	for _, fl := range f.Probes.Failures {
		outcomes[fl.Outcome]++
		if fl.Time.Before(entryDrift.Start) {
			require.Equal(t, sim.ProbeNoVirtualServer, fl.Outcome)
		} else {
			require.Equal(t, sim.ProbeRejected, fl.Outcome, "KUBE-IPVS-FILTER rejects a ClusterIP missing from KUBE-CLUSTER-IP")
		}
	}
	require.Len(t, services, 2, "the two probed services drifted")
	require.Positive(t, outcomes[sim.ProbeNoVirtualServer])
	require.Positive(t, outcomes[sim.ProbeRejected])
	var repairs int
	for _, s := range f.Syncs {
		if s.Trigger == "periodic" && s.Ops.Writes() > 0 {
			repairs++
		}
	}
	require.Equal(t, 2, repairs, "two periodic full syncs wrote: one repair per drift")
}

// A first sync still running at waitSynced's deadline on the modeled clock
// is cut there: the step ends at the deadline, and the sync is recorded
// as stopped, its modeled time so far its duration, its error short (one
// cut operation and a count, not each of thousands).
func TestDeadlineCutsTheSync(t *testing.T) {
	const scenario = `
name: deadline
description: a first sync cut off by waitSynced's deadline
seed: 1
backend: sim
sim: {profile: host, timeScale: 0}
cluster: {services: 2000, endpointsPerService: 2, nodes: 3}
timeline:
  - createCluster
  - startProxier
  - waitSynced: {timeout: 100ms}
`
	s, err := Parse("deadline.yaml", []byte(scenario), nil)
	require.NoError(t, err)
	f, err := s.run(context.Background(), RunOptions{Backend: simBackend(t, s)}, nil)
	require.ErrorContains(t, err, "not synced after 100ms of modeled time")
	require.Equal(t, err.Error(), f.Error)
	wait := f.Steps[2]
	require.Equal(t, 100*time.Millisecond, wait.End.Sub(wait.Start), "the wait lasts until its deadline")
	require.Len(t, f.Syncs, 1, "a stopped proxier begins no other sync")
	sy := f.Syncs[0]
	require.True(t, sy.Stopped)
	require.False(t, sy.Failed())
	require.Equal(t, wait.End, sy.Start.Add(time.Duration(sy.Seconds*float64(time.Second))), "cut at the deadline")
	require.Less(t, len(sy.Error), 300, sy.Error)
	require.Regexp(t, `the proxier was stopped: operation canceled \(and \d+ more operations the stop cut short\)$`, sy.Error)
	require.Positive(t, sy.Ops.Writes(), "what it did before the deadline is counted")

	// With time to finish, the first sync does; the next one, begun at
	// the instant the run ends, is cut there, not recorded as a sync of no
	// modeled time.
	s, err = Parse("deadline.yaml", []byte(scenario), []string{"timeline[2].waitSynced.timeout=5m"})
	require.NoError(t, err)
	f, err = s.run(context.Background(), RunOptions{Backend: simBackend(t, s)}, nil)
	require.NoError(t, err)
	require.Len(t, f.Syncs, 2)
	require.True(t, f.Syncs[0].Finished())
	last := f.Syncs[1]
	require.True(t, last.Stopped)
	require.Equal(t, dataplane.CutShort(0), last.Error)
	require.Equal(t, f.Steps[2].End, last.Start)
}

// TestFullIPSetLeavesEntriesOut: past an ipset's maxelem kpsim's proxier
// does as kube-proxy does (the shipped ipset-limit, 4 service ports past
// it): the sync completes without the entries that do not fit, drawn in
// each set apart, the run succeeds, and the sync record and the summary
// count them, set by set.
func TestFullIPSetLeavesEntriesOut(t *testing.T) {
	if testing.Short() {
		t.Skip("65,540 services: seconds of wall time")
	}
	const over = 4
	var cluster, ips []string
	f := runShipped(t, "ipset-limit", []string{fmt.Sprintf("cluster.services=%d", dataplane.DefaultMaxElem+over)}, func(x *run) {
		var err error
		cluster, err = x.dp.IPSet.Entries("KUBE-CLUSTER-IP")
		require.NoError(t, err)
		ips, err = x.dp.IPSet.Entries("KUBE-IPVS-IPS")
		require.NoError(t, err)
	})
	require.Empty(t, f.Error)
	require.Len(t, cluster, dataplane.DefaultMaxElem)
	require.Len(t, ips, dataplane.DefaultMaxElem)
	first := f.Syncs[0]
	require.Empty(t, first.Error)
	for _, set := range []string{"KUBE-CLUSTER-IP", "KUBE-IPVS-IPS"} {
		require.Equal(t, over, first.Unfit[set].Entries, "%s: %+v", set, first.Unfit)
	}
	// Drawn apart: some address kept in KUBE-IPVS-IPS lost its entry in
	// KUBE-CLUSTER-IP (KUBE-IPVS-FILTER rejects its connections).
	inCluster := map[string]bool{}
	for _, e := range cluster {
		ip, _, _ := strings.Cut(e, ",")
		inCluster[ip] = true
	}
	require.True(t, slices.ContainsFunc(ips, func(ip string) bool { return !inCluster[ip] }))
	var summary strings.Builder
	require.NoError(t, results.PrintSummary(&summary, f))
	u := first.Unfit["KUBE-CLUSTER-IP"]
	require.Regexp(t, fmt.Sprintf(`ipsets full +%d \(counted\): .*KUBE-CLUSTER-IP %d \(the lowest %s\)`, 2*over, over, regexp.QuoteMeta(u.First)), summary.String())
}
