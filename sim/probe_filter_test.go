package sim_test

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kpsim/kpsim/dataplane"
	"github.com/kpsim/kpsim/sim"
)

// kubeIPVSFilter is kube-proxy's filter-table access filter, hooked from INPUT.
const kubeIPVSFilter = `-I INPUT -m comment --comment "kubernetes ipvs access filter" -j KUBE-IPVS-FILTER
-A KUBE-IPVS-FILTER -m set --match-set KUBE-CLUSTER-IP dst,dst -j RETURN
-A KUBE-IPVS-FILTER -m set --match-set KUBE-HEALTH-CHECK-NODE-PORT dst -j RETURN
-A KUBE-IPVS-FILTER -m conntrack --ctstate NEW -m set --match-set KUBE-IPVS-IPS dst -j REJECT
`

// filterNode is a node serving 10.96.0.10 on tcp:80 and udp:53 with one
// ready endpoint each, the service sets filled, and rules restored.
func filterNode(t *testing.T, rules string) *sim.Kernel {
	t.Helper()
	k := newKernel(t, sim.Options{})
	_, err := k.EnsureDummy("kube-ipvs0")
	require.NoError(t, err)
	require.NoError(t, k.AddAddress("kube-ipvs0", netip.MustParsePrefix("10.96.0.10/32")))
	for _, v := range []dataplane.VirtualServer{vs("10.96.0.10", 80, dataplane.TCP), vs("10.96.0.10", 53, dataplane.UDP)} {
		require.NoError(t, k.AddService(v))
		require.NoError(t, k.AddDestination(v.ServiceKey, rs(fmt.Sprintf("10.244.1.5:%d", v.Port), 1)))
	}
	for _, s := range []dataplane.Set{
		{Name: "KUBE-CLUSTER-IP", Type: dataplane.HashIPPort},
		{Name: "KUBE-IPVS-IPS", Type: dataplane.HashIP},
		{Name: "KUBE-HEALTH-CHECK-NODE-PORT", Type: dataplane.BitmapPort, PortTo: 65535},
		{Name: "SOURCE-CIDR", Type: dataplane.HashIPPortNet},
	} {
		require.NoError(t, k.CreateSet(s))
	}
	require.NoError(t, k.Apply([]dataplane.SetChange{
		{Set: "KUBE-CLUSTER-IP", Add: []string{"10.96.0.10,tcp:80", "10.96.0.10,udp:53"}},
		{Set: "KUBE-IPVS-IPS", Add: []string{"10.96.0.10"}},
		{Set: "SOURCE-CIDR", Add: []string{"10.96.0.10,tcp:80,10.244.9.0/24"}},
	}))
	payload := "*filter\n:KUBE-IPVS-FILTER - [0:0]\n:KUBE-A - [0:0]\n" + rules + "COMMIT\n"
	require.NoError(t, k.Restore(dataplane.IPv4, []byte(payload)))
	return k
}

