package sim

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"sigs.k8s.io/knftables"

	"github.com/kpsim/kpsim/dataplane"
)

// nftKubeProxyDump is the table kube-proxy v1.37's nftables proxier programs
// (taken from its proxier_test.go, trimmed) for a node 192.168.0.2 with pod
// CIDR 10.0.0.0/8 and service CIDR 172.30.0.0/16, serving:
//
//   - ns1/svc1: ClusterIP 172.30.0.41 tcp/80, endpoints 10.180.0.1 and 10.180.0.2
//   - ns3/svc3: NodePort 3003 (ClusterIP 172.30.0.43), endpoint 10.180.0.3
//   - ns5/svc5: LoadBalancer 5.6.7.8 tcp/80 with source range 203.0.113.0/25 and
//     ClientIP affinity, endpoints 10.180.0.4 and 10.180.0.5
//   - ns6/svc6: ClusterIP 172.30.0.46 tcp/80, no endpoints
//
// and rejecting localhost NodePorts.
const nftKubeProxyDump = `
add table ip kube-proxy { comment "rules for kube-proxy" ; }

add set ip kube-proxy cluster-ips { type ipv4_addr ; comment "Active ClusterIPs" ; }
add set ip kube-proxy nodeport-ips { type ipv4_addr ; comment "IPs that accept NodePort traffic" ; }
add set ip kube-proxy hairpin-connections { type ipv4_addr . ipv4_addr . inet_proto . inet_service ; comment "service hairpin connections" ; }

add map ip kube-proxy firewall-ips { type ipv4_addr . inet_proto . inet_service : verdict ; comment "destinations that are subject to LoadBalancerSourceRanges" ; }
add map ip kube-proxy no-endpoint-nodeports { type inet_proto . inet_service : verdict ; comment "vmap to drop or reject packets to service nodeports with no endpoints" ; }
add map ip kube-proxy no-endpoint-services { type ipv4_addr . inet_proto . inet_service : verdict ; comment "vmap to drop or reject packets to services with no endpoints" ; }
add map ip kube-proxy service-ips { type ipv4_addr . inet_proto . inet_service : verdict ; comment "ClusterIP, ExternalIP and LoadBalancer IP traffic" ; }
add map ip kube-proxy service-nodeports { type inet_proto . inet_service : verdict ; comment "NodePort traffic" ; }

add chain ip kube-proxy cluster-ips-check
add chain ip kube-proxy filter-prerouting-pre-dnat { type filter hook prerouting priority -110 ; }
add chain ip kube-proxy filter-output-pre-dnat { type filter hook output priority -110 ; }
add chain ip kube-proxy filter-forward { type filter hook forward priority 0 ; }
add chain ip kube-proxy filter-input { type filter hook input priority 0 ; }
add chain ip kube-proxy filter-output { type filter hook output priority 0 ; }
add chain ip kube-proxy firewall-check
add chain ip kube-proxy masquerading
add chain ip kube-proxy nat-output { type nat hook output priority -100 ; }
add chain ip kube-proxy nat-postrouting { type nat hook postrouting priority 100 ; }
add chain ip kube-proxy nat-prerouting { type nat hook prerouting priority -100 ; }
add chain ip kube-proxy nodeport-endpoints-check
add chain ip kube-proxy reject-chain { comment "helper for @no-endpoint-services / @no-endpoint-nodeports" ; }
add chain ip kube-proxy services
add chain ip kube-proxy service-endpoints-check

add rule ip kube-proxy cluster-ips-check ip daddr @cluster-ips reject comment "Reject traffic to invalid ports of ClusterIPs"
add rule ip kube-proxy cluster-ips-check ip daddr { 172.30.0.0/16 } drop comment "Drop traffic to unallocated ClusterIPs"
add rule ip kube-proxy filter-prerouting-pre-dnat ct state new jump firewall-check
add rule ip kube-proxy filter-forward ct state new jump service-endpoints-check
add rule ip kube-proxy filter-forward ct state new jump cluster-ips-check
add rule ip kube-proxy filter-input ct state new jump nodeport-endpoints-check
add rule ip kube-proxy filter-input ct state new jump service-endpoints-check
add rule ip kube-proxy filter-output ct state new jump service-endpoints-check
add rule ip kube-proxy filter-output-pre-dnat ct state new jump firewall-check
add rule ip kube-proxy filter-output ct state new jump cluster-ips-check
add rule ip kube-proxy firewall-check ip daddr . meta l4proto . th dport vmap @firewall-ips
add rule ip kube-proxy masquerading mark and 0x4000 != 0 mark set mark xor 0x4000 masquerade fully-random
add rule ip kube-proxy masquerading ct status dnat ip saddr . ip daddr . meta l4proto . th dport @hairpin-connections masquerade fully-random
add rule ip kube-proxy nat-output jump services
add rule ip kube-proxy nat-postrouting jump masquerading
add rule ip kube-proxy nat-prerouting jump services
add rule ip kube-proxy nodeport-endpoints-check ip daddr @nodeport-ips meta l4proto . th dport vmap @no-endpoint-nodeports
add rule ip kube-proxy reject-chain reject
add rule ip kube-proxy services ip daddr @cluster-ips ip saddr != 10.0.0.0/8 mark set mark or 0x4000 comment "masquerade clusterIP traffic from outside cluster"
add rule ip kube-proxy services ip daddr . meta l4proto . th dport vmap @service-ips
add rule ip kube-proxy services ip daddr @nodeport-ips meta l4proto . th dport vmap @service-nodeports

add element ip kube-proxy nodeport-ips { 192.168.0.2 }
add rule ip kube-proxy service-endpoints-check ip daddr . meta l4proto . th dport vmap @no-endpoint-services

# svc1
add chain ip kube-proxy service-ULMVA6XW-ns1/svc1/tcp/p80
add rule ip kube-proxy service-ULMVA6XW-ns1/svc1/tcp/p80 meta l4proto tcp dnat ip addr . port to numgen random mod 2 map { 0 : 10.180.0.1 . 80 , 1 : 10.180.0.2 . 80 }
add element ip kube-proxy cluster-ips { 172.30.0.41 }
add element ip kube-proxy service-ips { 172.30.0.41 . tcp . 80 : goto service-ULMVA6XW-ns1/svc1/tcp/p80 }

# svc3
add chain ip kube-proxy service-4AT6LBPK-ns3/svc3/tcp/p80
add rule ip kube-proxy service-4AT6LBPK-ns3/svc3/tcp/p80 meta l4proto tcp dnat to 10.180.0.3:80
add chain ip kube-proxy external-4AT6LBPK-ns3/svc3/tcp/p80
add rule ip kube-proxy external-4AT6LBPK-ns3/svc3/tcp/p80 mark set mark or 0x4000 comment "masquerade"
add rule ip kube-proxy external-4AT6LBPK-ns3/svc3/tcp/p80 goto service-4AT6LBPK-ns3/svc3/tcp/p80
add element ip kube-proxy cluster-ips { 172.30.0.43 }
add element ip kube-proxy service-ips { 172.30.0.43 . tcp . 80 : goto service-4AT6LBPK-ns3/svc3/tcp/p80 }
add element ip kube-proxy service-nodeports { tcp . 3003 : goto external-4AT6LBPK-ns3/svc3/tcp/p80 }

# svc5
add set ip kube-proxy affinity-A-ns5/svc5/tcp/p80__10.180.0.4/80 { type ipv4_addr ; flags dynamic,timeout ; timeout 10800s ; }
add set ip kube-proxy affinity-B-ns5/svc5/tcp/p80__10.180.0.5/80 { type ipv4_addr ; flags dynamic,timeout ; timeout 10800s ; }
add chain ip kube-proxy endpoint-A-ns5/svc5/tcp/p80__10.180.0.4/80
add rule ip kube-proxy endpoint-A-ns5/svc5/tcp/p80__10.180.0.4/80 update @affinity-A-ns5/svc5/tcp/p80__10.180.0.4/80 { ip saddr }
add rule ip kube-proxy endpoint-A-ns5/svc5/tcp/p80__10.180.0.4/80 meta l4proto tcp dnat to 10.180.0.4:80
add chain ip kube-proxy endpoint-B-ns5/svc5/tcp/p80__10.180.0.5/80
add rule ip kube-proxy endpoint-B-ns5/svc5/tcp/p80__10.180.0.5/80 update @affinity-B-ns5/svc5/tcp/p80__10.180.0.5/80 { ip saddr }
add rule ip kube-proxy endpoint-B-ns5/svc5/tcp/p80__10.180.0.5/80 meta l4proto tcp dnat to 10.180.0.5:80
add chain ip kube-proxy service-HVFWP5L3-ns5/svc5/tcp/p80
add rule ip kube-proxy service-HVFWP5L3-ns5/svc5/tcp/p80 ip saddr @affinity-A-ns5/svc5/tcp/p80__10.180.0.4/80 goto endpoint-A-ns5/svc5/tcp/p80__10.180.0.4/80
add rule ip kube-proxy service-HVFWP5L3-ns5/svc5/tcp/p80 ip saddr @affinity-B-ns5/svc5/tcp/p80__10.180.0.5/80 goto endpoint-B-ns5/svc5/tcp/p80__10.180.0.5/80
add rule ip kube-proxy service-HVFWP5L3-ns5/svc5/tcp/p80 numgen random mod 2 vmap { 0 : goto endpoint-A-ns5/svc5/tcp/p80__10.180.0.4/80 , 1 : goto endpoint-B-ns5/svc5/tcp/p80__10.180.0.5/80 }
add chain ip kube-proxy external-HVFWP5L3-ns5/svc5/tcp/p80
add rule ip kube-proxy external-HVFWP5L3-ns5/svc5/tcp/p80 mark set mark or 0x4000 comment "masquerade"
add rule ip kube-proxy external-HVFWP5L3-ns5/svc5/tcp/p80 goto service-HVFWP5L3-ns5/svc5/tcp/p80
add chain ip kube-proxy firewall-HVFWP5L3-ns5/svc5/tcp/p80
add rule ip kube-proxy firewall-HVFWP5L3-ns5/svc5/tcp/p80 ip saddr != { 203.0.113.0/25 } drop
add element ip kube-proxy cluster-ips { 172.30.0.45 }
add element ip kube-proxy service-ips { 172.30.0.45 . tcp . 80 : goto service-HVFWP5L3-ns5/svc5/tcp/p80 }
add element ip kube-proxy service-ips { 5.6.7.8 . tcp . 80 : goto external-HVFWP5L3-ns5/svc5/tcp/p80 }
add element ip kube-proxy firewall-ips { 5.6.7.8 . tcp . 80 : goto firewall-HVFWP5L3-ns5/svc5/tcp/p80 }

# svc6
add element ip kube-proxy cluster-ips { 172.30.0.46 }
add element ip kube-proxy no-endpoint-services { 172.30.0.46 . tcp . 80 comment "ns6/svc6:p80" : goto reject-chain }

# localhost NodePort rejects
add map ip kube-proxy localhost-nodeport-reject-ports { type inet_proto . inet_service : verdict ; comment "localhost NodePorts rejected by kube-proxy" ; }
add counter ip kube-proxy localhost-nodeport-rejected-tcp
add chain ip kube-proxy localhost-nodeport-reject-tcp
add rule ip kube-proxy nodeport-endpoints-check ip daddr 127.0.0.0/8 meta l4proto . th dport vmap @localhost-nodeport-reject-ports
add element ip kube-proxy localhost-nodeport-reject-ports { tcp . 3003 : goto localhost-nodeport-reject-tcp }
`

