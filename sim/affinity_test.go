package sim_test

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"sigs.k8s.io/knftables"

	"github.com/kpsim/kpsim/dataplane"
	"github.com/kpsim/kpsim/sim"
)

// clock is a modeled clock that tells its instant, for what the kernel
// keeps by time.
type clock struct{ now time.Time }

func (c *clock) Spend(d time.Duration) { c.now = c.now.Add(d) }
func (c *clock) Now() time.Time        { return c.now }

// chosen probes dst from client and says which endpoint took the
// connection: the last one serves was asked about and answered for.
func chosen(t *testing.T, k *sim.Kernel, client, dst netip.AddrPort) netip.AddrPort {
	t.Helper()
	var took netip.AddrPort
	ok, outcome := k.Probe(client, dst, dataplane.TCP, func(ap netip.AddrPort) bool { took = ap; return true })
	require.True(t, ok, outcome)
	return took
}

// TestIPVSPersistence: a persistent virtual server (ClientIP affinity)
// sends a client where its first connection went, port after port, until
// the timeout passes since its last connection or its real server is
// drained; a service without persistence round-robins.
func TestIPVSPersistence(t *testing.T) {
	k := newKernel(t, sim.Options{})
	c := &clock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	require.NoError(t, k.SetClock(c))
	_, err := k.EnsureDummy("kube-ipvs0")
	require.NoError(t, err)
	vip := netip.MustParseAddrPort("10.96.0.10:80")
	require.NoError(t, k.AddAddress("kube-ipvs0", netip.PrefixFrom(vip.Addr(), 32)))
	svc := vs("10.96.0.10", 80, dataplane.TCP)
	svc.Flags, svc.Timeout = dataplane.FlagPersistent, 60
	require.NoError(t, k.AddService(svc))
	eps := []string{"10.244.1.1:80", "10.244.1.2:80", "10.244.1.3:80"}
	for _, ep := range eps {
		require.NoError(t, k.AddDestination(svc.ServiceKey, rs(ep, 1)))
	}
	client := func(port uint16) netip.AddrPort { return netip.AddrPortFrom(netip.MustParseAddr("10.244.9.9"), port) }
	first := chosen(t, k, client(40000), vip)
	for i := range 5 {
		c.Spend(50 * time.Second) // each within the timeout of the last
		require.Equal(t, first, chosen(t, k, client(uint16(40001+i)), vip), "connection %d", i+1)
	}
	other := chosen(t, k, netip.MustParseAddrPort("10.244.8.8:40000"), vip)
	require.NotEqual(t, first, other, "another client is scheduled on its own")

	c.Spend(61 * time.Second)
	next := chosen(t, k, client(40100), vip)
	require.NotEqual(t, first, next, "the template expired: scheduled anew")
	require.Equal(t, next, chosen(t, k, client(40101), vip), "and kept again")

	require.NoError(t, k.UpdateDestination(svc.ServiceKey, rs(next.String(), 0)))
	require.NotEqual(t, next, chosen(t, k, client(40102), vip), "a drained real server's template expires at once")

	plain := vs("10.96.0.11", 80, dataplane.TCP)
	require.NoError(t, k.AddAddress("kube-ipvs0", netip.MustParsePrefix("10.96.0.11/32")))
	require.NoError(t, k.AddService(plain))
	for _, ep := range eps {
		require.NoError(t, k.AddDestination(plain.ServiceKey, rs(ep, 1)))
	}
	seen := map[netip.AddrPort]bool{}
	for i := range 3 {
		seen[chosen(t, k, client(uint16(41000+i)), netip.MustParseAddrPort("10.96.0.11:80"))] = true
	}
	require.Len(t, seen, 3, "without persistence: round-robin")
}

// loadDump writes the table a dump describes into the kernel's table, in
// one transaction.
func loadDump(t *testing.T, k *sim.Kernel, dump string) knftables.Interface {
	t.Helper()
	nft, err := k.Table(knftables.IPv4Family, "kube-proxy")
	require.NoError(t, err)
	tx := nft.NewTransaction()
	sim.AddDump(t, tx, dump)
	require.NoError(t, nft.Run(context.Background(), tx))
	return nft
}

