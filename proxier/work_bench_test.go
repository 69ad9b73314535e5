package proxier

import (
	"fmt"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/kpsim/kpsim/proxier/dataplane"
	"github.com/kpsim/kpsim/sim"
)

// The benchmarks here price the proxier's own work for cost profiles: on a
// modeled clock that work cannot be measured (runs would not repeat), so it
// is charged per unit of dataplane.Work. They run the proxier against a
// kernel that does nothing (emptyKernel), so that the wall time is the
// proxier's logic alone, and report the units the sync counted next to it:
//
//	go test ./proxier -run '^$' -bench ProxierWork -count 5
//
// A least-squares fit of ns/op against syncs, ports, endpoints and entries
// per op over the cases gives the profile's "proxier" section
// (sim/profiles/host.json says which run it came from).

// emptyKernel is a kernel with nothing programmed that takes every write
// without effect: a sync against it is the proxier's own work alone.
func emptyKernel(t testing.TB) *dataplane.Replay {
	t.Helper()
	k, err := sim.New(sim.Options{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := dataplane.Capture(k.Dataplane(), dataplane.IPv4)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// populateWith tells p about n services, each with the given number of endpoints and, for
// every fifth, a node port.
func populateWith(p *Proxier, n, endpoints int) {
	for i := range n {
		name := fmt.Sprintf("svc-%d", i)
		ip := fmt.Sprintf("10.96.%d.%d", i/250, i%250+1)
		var opts []svcOpt
		if i%5 == 0 {
			opts = append(opts, withNodePort(int32(30000+i%2000)))
		}
		p.OnServiceAdd(service("default", name, ip, opts...))
		addrs := make([]string, endpoints)
		for j := range addrs {
			addrs[j] = fmt.Sprintf("10.%d.%d.%d", 1+j, i/250, i%250+1)
		}
		p.OnEndpointSliceAdd(slice("default", name, name+"-1", 8080, v1.ProtocolTCP, eps(addrs...)...))
	}
}

// reportWork reports the work units per op the syncs counted.
func reportWork(b *testing.B, w dataplane.Work) {
	n := float64(b.N)
	b.ReportMetric(float64(w.Syncs)/n, "syncs/op")
	b.ReportMetric(float64(w.Derived)/n, "derived/op")
	b.ReportMetric(float64(w.Ports)/n, "ports/op")
	b.ReportMetric(float64(w.Endpoints)/n, "endpoints/op")
	b.ReportMetric(float64(w.Entries)/n, "entries/op")
}

func BenchmarkProxierWork(b *testing.B) {
	cases := []struct{ services, endpoints int }{{10000, 1}, {10000, 3}, {10000, 10}, {2000, 3}}
	for _, c := range cases {
		b.Run(fmt.Sprintf("full/%dx%d", c.services, c.endpoints), func(b *testing.B) {
			var work dataplane.Work
			for b.Loop() {
				b.StopTimer()
				k := emptyKernel(b)
				p := nullProxier(b, k)
				populateWith(p, c.services, c.endpoints)
				k.Work()
				b.StartTimer()
				if rec := p.SyncFull(); rec.Error != "" {
					b.Fatal(rec.Error)
				}
				b.StopTimer()
				w := k.Work()
				work.Syncs += w.Syncs
				work.Derived += w.Derived
				work.Ports += w.Ports
				work.Endpoints += w.Endpoints
				work.Entries += w.Entries
				b.StartTimer()
			}
			reportWork(b, work)
		})
	}
	b.Run("changes/10of10000x3", func(b *testing.B) {
		k := emptyKernel(b)
		p := nullProxier(b, k)
		populateWith(p, 10000, 3)
		if rec := p.SyncFull(); rec.Error != "" {
			b.Fatal(rec.Error)
		}
		k.Work()
		round := 0
		for b.Loop() {
			b.StopTimer()
			round++
			churnEndpoints(p, 10, round)
			b.StartTimer()
			if rec := p.Sync(); rec.Error != "" {
				b.Fatal(rec.Error)
			}
		}
		reportWork(b, k.Work())
	})
	b.Run("nochange/10000x3", func(b *testing.B) {
		k := emptyKernel(b)
		p := nullProxier(b, k)
		populateWith(p, 10000, 3)
		if rec := p.SyncFull(); rec.Error != "" {
			b.Fatal(rec.Error)
		}
		k.Work()
		for b.Loop() {
			if rec := p.Sync(); rec.Error != "" {
				b.Fatal(rec.Error)
			}
		}
		reportWork(b, k.Work())
	})
}

func nullProxier(b testing.TB, k *dataplane.Replay) *Proxier {
	p, err := New(Config{NodeName: testNode}, dataplane.IPv4, k.Dataplane(), Options{})
	if err != nil {
		b.Fatal(err)
	}
	p.OnServicesSynced()
	p.OnEndpointSlicesSynced()
	return p
}