func nftFakeFrom(t *testing.T, family knftables.Family, dump string) *knftables.Fake {
	t.Helper()
	fake := knftables.NewFake(family, "kube-proxy")
	require.NoError(t, fake.ParseDump(dump))
	return fake
}

// nftNodeLocal: the node's addresses are 192.168.0.2 and loopback.
func nftNodeLocal(a netip.Addr) bool {
	return a == netip.MustParseAddr("192.168.0.2") || a.IsLoopback()
}

func TestNftEvaluate(t *testing.T) {
	fake := nftFakeFrom(t, knftables.IPv4Family, nftKubeProxyDump)
	// ParseDump cannot read a rule with a quoted word; kube-proxy adds this one so.
	tx := fake.NewTransaction()
	tx.Add(&knftables.Rule{Chain: "localhost-nodeport-reject-tcp", Rule: `counter name "localhost-nodeport-rejected-tcp" reject`})
	require.NoError(t, fake.Run(t.Context(), tx))
	const pod, node, outside = "10.0.0.5:40000", "192.168.0.2:40000", "203.0.113.7:40000"
	for _, tc := range []struct {
		name     string
		src, dst string
		proto    dataplane.Protocol
		fromNode bool
		pick     int
		want     nftVerdict
	}{
		{name: "clusterIP first endpoint", src: pod, dst: "172.30.0.41:80", pick: 0,
			want: nftVerdict{outcome: "dnat", to: netip.MustParseAddrPort("10.180.0.1:80")}},
		{name: "clusterIP second endpoint", src: pod, dst: "172.30.0.41:80", pick: 1,
			want: nftVerdict{outcome: "dnat", to: netip.MustParseAddrPort("10.180.0.2:80")}},
		{name: "no endpoints rejected", src: pod, dst: "172.30.0.46:80",
			want: nftVerdict{outcome: ProbeRejected}},
		{name: "clusterIP port absent rejected", src: pod, dst: "172.30.0.41:81",
			want: nftVerdict{outcome: ProbeRejected}},
		{name: "clusterIP protocol absent rejected", src: pod, dst: "172.30.0.41:80", proto: dataplane.UDP,
			want: nftVerdict{outcome: ProbeRejected}},
		{name: "unallocated clusterIP dropped", src: pod, dst: "172.30.0.99:80",
			want: nftVerdict{outcome: ProbeRejected}},
		{name: "unknown address", src: pod, dst: "8.8.8.8:80"},
		{name: "node address without a NodePort", src: pod, dst: "192.168.0.2:22"},
		{name: "NodePort on node address", src: pod, dst: "192.168.0.2:3003",
			want: nftVerdict{outcome: "dnat", to: netip.MustParseAddrPort("10.180.0.3:80"), masq: true}},
		{name: "loadBalancer source not allowed", src: pod, dst: "5.6.7.8:80",
			want: nftVerdict{outcome: ProbeRejected}},
		// svc5 has ClientIP affinity: the endpoint chain writes the client's
		// address to its affinity set on the way.
		{name: "loadBalancer source allowed", src: outside, dst: "5.6.7.8:80", pick: 1,
			want: nftVerdict{outcome: "dnat", to: netip.MustParseAddrPort("10.180.0.5:80"), masq: true,
				updates: []nftUpdate{{"affinity-B-ns5/svc5/tcp/p80__10.180.0.5/80", []string{"203.0.113.7"}}}}},
		{name: "from node clusterIP", src: node, dst: "172.30.0.41:80", fromNode: true, pick: 0,
			want: nftVerdict{outcome: "dnat", to: netip.MustParseAddrPort("10.180.0.1:80"), masq: true}},
		{name: "from node NodePort", src: node, dst: "192.168.0.2:3003", fromNode: true,
			want: nftVerdict{outcome: "dnat", to: netip.MustParseAddrPort("10.180.0.3:80"), masq: true}},
		{name: "from node localhost NodePort rejected", src: "127.0.0.1:40000", dst: "127.0.0.1:3003", fromNode: true,
			want: nftVerdict{outcome: ProbeRejected}},
		{name: "from node no endpoints rejected", src: node, dst: "172.30.0.46:80", fromNode: true,
			want: nftVerdict{outcome: ProbeRejected, masq: true}}, // a clusterIP from outside the pod CIDR is marked
		{name: "from node unknown address", src: node, dst: "8.8.8.8:443", fromNode: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.proto == "" {
				tc.proto = dataplane.TCP
			}
			got := nftEvaluate(fake.Table, nil, nftPath{
				src:      netip.MustParseAddrPort(tc.src),
				dst:      netip.MustParseAddrPort(tc.dst),
				proto:    tc.proto,
				fromNode: tc.fromNode,
				local:    nftNodeLocal,
				pick:     func(int) int { return tc.pick },
			})
			require.Equal(t, tc.want, got)
		})
	}
}