func TestProbeFilter(t *testing.T) {
	pod := netip.MustParseAddr("10.244.9.9")
	other := netip.MustParseAddr("10.244.8.8")
	tcp := netip.MustParseAddrPort("10.96.0.10:80")
	udp := netip.MustParseAddrPort("10.96.0.10:53")
	deleted := []dataplane.SetChange{{Set: "KUBE-CLUSTER-IP", Del: []string{"10.96.0.10,tcp:80", "10.96.0.10,udp:53"}}}
	type attempt struct {
		src   netip.Addr
		dst   netip.AddrPort
		proto dataplane.Protocol
		want  string
	}
	tests := []struct {
		name   string
		rules  string
		change []dataplane.SetChange // applied after restore
		probes []attempt
	}{
		{
			name:   "entry present",
			rules:  kubeIPVSFilter,
			probes: []attempt{{pod, tcp, dataplane.TCP, sim.ProbeOK}, {pod, udp, dataplane.UDP, sim.ProbeOK}},
		},
		{
			name:   "entry deleted, address still in KUBE-IPVS-IPS",
			rules:  kubeIPVSFilter,
			change: deleted,
			probes: []attempt{{pod, tcp, dataplane.TCP, sim.ProbeRejected}, {pod, udp, dataplane.UDP, sim.ProbeRejected}},
		},
		{
			name:   "entry deleted, address gone from KUBE-IPVS-IPS too",
			rules:  kubeIPVSFilter,
			change: append(deleted, dataplane.SetChange{Set: "KUBE-IPVS-IPS", Del: []string{"10.96.0.10"}}),
			probes: []attempt{{pod, tcp, dataplane.TCP, sim.ProbeOK}},
		},
		{
			name:   "entry deleted, port in a bitmap:port set that RETURNs",
			rules:  kubeIPVSFilter,
			change: append(deleted, dataplane.SetChange{Set: "KUBE-HEALTH-CHECK-NODE-PORT", Add: []string{"80"}}),
			probes: []attempt{{pod, tcp, dataplane.TCP, sim.ProbeOK}, {pod, udp, dataplane.UDP, sim.ProbeRejected}},
		},
		{
			name: "no REJECT rule: the model follows the rules",
			rules: `-I INPUT -j KUBE-IPVS-FILTER
-A KUBE-IPVS-FILTER -m set --match-set KUBE-CLUSTER-IP dst,dst -j RETURN
`,
			change: deleted,
			probes: []attempt{{pod, tcp, dataplane.TCP, sim.ProbeOK}},
		},
		{
			name:   "chain not hooked from INPUT",
			rules:  "-A OUTPUT -j KUBE-IPVS-FILTER\n-A KUBE-IPVS-FILTER -m set --match-set KUBE-IPVS-IPS dst -j REJECT\n",
			probes: []attempt{{pod, tcp, dataplane.TCP, sim.ProbeOK}},
		},
		{
			name: "rules with a match or target the model does not know are skipped",
			rules: `-A INPUT -m physdev ! --physdev-is-in -m set --match-set KUBE-IPVS-IPS dst -j REJECT
-A INPUT -m set --match-set KUBE-IPVS-IPS dst --return-nomatch -j DROP
-A INPUT -m set --match-set KUBE-IPVS-IPS dst -j LOG
`,
			probes: []attempt{{pod, tcp, dataplane.TCP, sim.ProbeOK}},
		},
		{
			name: "addresses, marks and local addresses are matched",
			rules: `-A INPUT -m mark --mark 0x1/0x1 -j REJECT
-A INPUT -s 10.244.0.0/16 -p udp -j DROP
-A INPUT -d 10.96.0.10 -m addrtype ! --dst-type LOCAL -j DROP
-A INPUT -j MARK --or-mark 0x1
-A INPUT -m mark --mark 0x1/0x1 -p tcp -m addrtype --dst-type LOCAL -j REJECT
`,
			probes: []attempt{{pod, tcp, dataplane.TCP, sim.ProbeRejected}, {pod, udp, dataplane.UDP, sim.ProbeRejected}},
		},
		{
			name:   "fewer flags than the set's dimensions never match",
			rules:  "-A INPUT -m set --match-set KUBE-CLUSTER-IP dst -j DROP\n",
			probes: []attempt{{pod, tcp, dataplane.TCP, sim.ProbeOK}},
		},
		{
			name:   "negated set match and protocol",
			rules:  "-A INPUT -p udp -m set ! --match-set KUBE-CLUSTER-IP dst,dst -j REJECT\n",
			change: deleted,
			probes: []attempt{{pod, tcp, dataplane.TCP, sim.ProbeOK}, {pod, udp, dataplane.UDP, sim.ProbeRejected}},
		},
		{
			name: "source range by hash:ip,port,net with dst,dst,src",
			rules: `-A INPUT -j KUBE-A
-A KUBE-A -m set --match-set SOURCE-CIDR dst,dst,src -j RETURN
-A KUBE-A -j DROP
`,
			probes: []attempt{{pod, tcp, dataplane.TCP, sim.ProbeOK}, {other, tcp, dataplane.TCP, sim.ProbeRejected}},
		},
		{
			name:   "a goto's chain returns past the rule that went there",
			rules:  "-A INPUT -g KUBE-A\n-A INPUT -j DROP\n",
			probes: []attempt{{pod, tcp, dataplane.TCP, sim.ProbeOK}},
		},
		{
			name:   "a jump's chain returns to the next rule",
			rules:  "-A INPUT -j KUBE-A\n-A INPUT -j DROP\n",
			probes: []attempt{{pod, tcp, dataplane.TCP, sim.ProbeRejected}},
		},
		{
			name:   "ACCEPT ends the walk",
			rules:  "-A INPUT -m comment --comment ok -j ACCEPT\n-A INPUT -j DROP\n",
			probes: []attempt{{pod, tcp, dataplane.TCP, sim.ProbeOK}},
		},
		{
			name:   "INPUT policy DROP",
			rules:  ":INPUT DROP [0:0]\n",
			probes: []attempt{{pod, tcp, dataplane.TCP, sim.ProbeRejected}},
		},
		{
			name:   "a loop the sim accepts ends",
			rules:  "-A INPUT -j KUBE-A\n-A KUBE-A -j KUBE-IPVS-FILTER\n-A KUBE-IPVS-FILTER -j KUBE-A\n",
			probes: []attempt{{pod, tcp, dataplane.TCP, sim.ProbeOK}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			k := filterNode(t, tc.rules)
			require.NoError(t, k.Apply(tc.change))
			for i, a := range tc.probes {
				client := netip.AddrPortFrom(a.src, uint16(40000+i))
				_, outcome := k.Probe(client, a.dst, a.proto, func(netip.AddrPort) bool { return true })
				require.Equal(t, a.want, outcome, "probe %d: %s %s", i, a.proto, a.dst)
			}
		})
	}
}

