package kubeproxy

import (
	"io"
	"os"
	"testing"

	"github.com/stretchr/testify/require"
	"k8s.io/klog/v2"

	"github.com/kpsim/kpsim/dataplane"
	"github.com/kpsim/kpsim/dataplane/state"
	"github.com/kpsim/kpsim/objects"
	"github.com/kpsim/kpsim/proxier"
	"github.com/kpsim/kpsim/scenarios"
)

const example = "../../../objects/testdata/example"

func TestMain(m *testing.M) {
	klog.LogToStderr(false) // kube-proxy narrates every sync
	klog.SetOutput(io.Discard)
	os.Exit(m.Run())
}

// TestExampleDump runs kube-proxy on kpsim's example export and checks that
// its state reads back the way kpsim dumps a kernel: virtual servers with
// their destinations, ipset entries as the kernel lists them, kube-ipvs0
// addresses, and iptables-save text (built-in chain policies, quoted
// comments on the jumps kube-proxy inserts rule by rule).
func TestExampleDump(t *testing.T) {
	set, err := objects.Load(example)
	require.NoError(t, err)
	kp, err := scenarios.NewStateRun(set, proxier.Config{}, "")
	require.NoError(t, err)
	n, err := New(proxier.Config{NodeName: kp.Node.Name, Families: kp.Families}, kp.Addresses)
	require.NoError(t, err)
	st, err := n.First(set)
	require.NoError(t, err)

	vs := map[string]state.VirtualServer{}
	for _, v := range st.VirtualServers {
		vs[v.Key()] = v
	}
	require.Equal(t, []state.Dest{{Address: "10.244.1.5", Port: 53, Weight: 1}, {Address: "10.244.1.6", Port: 53, Weight: 1},
		{Address: "10.244.2.7", Port: 53, Weight: 1}}, vs["10.96.0.10:53/UDP"].Destinations)
	require.Equal(t, []string{"persistent"}, vs["10.96.10.40:8080/TCP"].Flags)
	require.Contains(t, vs, "[fd00:96::60]:80/TCP")

	sets := map[string]state.IPSet{}
	for _, s := range st.IPSets {
		sets[s.Name] = s
	}
	require.Len(t, sets, 34, "17 sets per family")
	require.Equal(t, "hash:ip,port,net", sets["KUBE-LOAD-BALANCER-SOURCE-CIDR"].Type)
	require.Contains(t, sets["KUBE-CLUSTER-IP"].Entries, "10.96.0.10,udp:53")
	require.Contains(t, sets["KUBE-6-CLUSTER-IP"].Entries, "fd00:96::60,tcp:80")
	require.Contains(t, st.Addresses, "10.96.0.10")
	require.NotContains(t, st.Addresses, "10.0.0.11", "an external IP that is a node address is not bound")

	v4 := st.IPTables[dataplane.IPv4]
	require.Contains(t, v4.NAT, ":OUTPUT ACCEPT")
	require.Contains(t, v4.NAT, ":KUBE-SERVICES -")
	require.Contains(t, v4.NAT, `-A OUTPUT -m comment --comment "kubernetes service portals" -j KUBE-SERVICES`)
	require.Contains(t, v4.Filter, `-A KUBE-IPVS-FILTER -m conntrack --ctstate NEW -m set --match-set KUBE-IPVS-IPS dst -j REJECT --reject-with icmp-port-unreachable`)
	require.Contains(t, st.IPTables[dataplane.IPv6].NAT, `-A KUBE-SERVICES -s ::1/128 -j RETURN`)
}
