package proxier

import (
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/stretchr/testify/require"

	"github.com/kpsim/kpsim/dataplane"
)

// TestCleanupIPVSMode: on a dual-stack node, kube-proxy's cleanup of IPVS
// mode takes the virtual servers, kube-ipvs0 and its addresses, both
// families' chains and jumps, and the IPv4 ipsets; the IPv6 ipsets are
// left, and IPVSModeLeftovers says so. What else was on the node stays.
func TestCleanupIPVSMode(t *testing.T) {
	e := newEnv(t, Config{Families: []dataplane.Family{dataplane.IPv4, dataplane.IPv6}, ClusterCIDRs: []string{"10.244.0.0/16", "fd00:244::/56"}})
	p4 := e.synced(e.proxier(dataplane.IPv4, 0))
	p6 := e.synced(e.proxier(dataplane.IPv6, 0))
	svc := service("default", "web", "10.96.0.10", withClusterIPs("10.96.0.10", "fd00:96::10"), withType(v1.ServiceTypeNodePort), withNodePort(30500))
	for _, p := range []*Proxier{p4, p6} {
		p.OnServiceAdd(svc)
		p.OnEndpointSliceAdd(slice("default", "web", "web-v4", 8080, v1.ProtocolTCP, eps("10.0.0.1")...))
		p.OnEndpointSliceAdd(slice("default", "web", "web-v6", 8080, v1.ProtocolTCP, ep{ip: "fd00:1::1"}))
		e.sync(p)
	}
	before, err := IPVSModeLeftovers(e.dp, ModeNFTables)
	require.NoError(t, err)
	require.Len(t, before, 6, "%q", before) // servers, the link in each family, ipsets, each family's chains
	require.NoError(t, e.dp.IPTables.Restore(dataplane.IPv4, []byte("*filter\n:SOMEONE-ELSE - [0:0]\n-A INPUT -j SOMEONE-ELSE\nCOMMIT\n")))

	// iptables mode's cleanup, which runs first, fails to delete chains of
	// the names it shares with IPVS mode while IPVS mode's still jump to
	// them, as on a real node (kube-proxy logs it); IPVS mode's then removes them.
	ops := e.k.Ops()
	err = CleanupIPVSMode(e.dp)
	// Command by command, as kube-proxy issues them: per family, iptables
	// mode's 12 jump deletions and its mangle canary's, IPVS mode's 9 jump
	// deletions, 11 flushes and 11 deletions, one process each; and iptables
	// mode's two tables, each read and restored.
	now := e.k.Ops()
	require.Equal(t, int64(2*(12+1+9+11+11)), now[dataplane.OpIPTablesCommand]-ops[dataplane.OpIPTablesCommand])
	require.Equal(t, int64(2*2), now[dataplane.OpIPTablesSave]-ops[dataplane.OpIPTablesSave])
	require.ErrorContains(t, err, "remove iptables mode's nat chains (IPv4): iptables-restore IPv4: line 5: -X KUBE-MARK-MASQ: chain is referenced from")
	require.ErrorContains(t, err, "remove iptables mode's filter chains (IPv4)")
	left, err := IPVSModeLeftovers(e.dp, ModeNFTables)
	require.NoError(t, err)
	require.Equal(t, []string{"17 ipsets (KUBE-6-CLUSTER-IP, KUBE-6-EXTERNAL-IP, KUBE-6-EXTERNAL-IP-LOCAL, KUBE-6-HEALTH-CHECK-NODE-PORT, " +
		"KUBE-6-IPVS-IPS, KUBE-6-LOAD-BALANCER, KUBE-6-LOAD-BALANCER-FW, KUBE-6-LOAD-BALANCER-LOCAL, KUBE-6-LOAD-BALANCER-SOURCE-CID, " +
		"KUBE-6-LOAD-BALANCER-SOURCE-IP, KUBE-6-LOOP-BACK, KUBE-6-NODE-PORT-LOCAL-SCTP-HAS, KUBE-6-NODE-PORT-LOCAL-TCP, " +
		"KUBE-6-NODE-PORT-LOCAL-UDP, KUBE-6-NODE-PORT-SCTP-HASH, KUBE-6-NODE-PORT-TCP, KUBE-6-NODE-PORT-UDP)"}, left)
	filter := ruleLines(t, e.k, dataplane.IPv4, "filter")
	require.Contains(t, filter, "-A INPUT -j SOMEONE-ELSE", "another's rules stay")
	for _, f := range []dataplane.Family{dataplane.IPv4, dataplane.IPv6} {
		for _, table := range []string{"nat", "filter"} {
			for _, l := range ruleLines(t, e.k, f, table) {
				require.NotContains(t, l, "KUBE-", "%s %s", f, table)
			}
		}
	}
	require.NoError(t, CleanupIPVSMode(e.dp), "a second cleanup finds nothing to do")
}
