package sim_test

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kpsim/kpsim/dataplane"
	"github.com/kpsim/kpsim/sim"
)

// iptablesMode is the shape of kube-proxy's iptables mode for a ClusterIP
// 10.96.0.10 with three endpoints on tcp:80 (statistic rules), one on
// udp:53, and 10.96.0.20:80 with none (rejected in the filter table).
const iptablesMode = `*nat
:KUBE-SERVICES - [0:0]
:KUBE-MARK-MASQ - [0:0]
:KUBE-SVC-WEB - [0:0]
:KUBE-SEP-A - [0:0]
:KUBE-SEP-B - [0:0]
:KUBE-SEP-C - [0:0]
:KUBE-SVC-DNS - [0:0]
:KUBE-SEP-D - [0:0]
-A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A OUTPUT -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A KUBE-MARK-MASQ -j MARK --or-mark 0x4000
-A KUBE-SERVICES -m comment --comment "ns/web:http cluster IP" -m tcp -p tcp -d 10.96.0.10/32 --dport 80 -j KUBE-SVC-WEB
-A KUBE-SERVICES -m comment --comment "ns/dns:dns cluster IP" -m udp -p udp -d 10.96.0.10/32 --dport 53 -j KUBE-SVC-DNS
-A KUBE-SVC-WEB -m comment --comment "ns/web:http cluster IP" -m tcp -p tcp -d 10.96.0.10/32 --dport 80 ! -s 10.244.0.0/16 -j KUBE-MARK-MASQ
-A KUBE-SVC-WEB -m comment --comment "ns/web:http -> 10.244.1.1:8080" -m statistic --mode random --probability 0.3333333333 -j KUBE-SEP-A
-A KUBE-SVC-WEB -m comment --comment "ns/web:http -> 10.244.1.2:8080" -m statistic --mode random --probability 0.5000000000 -j KUBE-SEP-B
-A KUBE-SVC-WEB -m comment --comment "ns/web:http -> 10.244.1.3:8080" -j KUBE-SEP-C
-A KUBE-SEP-A -m comment --comment ns/web:http -s 10.244.1.1/32 -j KUBE-MARK-MASQ
-A KUBE-SEP-A -m comment --comment ns/web:http -m tcp -p tcp -j DNAT --to-destination 10.244.1.1:8080
-A KUBE-SEP-B -m comment --comment ns/web:http -s 10.244.1.2/32 -j KUBE-MARK-MASQ
-A KUBE-SEP-B -m comment --comment ns/web:http -m recent --set --name KUBE-SEP-B --mask 255.255.255.255 --rsource -m tcp -p tcp -j DNAT --to-destination 10.244.1.2:8080
-A KUBE-SEP-C -m comment --comment ns/web:http -s 10.244.1.3/32 -j KUBE-MARK-MASQ
-A KUBE-SEP-C -m comment --comment ns/web:http -m tcp -p tcp -j DNAT --to-destination 10.244.1.3:8080
-A KUBE-SVC-DNS -m comment --comment "ns/dns:dns -> 10.244.2.1:53" -j KUBE-SEP-D
-A KUBE-SEP-D -m comment --comment ns/dns:dns -m udp -p udp -j DNAT --to-destination 10.244.2.1:53
COMMIT
*filter
:KUBE-SERVICES - [0:0]
-A FORWARD -m conntrack --ctstate NEW -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A OUTPUT -m conntrack --ctstate NEW -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A KUBE-SERVICES -m comment --comment "ns/empty:http has no endpoints" -m tcp -p tcp -d 10.96.0.20/32 --dport 80 -j REJECT --reject-with icmp-port-unreachable
COMMIT
`

// TestProbeIPTablesMode: a pod's connections to a ClusterIP reach its
// endpoints through the nat table's DNAT alone (no IPVS, no address bound
// for it), taking the statistic rules in turn and passing over endpoints
// that do not serve; a service without endpoints is rejected by the filter
// table; a UDP flow follows its endpoint until it stops serving.
func TestProbeIPTablesMode(t *testing.T) {
	k := newKernel(t, sim.Options{})
	require.NoError(t, k.Restore(dataplane.IPv4, []byte(iptablesMode)))
	pod := netip.MustParseAddrPort("10.244.9.9:40000")
	web := netip.MustParseAddrPort("10.96.0.10:80")
	down := map[netip.AddrPort]bool{}
	var reached []netip.AddrPort
	serves := func(ap netip.AddrPort) bool { // the model may ask twice of the endpoint it takes
		if !down[ap] && (len(reached) == 0 || reached[len(reached)-1] != ap) {
			reached = append(reached, ap)
		}
		return !down[ap]
	}
	for range 4 {
		ok, outcome := k.Probe(pod, web, dataplane.TCP, serves)
		require.True(t, ok, outcome)
	}
	ep := func(s string) netip.AddrPort { return netip.MustParseAddrPort(s) }
	require.Equal(t, []netip.AddrPort{ep("10.244.1.1:8080"), ep("10.244.1.2:8080"), ep("10.244.1.3:8080"), ep("10.244.1.1:8080")}, reached,
		"the statistic rules in turn, the recent --set rule among them")

	down[ep("10.244.1.2:8080")] = true
	reached = nil
	for range 2 {
		ok, outcome := k.Probe(pod, web, dataplane.TCP, serves)
		require.True(t, ok, outcome)
	}
	require.Equal(t, []netip.AddrPort{ep("10.244.1.3:8080"), ep("10.244.1.1:8080")}, reached, "the endpoint that does not serve is passed over")

	down[ep("10.244.1.1:8080")], down[ep("10.244.1.3:8080")] = true, true
	ok, outcome := k.Probe(pod, web, dataplane.TCP, serves)
	require.False(t, ok)
	require.Equal(t, sim.ProbeNoDestination, outcome)

	ok, outcome = k.Probe(pod, ep("10.96.0.20:80"), dataplane.TCP, serves)
	require.False(t, ok)
	require.Equal(t, sim.ProbeRejected, outcome, "kube-proxy's REJECT for a service without endpoints")
	ok, outcome = k.Probe(pod, ep("10.96.0.30:80"), dataplane.TCP, serves)
	require.False(t, ok)
	require.Equal(t, sim.ProbeNoAddress, outcome, "no rule for it at all")

	dns := ep("10.96.0.10:53")
	ok, outcome = k.Probe(pod, dns, dataplane.UDP, serves)
	require.True(t, ok, outcome)
	down[ep("10.244.2.1:53")] = true
	ok, outcome = k.Probe(pod, dns, dataplane.UDP, serves)
	require.False(t, ok)
	require.Equal(t, sim.ProbeStaleConntrack, outcome, "the datagram follows its flow to the endpoint that went")

	ok, outcome = k.ProbeFromNode(web, dataplane.TCP, func(netip.AddrPort) bool { return true })
	require.True(t, ok, "the node's own connection through nat OUTPUT: %s", outcome)
}