// affinityDump is kube-proxy v1.37's table for one ClusterIP service of two
// endpoints with ClientIP affinity (timeout 60 s).
const affinityDump = `
add table ip kube-proxy
add map ip kube-proxy service-ips { type ipv4_addr . inet_proto . inet_service : verdict ; }
add set ip kube-proxy affinity-A { type ipv4_addr ; flags dynamic,timeout ; timeout 60s ; }
add set ip kube-proxy affinity-B { type ipv4_addr ; flags dynamic,timeout ; timeout 60s ; }
add chain ip kube-proxy nat-prerouting { type nat hook prerouting priority -100 ; }
add chain ip kube-proxy services
add chain ip kube-proxy endpoint-A
add chain ip kube-proxy endpoint-B
add chain ip kube-proxy service-X
add rule ip kube-proxy nat-prerouting jump services
add rule ip kube-proxy services ip daddr . meta l4proto . th dport vmap @service-ips
add rule ip kube-proxy endpoint-A update @affinity-A { ip saddr }
add rule ip kube-proxy endpoint-A meta l4proto tcp dnat to 10.180.0.4:80
add rule ip kube-proxy endpoint-B update @affinity-B { ip saddr }
add rule ip kube-proxy endpoint-B meta l4proto tcp dnat to 10.180.0.5:80
add rule ip kube-proxy service-X ip saddr @affinity-A goto endpoint-A
add rule ip kube-proxy service-X ip saddr @affinity-B goto endpoint-B
add rule ip kube-proxy service-X numgen random mod 2 vmap { 0 : goto endpoint-A , 1 : goto endpoint-B }
add element ip kube-proxy service-ips { 172.30.0.45 . tcp . 80 : goto service-X }
`

// TestNFTablesAffinity: kube-proxy's nftables rules for ClientIP affinity
// keep a client on its endpoint: the endpoint chain writes the client's
// address to its affinity set (traffic's write, which counts as no
// operation), the service chain sends it back there while the element
// lives, and once the set's timeout has passed since the last connection
// the element is gone and the client is scheduled anew.
func TestNFTablesAffinity(t *testing.T) {
	k := newKernel(t, sim.Options{})
	c := &clock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	require.NoError(t, k.SetClock(c))
	nft := loadDump(t, k, affinityDump)
	vip := netip.MustParseAddrPort("172.30.0.45:80")
	client := func(port uint16) netip.AddrPort { return netip.AddrPortFrom(netip.MustParseAddr("10.244.9.9"), port) }
	before := k.Ops()
	first := chosen(t, k, client(40000), vip)
	for i := range 5 {
		c.Spend(50 * time.Second)
		require.Equal(t, first, chosen(t, k, client(uint16(40001+i)), vip), "connection %d", i+1)
	}
	require.Equal(t, before, k.Ops(), "traffic's writes are no kernel operation")
	set := map[netip.AddrPort]string{netip.MustParseAddrPort("10.180.0.4:80"): "affinity-A", netip.MustParseAddrPort("10.180.0.5:80"): "affinity-B"}
	elems, err := nft.ListElements(context.Background(), "set", set[first])
	require.NoError(t, err)
	require.Len(t, elems, 1)
	require.Equal(t, []string{"10.244.9.9"}, elems[0].Key, "the state holds what traffic wrote")

	c.Spend(61 * time.Second)
	elems, err = nft.ListElements(context.Background(), "set", set[first])
	require.NoError(t, err)
	require.Empty(t, elems, "the element expired: gone")
	seen := map[netip.AddrPort]bool{}
	for i := range 4 {
		c.Spend(61 * time.Second) // each connection after the last one's element expired
		seen[chosen(t, k, client(uint16(40100+i)), vip)] = true
	}
	require.Len(t, seen, 2, "without a live element the client is scheduled anew, over both endpoints")
}
