package sim_test

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kpsim/kpsim/dataplane"
	"github.com/kpsim/kpsim/sim"
)

// BenchmarkFullSync is the kernel side of a first sync of 10,000 services
// with 3 endpoints each: what the proxier's budget must leave room for.
func BenchmarkFullSync(b *testing.B) {
	const services = 10000
	keys := make([]dataplane.VirtualServer, services)
	entries := make([]string, services)
	vips := make([]netip.Prefix, services)
	dests := make([][3]dataplane.RealServer, services)
	for i := range keys {
		a := netip.AddrFrom4([4]byte{10, 96, byte(i >> 8), byte(i)})
		keys[i] = vs(a.String(), 80, dataplane.TCP)
		entries[i] = fmt.Sprintf("%s,tcp:80", a)
		vips[i] = netip.PrefixFrom(a, 32)
		for j := range 3 {
			dests[i][j] = dataplane.RealServer{Address: netip.AddrFrom4([4]byte{10, 244, byte(i >> 8), byte(i)}), Port: uint16(8080 + j), Weight: 1}
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		k := newKernel(b, sim.Options{IPSetStrategy: dataplane.IPSetNetlink})
		_, err := k.EnsureDummy("kube-ipvs0")
		require.NoError(b, err)
		require.NoError(b, k.CreateSet(dataplane.Set{Name: "KUBE-CLUSTER-IP", Type: dataplane.HashIPPort}))
		for i, s := range keys {
			require.NoError(b, k.AddService(s))
			require.NoError(b, k.AddAddress("kube-ipvs0", vips[i]))
			for _, d := range dests[i] {
				require.NoError(b, k.AddDestination(s.ServiceKey, d))
			}
		}
		require.NoError(b, k.Apply([]dataplane.SetChange{{Set: "KUBE-CLUSTER-IP", Add: entries}}))
		// The next sync reads everything back.
		if _, err := k.Services(); err != nil {
			b.Fatal(err)
		}
		if _, err := k.Sets(); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkAddService(b *testing.B) {
	k := newKernel(b, sim.Options{})
	svc := vs("10.96.0.1", 80, dataplane.TCP)
	b.ReportAllocs()
	for b.Loop() {
		if err := k.AddService(svc); err != nil {
			b.Fatal(err)
		}
		if err := k.DeleteService(svc.ServiceKey); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkIPSetApply(b *testing.B) {
	k := newKernel(b, sim.Options{})
	require.NoError(b, k.CreateSet(dataplane.Set{Name: "KUBE-CLUSTER-IP", Type: dataplane.HashIPPort}))
	batch := []dataplane.SetChange{{Set: "KUBE-CLUSTER-IP", Add: []string{"10.96.0.1,tcp:80"}}}
	undo := []dataplane.SetChange{{Set: "KUBE-CLUSTER-IP", Del: []string{"10.96.0.1,tcp:80"}}}
	b.ReportAllocs()
	for b.Loop() {
		if err := k.Apply(batch); err != nil {
			b.Fatal(err)
		}
		if err := k.Apply(undo); err != nil {
			b.Fatal(err)
		}
	}
}