// TestNftChainSemantics checks jump/return, accept ending only its own base
// chain, a base chain's drop policy, and that a rule with a match the model
// does not know is skipped.
func TestNftChainSemantics(t *testing.T) {
	fake := nftFakeFrom(t, knftables.IPv4Family, `
add table ip kube-proxy
add chain ip kube-proxy early { type filter hook prerouting priority -10 ; }
add chain ip kube-proxy late { type filter hook prerouting priority 10 ; policy drop ; }
add chain ip kube-proxy sub
add rule ip kube-proxy early ip daddr 10.1.0.2 jump sub
add rule ip kube-proxy early ip daddr 10.1.0.3 iifname eth0 drop
add rule ip kube-proxy early accept
add rule ip kube-proxy late ip daddr { 10.1.0.1 , 10.1.0.2 , 10.1.0.3 } accept
add rule ip kube-proxy sub tcp dport 22 return
add rule ip kube-proxy sub drop
`)
	for dst, want := range map[string]string{
		"10.1.0.1:80": "",            // early accepts, late accepts
		"10.1.0.2:22": "",            // sub returns
		"10.1.0.2:80": ProbeRejected, // sub drops
		"10.1.0.3:80": "",            // iifname unknown: rule skipped
		"10.1.0.4:80": ProbeRejected, // late's policy
	} {
		got := nftEvaluate(fake.Table, nil, nftPath{
			src:   netip.MustParseAddrPort("10.0.0.5:40000"),
			dst:   netip.MustParseAddrPort(dst),
			proto: dataplane.TCP,
			local: func(netip.Addr) bool { return false },
		})
		require.Equal(t, want, got.outcome, dst)
	}
}