// A UDP datagram of a tracked flow is ESTABLISHED, not NEW: kube-proxy's
// REJECT rule stops new flows only.
func TestProbeFilterEstablishedFlow(t *testing.T) {
	k := filterNode(t, kubeIPVSFilter)
	all := func(netip.AddrPort) bool { return true }
	dst := netip.MustParseAddrPort("10.96.0.10:53")
	resolver := netip.MustParseAddrPort("10.244.9.9:40000")
	_, outcome := k.Probe(resolver, dst, dataplane.UDP, all)
	require.Equal(t, sim.ProbeOK, outcome)
	require.NoError(t, k.Apply([]dataplane.SetChange{{Set: "KUBE-CLUSTER-IP", Del: []string{"10.96.0.10,udp:53"}}}))
	_, outcome = k.Probe(resolver, dst, dataplane.UDP, all)
	require.Equal(t, sim.ProbeOK, outcome, "the tracked flow")
	_, outcome = k.Probe(netip.MustParseAddrPort("10.244.9.9:40001"), dst, dataplane.UDP, all)
	require.Equal(t, sim.ProbeRejected, outcome, "a new flow")
}

// BenchmarkProbeFilter probes one of 5,000 ClusterIPs through kube-proxy's
// access filter, the path every sim probe takes.
func BenchmarkProbeFilter(b *testing.B) {
	k := newKernel(b, sim.Options{})
	_, err := k.EnsureDummy("kube-ipvs0")
	require.NoError(b, err)
	require.NoError(b, k.CreateSet(dataplane.Set{Name: "KUBE-CLUSTER-IP", Type: dataplane.HashIPPort}))
	require.NoError(b, k.CreateSet(dataplane.Set{Name: "KUBE-IPVS-IPS", Type: dataplane.HashIP}))
	require.NoError(b, k.CreateSet(dataplane.Set{Name: "KUBE-HEALTH-CHECK-NODE-PORT", Type: dataplane.BitmapPort, PortTo: 65535}))
	var vips, ips []string
	for i := range 5000 {
		a := netip.AddrFrom4([4]byte{10, 96, byte(i >> 8), byte(i)})
		require.NoError(b, k.AddAddress("kube-ipvs0", netip.PrefixFrom(a, 32)))
		v := vs(a.String(), 80, dataplane.TCP)
		require.NoError(b, k.AddService(v))
		require.NoError(b, k.AddDestination(v.ServiceKey, rs("10.244.1.5:8080", 1)))
		vips = append(vips, a.String()+",tcp:80")
		ips = append(ips, a.String())
	}
	require.NoError(b, k.Apply([]dataplane.SetChange{{Set: "KUBE-CLUSTER-IP", Add: vips}, {Set: "KUBE-IPVS-IPS", Add: ips}}))
	require.NoError(b, k.Restore(dataplane.IPv4, []byte("*filter\n:KUBE-IPVS-FILTER - [0:0]\n"+kubeIPVSFilter+"COMMIT\n")))
	client := netip.MustParseAddrPort("10.244.9.9:40000")
	dst := netip.MustParseAddrPort("10.96.19.135:80")
	all := func(netip.AddrPort) bool { return true }
	b.ReportAllocs()
	for b.Loop() {
		if ok, outcome := k.Probe(client, dst, dataplane.TCP, all); !ok {
			b.Fatal(outcome)
		}
	}
}

