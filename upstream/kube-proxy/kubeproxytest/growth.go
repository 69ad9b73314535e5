package kubeproxytest

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"testing"

	"github.com/kpsim/kpsim/proxier"
	"github.com/kpsim/kpsim/record"
	"github.com/kpsim/kpsim/scenarios"
	"github.com/kpsim/kpsim/scenarios/backend"
	kubeproxy "github.com/kpsim/kpsim/upstream/kube-proxy"
)

// growthSizes are the cluster sizes NFTablesGrowth runs at, those of
// scenarios' BenchmarkProxierGrowth for kpsim's proxier; with -short only
// the first.
var growthSizes = []int{10_000, 50_000, 100_000}

// NFTablesGrowth shows how release r's nftables mode on the in-memory
// kernel grows with the cluster: the shipped scale-10k scenario (a first
// sync, endpoint churn, services added and deleted) at each size, on
// the modeled clock. Per service it reports the wall time of the whole run
// (ns/svc) and of the release's first sync (first-ns/svc, the sync's own
// wall time: the release's code and the in-memory kernel's), the bytes
// allocated over the run (B/svc), and what is live once the timeline is
// done, before the proxier stops (live-B/svc: the cluster, the release's
// state, the kernel's tables). Figures flat across sizes are linear
// growth.
//
//	go test -tags "$tags" ./cmd/kpsim -run '^$' -bench NFTablesGrowth -benchtime 1x
func NFTablesGrowth(b *testing.B, r kubeproxy.Release) {
	impl := register(r)
	for _, n := range growthSizes {
		b.Run(fmt.Sprintf("services=%d", n), func(b *testing.B) {
			if testing.Short() && n > growthSizes[0] {
				b.Skip("a large cluster: skipped with -short")
			}
			var first float64
			var live, allocated uint64
			var ms runtime.MemStats
			for b.Loop() {
				b.StopTimer()
				s, err := scenarios.Load("scale-10k", []string{fmt.Sprintf("cluster.services=%d", n),
					"proxier.implementation=" + impl.Name, "proxier.mode=" + string(proxier.ModeNFTables)})
				if err != nil {
					b.Fatal(err)
				}
				spec, err := s.BackendSpec()
				if err != nil {
					b.Fatal(err)
				}
				sb, err := backend.NewSim(spec)
				if err != nil {
					b.Fatal(err)
				}
				runtime.GC()
				runtime.ReadMemStats(&ms)
				base, before := ms.HeapAlloc, ms.TotalAlloc
				b.StartTimer()
				f, err := scenarios.Run(context.Background(), s, scenarios.RunOptions{Backend: sb, BeforeStop: func() {
					runtime.GC()
					runtime.ReadMemStats(&ms)
					live += ms.HeapAlloc - min(base, ms.HeapAlloc)
				}})
				b.StopTimer()
				if err != nil {
					b.Fatalf("%d services: %v", n, err)
				}
				i := slices.IndexFunc(f.Syncs, func(s record.Sync) bool { return s.Proxier == 0 && s.Trigger == proxier.TriggerInitial })
				if i < 0 || f.Syncs[i].Error != "" || f.Syncs[i].Stopped {
					b.Fatalf("%d services: no first sync that ran to its end", n)
				}
				first += f.Syncs[i].Wall
				runtime.ReadMemStats(&ms)
				allocated += ms.TotalAlloc - before
				b.StartTimer()
			}
			per := float64(b.N) * float64(n)
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/per, "ns/svc")
			b.ReportMetric(first*1e9/per, "first-ns/svc")
			b.ReportMetric(float64(allocated)/per, "B/svc")
			b.ReportMetric(float64(live)/per, "live-B/svc")
		})
	}
}