func TestNftIPv6(t *testing.T) {
	fake := nftFakeFrom(t, knftables.IPv6Family, `
add table ip6 kube-proxy
add map ip6 kube-proxy service-ips { type ipv6_addr . inet_proto . inet_service : verdict ; }
add chain ip6 kube-proxy nat-prerouting { type nat hook prerouting priority -100 ; }
add chain ip6 kube-proxy services
add chain ip6 kube-proxy service-ULMVA6XW-ns1/svc1/tcp/p80
add rule ip6 kube-proxy nat-prerouting jump services
add rule ip6 kube-proxy services ip6 daddr . meta l4proto . th dport vmap @service-ips
add rule ip6 kube-proxy service-ULMVA6XW-ns1/svc1/tcp/p80 meta l4proto tcp dnat to [fd00:10:180::1]:80
add element ip6 kube-proxy service-ips { fd00:172:30::41 . tcp . 80 : goto service-ULMVA6XW-ns1/svc1/tcp/p80 }
`)
	got := nftEvaluate(fake.Table, nil, nftPath{
		src:   netip.MustParseAddrPort("[fd00:10::5]:40000"),
		dst:   netip.MustParseAddrPort("[fd00:172:30::41]:80"),
		proto: dataplane.TCP,
		local: func(netip.Addr) bool { return false },
	})
	require.Equal(t, nftVerdict{outcome: "dnat", to: netip.MustParseAddrPort("[fd00:10:180::1]:80")}, got)
}