// kubeProxyNAT is kube-proxy's masquerade path for traffic to a ClusterIP
// (no cluster CIDR configured: "src,dst"), as its nat table holds it.
const kubeProxyNAT = `*nat
:KUBE-SERVICES - [0:0]
:KUBE-POSTROUTING - [0:0]
:KUBE-MARK-MASQ - [0:0]
-A OUTPUT -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A POSTROUTING -m comment --comment "kubernetes postrouting rules" -j KUBE-POSTROUTING
-A KUBE-SERVICES -m comment --comment "Kubernetes service cluster ip + port for masquerade purpose" -m set --match-set KUBE-CLUSTER-IP src,dst -j KUBE-MARK-MASQ
-A KUBE-SERVICES -m set --match-set KUBE-CLUSTER-IP dst,dst -j ACCEPT
-A KUBE-POSTROUTING -m mark ! --mark 0x00004000/0x00004000 -j RETURN
-A KUBE-POSTROUTING -j MARK --xor-mark 0x00004000
-A KUBE-POSTROUTING -m comment --comment "kubernetes service traffic requiring SNAT" -j MASQUERADE --random-fully
-A KUBE-MARK-MASQ -j MARK --or-mark 0x00004000
COMMIT
`

// TestProbeFromNode: a connection from the node's own network namespace to
// a ClusterIP leaves with the ClusterIP as its source; only kube-proxy's nat
// rules, which mark it for masquerade, let the reply come back. A pod's
// connection needs none of that, and neither does a NodePort on the node's
// own address.
func TestProbeFromNode(t *testing.T) {
	all := func(netip.AddrPort) bool { return true }
	clusterIP := netip.MustParseAddrPort("10.96.0.10:80")
	pod := netip.MustParseAddrPort("10.244.9.9:40000")

	k := filterNode(t, kubeIPVSFilter)
	_, outcome := k.ProbeFromNode(clusterIP, dataplane.TCP, all)
	require.Equal(t, sim.ProbeNoSNAT, outcome, "no nat rules yet: the reply would go to the ClusterIP")
	_, outcome = k.Probe(pod, clusterIP, dataplane.TCP, all)
	require.Equal(t, sim.ProbeOK, outcome, "a pod's source is its own address")

	nodePort := netip.MustParseAddrPort("192.168.0.10:30080")
	v := vs("192.168.0.10", 30080, dataplane.TCP)
	require.NoError(t, k.AddService(v))
	require.NoError(t, k.AddDestination(v.ServiceKey, rs("10.244.1.5:8080", 1)))
	_, outcome = k.ProbeFromNode(nodePort, dataplane.TCP, all)
	require.Equal(t, sim.ProbeOK, outcome, "from the node to its own address: the node's source")

	require.NoError(t, k.Restore(dataplane.IPv4, []byte(kubeProxyNAT)))
	_, outcome = k.ProbeFromNode(clusterIP, dataplane.TCP, all)
	require.Equal(t, sim.ProbeOK, outcome, "marked in OUTPUT, masqueraded in POSTROUTING")

	require.NoError(t, k.Apply([]dataplane.SetChange{{Set: "KUBE-CLUSTER-IP", Del: []string{"10.96.0.10,tcp:80"}}}))
	_, outcome = k.ProbeFromNode(clusterIP, dataplane.TCP, all)
	require.Equal(t, sim.ProbeNoSNAT, outcome, "the set entry the mark rule matches is gone")
	_, outcome = k.Probe(pod, clusterIP, dataplane.TCP, all)
	require.Equal(t, sim.ProbeRejected, outcome, "and a pod meets KUBE-IPVS-FILTER")
}
