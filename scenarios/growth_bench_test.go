package scenarios

import (
	"fmt"
	"net/netip"
	"runtime"
	"testing"

	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/kpsim/kpsim/dataplane"
	"github.com/kpsim/kpsim/objects"
	"github.com/kpsim/kpsim/proxier"
	"github.com/kpsim/kpsim/record"
)

// growthSizes are the cluster sizes BenchmarkProxierGrowth runs at; with
// -short only the first. The largest is past what kube-proxy's ipsets hold
// (maxelem 65,536; KUBE-CLUSTER-IP needs an entry per service port): there,
// as kube-proxy does, the proxier leaves out the entries that do not fit.
var growthSizes = []int{10_000, 50_000, 100_000}

// growthChanges is how many EndpointSlices the change sync has changed.
const growthChanges = 10

// BenchmarkProxierGrowth shows how the proxier's syncs on the in-memory
// kernel grow with the cluster: at each size the first sync onto an empty
// kernel, a sync after growthChanges EndpointSlice changes, and a periodic
// full sync with nothing to change. Besides ns/op and B/op it reports them
// per service (ns/svc, B/svc: allocated), so that growth faster than
// linear shows as a per-service figure that rises with the size, and for
// the first sync what stays live afterwards, the proxier's state and the
// kernel's tables (live-B/svc). The cluster is generated as scale-10k's is,
// with the NodePort and LoadBalancer shares lowered so that 100,000
// services fit the node port range, and pod addresses from a /12.
//
//	go test ./scenarios -run '^$' -bench ProxierGrowth -benchtime 1x
func BenchmarkProxierGrowth(b *testing.B) {
	for _, n := range growthSizes {
		b.Run(fmt.Sprintf("services=%d", n), func(b *testing.B) {
			if testing.Short() && n > growthSizes[0] {
				b.Skip("a large cluster: skipped with -short")
			}
			set, cfg := growthCluster(b, n)
			b.Run("first-sync", func(b *testing.B) {
				var base, live int64
				perService(b, n, func() *proxier.Proxier {
					runtime.GC()
					base = heapLive()
					return growthProxier(b, set, cfg)
				}, (*proxier.Proxier).Sync, func(p *proxier.Proxier) {
					runtime.GC()
					live = heapLive() - base
					runtime.KeepAlive(p)
				})
				b.ReportMetric(float64(live)/float64(n), "live-B/svc")
			})
			p := growthProxier(b, set, cfg)
			if rec := p.Sync(); rec.Failed() {
				b.Fatalf("first sync: %s", rec.Error)
			}
			slices := set.EndpointSlices
			round := 0
			b.Run(fmt.Sprintf("%d-changes", growthChanges), func(b *testing.B) {
				perService(b, n, func() *proxier.Proxier {
					round++
					for i := range growthChanges {
						j := i * len(slices) / growthChanges
						moved := movedEndpoint(slices[j], round*growthChanges+i)
						p.OnEndpointSliceUpdate(slices[j], moved)
						slices[j] = moved
					}
					return p
				}, func(p *proxier.Proxier) record.Sync {
					rec := p.Sync()
					if rec.Ops[dataplane.OpIPVSDestinationAdd] == 0 {
						b.Fatalf("a sync after %d moved endpoints added no real server: %v", growthChanges, rec.Ops)
					}
					return rec
				}, nil)
			})
			b.Run("periodic-no-change", func(b *testing.B) {
				perService(b, n, func() *proxier.Proxier { return p }, func(p *proxier.Proxier) record.Sync {
					rec := p.SyncFull()
					if w := rec.Ops.Writes(); w != 0 {
						b.Fatalf("a periodic sync with nothing changed wrote %d times: %v", w, rec.Ops)
					}
					return rec
				}, nil)
			})
		})
	}
}

// perService times sync on proxiers from prepare and reports, per service
// of the n, the time and the bytes allocated by the syncs. prepare and after
// (nil: nothing to do after a sync) are not timed.
func perService(b *testing.B, n int, prepare func() *proxier.Proxier, sync func(*proxier.Proxier) record.Sync, after func(*proxier.Proxier)) {
	b.ReportAllocs()
	var allocated uint64
	var ms runtime.MemStats
	for b.Loop() {
		b.StopTimer()
		p := prepare()
		runtime.ReadMemStats(&ms)
		before := ms.TotalAlloc
		b.StartTimer()
		rec := sync(p)
		b.StopTimer()
		runtime.ReadMemStats(&ms)
		allocated += ms.TotalAlloc - before
		if rec.Failed() {
			b.Fatalf("sync %d: %s", rec.Seq, rec.Error)
		}
		if after != nil {
			after(p)
		}
		b.StartTimer()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/svc")
	b.ReportMetric(float64(allocated)/float64(b.N)/float64(n), "B/svc")
}

// heapLive is the heap in use: after a runtime.GC, what is reachable.
func heapLive() int64 {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}

// growthCluster generates a cluster of n services with the scenario's own
// generator.
func growthCluster(b *testing.B, n int) (*objects.Set, proxier.Config) {
	b.Helper()
	spec := fmt.Sprintf(`name: growth
description: How do the proxier's syncs grow with the cluster?
seed: 10000
cluster:
  services: %d
  types: {nodePort: 0.015, loadBalancer: 0.01, externalIPs: 0.02}
  portsPerService: 1
  endpointsPerService: 3
  namespaces: 100
  nodes: 50
  udp: 0.05
  sessionAffinity: 0.05
  externalTrafficPolicyLocal: 0.2
  podCIDRs: [10.0.0.0/12]
timeline: [createCluster]
`, n)
	s, err := Parse("growth", []byte(spec), nil)
	if err != nil {
		b.Fatal(err)
	}
	return s.ClusterObjects(), proxier.Config{NodeName: s.Cluster.Node.Name}
}

// growthProxier is an IPv4 proxier on a fresh in-memory kernel whose
// handlers have heard of set, its informers synced.
func growthProxier(b *testing.B, set *objects.Set, cfg proxier.Config) *proxier.Proxier {
	return benchProxier(b, newBenchKernel(b).Dataplane(), proxier.Options{}, set, cfg)
}

// movedEndpoint is s with its first endpoint at the i-th address of
// 100.64.0.0/10, which the generator allocates nothing from: a pod
// replaced, one real server in and one out.
func movedEndpoint(s *discoveryv1.EndpointSlice, i int) *discoveryv1.EndpointSlice {
	out := s.DeepCopy()
	if len(out.Endpoints) > 0 {
		a := netip.AddrFrom4([4]byte{100, 64 + byte(i>>16&63), byte(i >> 8), byte(i)})
		out.Endpoints[0].Addresses = []string{a.String()}
	}
	return out
}