func TestNftNoTable(t *testing.T) {
	got := nftEvaluate(knftables.NewFake(knftables.IPv4Family, "kube-proxy").Table, nil, nftPath{
		src:   netip.MustParseAddrPort("10.0.0.5:40000"),
		dst:   netip.MustParseAddrPort("172.30.0.41:80"),
		proto: dataplane.TCP,
	})
	require.Equal(t, nftVerdict{}, got)
}

// BenchmarkNFTProbe walks kube-proxy's table (nftKubeProxyDump and 3,000
// ClusterIP services of one, two or three endpoints, as v1.37 writes them)
// for a connection from a pod to each service in turn: what every probe of
// an nftables run costs the harness.
func BenchmarkNFTProbe(b *testing.B) {
	const services = 3000
	var dump strings.Builder
	dump.WriteString(nftKubeProxyDump)
	dsts := make([]netip.AddrPort, services)
	for i := range dsts {
		ip := netip.AddrFrom4([4]byte{172, 30, byte(1 + i>>8), byte(i)})
		dsts[i] = netip.AddrPortFrom(ip, 80)
		chain := fmt.Sprintf("service-%08d-ns/svc%d/tcp/p80", i, i)
		endpoint := func(j int) string { return fmt.Sprintf("10.%d.%d.%d", 181+j, i>>8, i&255) }
		fmt.Fprintf(&dump, "add chain ip kube-proxy %s\n", chain)
		if n := 1 + i%3; n == 1 {
			fmt.Fprintf(&dump, "add rule ip kube-proxy %s meta l4proto tcp dnat to %s:80\n", chain, endpoint(0))
		} else {
			var m []string
			for j := range n {
				m = append(m, fmt.Sprintf("%d : %s . 80", j, endpoint(j)))
			}
			fmt.Fprintf(&dump, "add rule ip kube-proxy %s meta l4proto tcp dnat ip addr . port to numgen random mod %d map { %s }\n", chain, n, strings.Join(m, " , "))
		}
		fmt.Fprintf(&dump, "add element ip kube-proxy cluster-ips { %s }\n", ip)
		fmt.Fprintf(&dump, "add element ip kube-proxy service-ips { %s . tcp . 80 : goto %s }\n", ip, chain)
	}
	s := nftStateFrom(b, dump.String())
	path := nftPath{src: netip.MustParseAddrPort("10.0.0.5:40000"), proto: dataplane.TCP, local: nftNodeLocal, pick: func(n int) int { return n - 1 }}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		path.dst = dsts[i%services]
		if v := nftEvaluate(s.table, s, path); v.outcome != "dnat" {
			b.Fatalf("%v: %+v", path.dst, v)
		}
		i++
	}
}

