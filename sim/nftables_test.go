package sim_test

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"sigs.k8s.io/knftables"

	"github.com/kpsim/kpsim/dataplane"
	"github.com/kpsim/kpsim/sim"
)

// TestNFTablesCharges: a table's transactions and listings are counted by
// kind and priced as the profile says, a transaction dearer on a larger
// table; a failed transaction changes nothing; a table outlives the
// interface that wrote it.
func TestNFTablesCharges(t *testing.T) {
	k, err := sim.New(sim.Options{})
	require.NoError(t, err)
	ctx := context.Background()
	nft, err := k.Table(knftables.IPv4Family, "kube-proxy")
	require.NoError(t, err)
	oneElement := func(i int) time.Duration {
		before, _ := k.Kernel()
		tx := nft.NewTransaction()
		tx.Add(&knftables.Element{Map: "service-ips", Key: []string{fmt.Sprintf("10.96.%d.%d", i/256, i%256), "tcp", "80"}, Value: []string{"goto services"}})
		require.NoError(t, nft.Run(ctx, tx))
		after, _ := k.Kernel()
		return after - before
	}
	tx := nft.NewTransaction()
	tx.Add(&knftables.Table{})
	tx.Add(&knftables.Chain{Name: "services"})
	tx.Add(&knftables.Map{Name: "service-ips", Type: "ipv4_addr . inet_proto . inet_service : verdict"})
	require.NoError(t, nft.Run(ctx, tx))
	small := oneElement(0)
	for i := 1; i < 2000; i++ {
		oneElement(i)
	}
	large := oneElement(2000)
	require.Greater(t, large, small, "a transaction onto 2,000 elements costs more than onto one")

	bad := nft.NewTransaction()
	bad.Add(&knftables.Element{Map: "service-ips", Key: []string{"10.97.0.1", "tcp", "80"}, Value: []string{"goto services"}})
	bad.Add(&knftables.Rule{Chain: "no-such-chain", Rule: "drop"})
	require.Error(t, nft.Run(ctx, bad))

	again, err := k.Table(knftables.IPv4Family, "kube-proxy")
	require.NoError(t, err)
	elems, err := again.ListElements(ctx, "map", "service-ips")
	require.NoError(t, err)
	require.Len(t, elems, 2001, "the failed transaction added nothing")
	ops := k.Ops()
	require.EqualValues(t, 2003, ops[dataplane.OpNFTTransaction])
	require.EqualValues(t, 2001+3+2, ops[dataplane.OpNFTCommand])
	require.EqualValues(t, 1, ops[dataplane.OpNFTListElements])
}

// TestConntrackFlows: the conntrack table lists by family.
func TestConntrackFlows(t *testing.T) {
	k, err := sim.New(sim.Options{})
	require.NoError(t, err)
	v4 := sim.Flow{Protocol: dataplane.UDP, Client: netip.MustParseAddrPort("10.244.0.9:5353"), OrigDst: netip.MustParseAddrPort("10.96.0.10:53"), ReplySrc: netip.MustParseAddrPort("10.244.1.5:53")}
	v6 := sim.Flow{Protocol: dataplane.UDP, Client: netip.MustParseAddrPort("[fd00::9]:5353"), OrigDst: netip.MustParseAddrPort("[fd00:10:96::a]:53"), ReplySrc: netip.MustParseAddrPort("[fd00:10:244::5]:53")}
	k.AddFlow(v4)
	k.AddFlow(v6)
	got, err := k.Flows(dataplane.IPv4)
	require.NoError(t, err)
	require.Equal(t, []dataplane.ConntrackFlow{v4}, got)
	got, err = k.Flows(dataplane.IPv6)
	require.NoError(t, err)
	require.Equal(t, []dataplane.ConntrackFlow{v6}, got)
	require.EqualValues(t, 2, k.Ops()[dataplane.OpConntrackList])
}
