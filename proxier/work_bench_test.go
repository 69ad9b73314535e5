package proxier

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/kpsim/kpsim/proxier/dataplane"
)

// The benchmarks here price the proxier's own work for cost profiles: on a
// modeled clock that work cannot be measured (runs would not repeat), so it
// is charged per unit of dataplane.Work. They run the proxier against a
// kernel that does nothing (nullKernel), so that the wall time is the
// proxier's logic alone, and report the units the sync counted next to it:
//
//	go test ./proxier -run '^$' -bench ProxierWork -count 5
//
// A least-squares fit of ns/op against syncs, ports, endpoints and entries
// per op over the cases gives the profile's "proxier" section
// (sim/profiles/host.json says which run it came from).

// nullKernel accepts every operation and holds nothing: every read is empty.
type nullKernel struct{ work dataplane.Work }

func (n *nullKernel) Services() ([]dataplane.VirtualServer, error) { return nil, nil }
func (n *nullKernel) AddService(dataplane.VirtualServer) error     { return nil }
func (n *nullKernel) UpdateService(dataplane.VirtualServer) error  { return nil }
func (n *nullKernel) DeleteService(dataplane.ServiceKey) error     { return nil }
func (n *nullKernel) Destinations(dataplane.ServiceKey) ([]dataplane.RealServer, error) {
	return nil, nil
}
func (n *nullKernel) AddDestination(dataplane.ServiceKey, dataplane.RealServer) error { return nil }
func (n *nullKernel) UpdateDestination(dataplane.ServiceKey, dataplane.RealServer) error {
	return nil
}
func (n *nullKernel) DeleteDestination(dataplane.ServiceKey, dataplane.RealServer) error {
	return nil
}
func (n *nullKernel) Sets() ([]dataplane.Set, error)                { return nil, nil }
func (n *nullKernel) CreateSet(dataplane.Set) error                 { return nil }
func (n *nullKernel) DestroySet(string) error                       { return nil }
func (n *nullKernel) Apply([]dataplane.SetChange) error             { return nil }
func (n *nullKernel) Restore(dataplane.Family, []byte) error        { return nil }
func (n *nullKernel) Save(dataplane.Family, string) ([]byte, error) { return nil, nil }
func (n *nullKernel) EnsureDummy(string) (bool, error)              { return false, nil }
func (n *nullKernel) DeleteLink(string) error                       { return nil }
func (n *nullKernel) Addresses(string, dataplane.Family) ([]netip.Addr, error) {
	return nil, nil
}
func (n *nullKernel) AddAddress(string, netip.Prefix) error { return nil }
func (n *nullKernel) DelAddress(string, netip.Prefix) error { return nil }
func (n *nullKernel) LocalAddresses(dataplane.Family, ...string) ([]dataplane.InterfaceAddr, error) {
	return []dataplane.InterfaceAddr{{Link: "eth0", Prefix: netip.MustParsePrefix("192.168.0.10/24")}}, nil
}
func (n *nullKernel) Sysctl(string) (string, error)                 { return "1", nil }
func (n *nullKernel) SetSysctl(string, string) error                { return nil }
func (n *nullKernel) Delete(dataplane.ConntrackFilter) (int, error) { return 0, nil }
func (n *nullKernel) Kernel() (total, unspent time.Duration)        { return 0, 0 }
func (n *nullKernel) Clocked() bool                                 { return false }
func (n *nullKernel) Compute(w dataplane.Work) time.Duration {
	n.work.Syncs += w.Syncs
	n.work.Ports += w.Ports
	n.work.Endpoints += w.Endpoints
	n.work.Entries += w.Entries
	return 0
}

func (n *nullKernel) dataplane() dataplane.Dataplane {
	return dataplane.Dataplane{IPVS: n, IPSet: n, IPTables: n, Links: n, Sysctls: n, Conntrack: n, Model: n}
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
				k := &nullKernel{}
				p := nullProxier(b, k)
				populateWith(p, c.services, c.endpoints)
				k.work = dataplane.Work{}
				b.StartTimer()
				if rec := p.SyncFull(); rec.Error != "" {
					b.Fatal(rec.Error)
				}
				b.StopTimer()
				work.Syncs += k.work.Syncs
				work.Ports += k.work.Ports
				work.Endpoints += k.work.Endpoints
				work.Entries += k.work.Entries
				b.StartTimer()
			}
			reportWork(b, work)
		})
	}
	b.Run("changes/10of10000x3", func(b *testing.B) {
		k := &nullKernel{}
		p := nullProxier(b, k)
		populateWith(p, 10000, 3)
		if rec := p.SyncFull(); rec.Error != "" {
			b.Fatal(rec.Error)
		}
		k.work = dataplane.Work{}
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
		reportWork(b, k.work)
	})
	b.Run("nochange/10000x3", func(b *testing.B) {
		k := &nullKernel{}
		p := nullProxier(b, k)
		populateWith(p, 10000, 3)
		if rec := p.SyncFull(); rec.Error != "" {
			b.Fatal(rec.Error)
		}
		k.work = dataplane.Work{}
		for b.Loop() {
			if rec := p.Sync(); rec.Error != "" {
				b.Fatal(rec.Error)
			}
		}
		reportWork(b, k.work)
	})
}

func nullProxier(b testing.TB, k *nullKernel) *Proxier {
	p, err := New(Config{NodeName: testNode}, dataplane.IPv4, k.dataplane(), Options{})
	if err != nil {
		b.Fatal(err)
	}
	p.OnServicesSynced()
	p.OnEndpointSlicesSynced()
	return p
}