// nftStateFrom is the in-memory table a dump describes, written in one
// transaction.
func nftStateFrom(tb testing.TB, dump string) *nftState {
	s := newNFTState(knftables.IPv4Family, "kube-proxy")
	tx := s.factory.NewTransaction()
	addDump(tb, tx, dump)
	require.NoError(tb, s.run(tx))
	return s
}

// addDump adds to tx the table a dump describes: the table, its chains,
// sets and maps, then their rules and elements.
func addDump(tb testing.TB, tx *knftables.Transaction, dump string) {
	tb.Helper()
	fake := knftables.NewFake(knftables.IPv4Family, "kube-proxy")
	require.NoError(tb, fake.ParseDump(dump))
	tx.Add(&knftables.Table{})
	for _, c := range fake.Table.Chains {
		c := c.Chain
		c.Handle = nil
		tx.Add(&c)
	}
	for _, set := range fake.Table.Sets {
		set := set.Set
		set.Handle = nil
		tx.Add(&set)
	}
	for _, m := range fake.Table.Maps {
		m := m.Map
		m.Handle = nil
		tx.Add(&m)
	}
	for _, c := range fake.Table.Chains {
		for _, r := range c.Rules {
			tx.Add(&knftables.Rule{Chain: c.Name, Rule: r.Rule, Comment: r.Comment})
		}
	}
	for _, set := range fake.Table.Sets {
		for _, e := range set.Elements {
			tx.Add(e)
		}
	}
	for _, m := range fake.Table.Maps {
		for _, e := range m.Elements {
			tx.Add(e)
		}
	}
}
