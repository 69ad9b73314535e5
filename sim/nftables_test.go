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

// TestNFTMapRuleCharge: a rule with a map of its own costs its price plus
// one per entry of the transaction before it, per element of the sets of
// the rules with maps before it and per such rule, in the table or the
// transaction; a transaction without one pays neither.
func TestNFTMapRuleCharge(t *testing.T) {
	p, err := sim.LoadProfile("host")
	require.NoError(t, err)
	p.Ops[dataplane.OpNFTMapRule.String()] = 1e-3
	p.NFTMapRule = &sim.NFTMapRuleCost{PerEntry: 1e-6, PerElement: 1e-5, PerMap: 1e-4}
	ctx := context.Background()
	// charge is what a transaction onto a fresh table costs: the table, a
	// chain, then what add adds, and mapRules of them rules with maps.
	charge := func(mapRules int64, add func(tx *knftables.Transaction)) time.Duration {
		k, err := sim.New(sim.Options{Profile: p})
		require.NoError(t, err)
		nft, err := k.Table(knftables.IPv4Family, "kube-proxy")
		require.NoError(t, err)
		tx := nft.NewTransaction()
		tx.Add(&knftables.Table{})
		tx.Add(&knftables.Chain{Name: "svc"})
		add(tx)
		_, before := k.Kernel()
		require.NoError(t, nft.Run(ctx, tx))
		_, after := k.Kernel()
		require.Equal(t, mapRules, k.Ops()[dataplane.OpNFTMapRule])
		return after - before
	}
	// cost is what one transaction of plain elements, then a rule with a
	// map (or a rule without one), costs beyond the same transaction's
	// commands without the map.
	cost := func(elements int, mapped bool) time.Duration {
		rule, maps := "meta l4proto tcp dnat to 10.1.0.1:80", int64(0)
		if mapped {
			rule, maps = "meta l4proto tcp dnat ip addr . port to numgen random mod 2 map { 0 : 10.1.0.1 . 80 , 1 : 10.1.0.2 . 80 }", 1
		}
		return charge(maps, func(tx *knftables.Transaction) {
			tx.Add(&knftables.Set{Name: "ips", Type: "ipv4_addr"})
			for i := range elements {
				tx.Add(&knftables.Element{Set: "ips", Key: []string{fmt.Sprintf("10.96.%d.%d", i/256, i%256)}})
			}
			tx.Add(&knftables.Rule{Chain: "svc", Rule: rule})
		})
	}
	beyond := func(elements int) time.Duration { return cost(elements, true) - cost(elements, false) }
	// 3 entries (table, chain, set) and the elements come before the rule.
	require.Equal(t, time.Millisecond+47*time.Microsecond, beyond(44))
	require.Equal(t, time.Millisecond+98*time.Microsecond, beyond(95))

	// A second rule with a map, after the first's set and its two
	// elements: each rule its price, the second 4 entries (table, chain,
	// the first's rule and set), 2 elements and 1 map more.
	twoRules := func(mapRules int64, rule string) time.Duration {
		return charge(mapRules, func(tx *knftables.Transaction) {
			tx.Add(&knftables.Rule{Chain: "svc", Rule: rule})
			tx.Add(&knftables.Rule{Chain: "svc", Rule: rule})
		})
	}
	twice, plain := twoRules(2, "numgen random mod 2 vmap { 0 : drop , 1 : accept }"), twoRules(0, "drop")
	require.Equal(t, 2*time.Millisecond+2*time.Microsecond+(4*time.Microsecond+20*time.Microsecond+100*time.Microsecond), twice-plain)

	// A rule with a map in a later transaction, after one in the table,
	// pays for that one: its second transaction costs PerMap more than
	// with PerMap zero; and every transaction onto that table
	// PerTransaction more.
	second := func(perMap, perTransaction float64) time.Duration {
		p.NFTMapRule.PerMap, p.NFTMapRule.PerTransaction = perMap, perTransaction
		k, err := sim.New(sim.Options{Profile: p})
		require.NoError(t, err)
		nft, err := k.Table(knftables.IPv4Family, "kube-proxy")
		require.NoError(t, err)
		var cost time.Duration
		for _, chain := range []string{"a", "b"} {
			tx := nft.NewTransaction()
			tx.Add(&knftables.Table{})
			tx.Add(&knftables.Chain{Name: chain})
			tx.Add(&knftables.Rule{Chain: chain, Rule: "numgen random mod 2 vmap { 0 : drop , 1 : accept }"})
			_, before := k.Kernel()
			require.NoError(t, nft.Run(ctx, tx))
			_, after := k.Kernel()
			cost = after - before
		}
		return cost
	}
	require.Equal(t, 100*time.Microsecond, second(1e-4, 0)-second(0, 0))
	require.Equal(t, 7*time.Microsecond, second(0, 7e-6)-second(0, 0))
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
