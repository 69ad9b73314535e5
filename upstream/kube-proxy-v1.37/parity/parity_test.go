package parity

import (
	"io"
	"net/netip"
	"os"
	"testing"

	"github.com/stretchr/testify/require"
	"k8s.io/klog/v2"

	"github.com/kpsim/kpsim/dataplane"
	"github.com/kpsim/kpsim/dataplane/state"
)

func TestMain(m *testing.M) {
	klog.LogToStderr(false)
	klog.SetOutput(io.Discard)
	os.Exit(m.Run())
}

func TestExplain(t *testing.T) {
	dup := map[string]bool{"198.51.100.5:80/TCP": true}
	for _, tc := range []struct {
		d    state.Difference
		want bool
	}{
		{state.Difference{Kind: "destination", Object: "198.51.100.5:80/TCP -> 10.0.0.1:8080", Change: "only in A"}, true},
		{state.Difference{Kind: "virtual-server", Object: "198.51.100.5:80/TCP", Change: "differs"}, true},
		{state.Difference{Kind: "destination", Object: "198.51.100.6:80/TCP -> 10.0.0.1:8080", Change: "only in A"}, false},
		{state.Difference{Kind: "rule", Object: "IPv4 filter KUBE-IPVS-OUT-FILTER", Change: "differs", Detail: "same 2 rules in another order"}, true},
		{state.Difference{Kind: "rule", Object: "IPv4 filter KUBE-IPVS-OUT-FILTER", Change: "only in A"}, false},
		{state.Difference{Kind: "rule", Object: "IPv4 nat KUBE-SERVICES", Change: "differs"}, false},
		{state.Difference{Kind: "ipset-entry", Object: "KUBE-LOOP-BACK 10.0.0.1,tcp:80,10.0.0.1", Change: "only in B"}, false},
	} {
		require.Equal(t, tc.want, known{duplicates: dup}.explain(tc.d) != "", "%s", tc.d)
	}
}

// TestExplainKubeIPVS0NodePorts: with nodePortAddresses CIDRs, what
// kube-proxy adds because it lists kube-ipvs0's addresses as node addresses
// is explained, and nothing else.
func TestExplainKubeIPVS0NodePorts(t *testing.T) {
	eth0 := []dataplane.InterfaceAddr{{Link: "eth0", Prefix: netip.MustParsePrefix("10.0.1.11/24")}}
	bound := []string{"10.96.0.1", "10.0.0.12", "10.0.1.11", "fd00::12"}
	ipvs0, kpsim := nodePortAddresses([]string{"10.0.0.0/16", "::/0"}, bound, eth0)
	require.Equal(t, map[dataplane.Family]map[netip.Addr]bool{dataplane.IPv4: {netip.MustParseAddr("10.0.0.12"): true}}, ipvs0,
		"inside the IPv4 CIDR and not the node's own; IPv6 matches every node address, kube-ipvs0's never")
	require.Equal(t, map[dataplane.Family]int{dataplane.IPv4: 1}, kpsim)

	k := known{ipvs0NodeIPs: ipvs0, nodeIPs: kpsim}
	for _, tc := range []struct {
		d    state.Difference
		want bool
	}{
		{state.Difference{Kind: "virtual-server", Object: "10.0.0.12:30001/TCP", Change: "only in B"}, true},
		{state.Difference{Kind: "virtual-server", Object: "10.0.0.12:30001/TCP", Change: "only in A"}, false},
		{state.Difference{Kind: "virtual-server", Object: "10.0.1.11:30001/TCP", Change: "only in B"}, false},
		{state.Difference{Kind: "ipset-entry", Object: "KUBE-NODE-PORT-SCTP-HASH 10.0.0.12,sctp:30001", Change: "only in B"}, true},
		{state.Difference{Kind: "ipset-entry", Object: "KUBE-NODE-PORT-SCTP-HASH 10.0.1.11,sctp:30001", Change: "only in B"}, false},
		// kpsim has a NodePort address of its own: port-only entries must agree.
		{state.Difference{Kind: "ipset-entry", Object: "KUBE-NODE-PORT-TCP 30001", Change: "only in B"}, false},
		{state.Difference{Kind: "rule", Object: "IPv4 nat KUBE-NODE-PORT", Change: "only in B"}, false},
		{state.Difference{Kind: "ipset-entry", Object: "KUBE-CLUSTER-IP 10.0.0.12,tcp:80", Change: "only in B"}, false},
	} {
		require.Equal(t, tc.want, k.explain(tc.d) != "", "%s", tc.d)
	}
	k.nodeIPs = map[dataplane.Family]int{}
	require.NotEmpty(t, k.explain(state.Difference{Kind: "ipset-entry", Object: "KUBE-NODE-PORT-TCP 30001", Change: "only in B"}),
		"without a NodePort address of its own kpsim writes no node port entry at all")
}

// TestCorpusSample runs the first development seeds through both proxiers.
// make parity then runs the held-out seeds.
func TestCorpusSample(t *testing.T) {
	for seed := uint64(1); seed <= 16; seed++ {
		c, err := NewCase(seed, 40, 15)
		require.NoError(t, err)
		r, err := Run(c)
		require.NoError(t, err)
		for _, s := range r.Steps {
			require.Empty(t, s.Unexplained, "seed %d (%s), %s", seed, c.Config, s.Name)
		}
	}
}
