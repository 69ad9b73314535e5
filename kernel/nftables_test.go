package kernel

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"sigs.k8s.io/knftables"

	"github.com/kpsim/kpsim/dataplane/state"
	"github.com/kpsim/kpsim/internal/hosttools"
	"github.com/kpsim/kpsim/kernel/netns/netnstest"
	"github.com/kpsim/kpsim/sim"
)

// nftablesSteps are transactions shaped as kube-proxy's nftables mode
// writes them (docs/nftables.md): a table, a nat base chain jumping to a
// services chain that looks a verdict map up, service chains choosing an
// endpoint chain by numgen, endpoint chains that DNAT, a set of cluster
// IPs; then a sync that removes a service (its element, flushed and
// deleted chains), and one that must fail as a whole (a rule jumping to a
// chain that does not exist) and change nothing.
func nftablesSteps(tx func() *knftables.Transaction) []struct {
	tx   *knftables.Transaction
	fail bool
} {
	first := tx()
	first.Add(&knftables.Table{Comment: knftables.PtrTo("rules for kpsim's conformance test")})
	first.Add(&knftables.Chain{Name: "nat-prerouting", Type: knftables.PtrTo(knftables.NATType), Hook: knftables.PtrTo(knftables.PreroutingHook), Priority: knftables.PtrTo(knftables.DNATPriority)})
	first.Add(&knftables.Chain{Name: "services"})
	first.Add(&knftables.Rule{Chain: "nat-prerouting", Rule: "jump services"})
	first.Add(&knftables.Set{Name: "cluster-ips", Type: "ipv4_addr", Comment: knftables.PtrTo("Active ClusterIPs")})
	first.Add(&knftables.Map{Name: "service-ips", Type: "ipv4_addr . inet_proto . inet_service : verdict"})
	first.Add(&knftables.Rule{Chain: "services", Rule: "ip daddr . meta l4proto . th dport vmap @service-ips"})
	for i := range 3 {
		svc, ip := fmt.Sprintf("service-%d-ns/svc%d/tcp/p80", i, i), fmt.Sprintf("172.30.0.%d", 10+i)
		first.Add(&knftables.Chain{Name: svc})
		var eps []string
		for j := range 2 {
			ep := fmt.Sprintf("endpoint-%d-%d-ns/svc%d/tcp/p80__10.180.%d.%d/8080", i, j, i, i, j+1)
			first.Add(&knftables.Chain{Name: ep})
			first.Add(&knftables.Rule{Chain: ep, Rule: fmt.Sprintf("meta l4proto tcp dnat to 10.180.%d.%d:8080", i, j+1)})
			eps = append(eps, fmt.Sprintf("%d : goto %s", j, ep))
		}
		first.Add(&knftables.Rule{Chain: svc, Rule: fmt.Sprintf("ip daddr %s tcp dport 80 ip saddr != 10.0.0.0/8 counter", ip), Comment: knftables.PtrTo("masquerade traffic from outside")})
		first.Add(&knftables.Rule{Chain: svc, Rule: "numgen random mod 2 vmap { " + strings.Join(eps, " , ") + " }"})
		first.Add(&knftables.Element{Set: "cluster-ips", Key: []string{ip}})
		first.Add(&knftables.Element{Map: "service-ips", Key: []string{ip, "tcp", "80"}, Value: []string{"goto " + svc}})
	}
	second := tx()
	second.Delete(&knftables.Element{Map: "service-ips", Key: []string{"172.30.0.11", "tcp", "80"}})
	second.Delete(&knftables.Element{Set: "cluster-ips", Key: []string{"172.30.0.11"}})
	second.Flush(&knftables.Chain{Name: "service-1-ns/svc1/tcp/p80"})
	second.Delete(&knftables.Chain{Name: "service-1-ns/svc1/tcp/p80"})
	failing := tx()
	failing.Add(&knftables.Element{Set: "cluster-ips", Key: []string{"172.30.0.99"}})
	failing.Add(&knftables.Rule{Chain: "services", Rule: "ip daddr 172.30.0.99 jump no-such-chain"})
	return []struct {
		tx   *knftables.Transaction
		fail bool
	}{{first, false}, {second, false}, {failing, true}}
}

// TestNFTablesConformance: the same transactions on the in-memory kernel's
// nftables (sim) and on this kernel's nf_tables (Debian's nft, in a
// namespace of the test's own) succeed or fail alike and list back the same
// table, step by step, as a state dump reads it (state.ReadNFTable).
func TestNFTablesConformance(t *testing.T) {
	hosttools.Require(t, "nft")
	if !netnstest.Private(t) {
		return
	}
	k, err := sim.New(sim.Options{})
	require.NoError(t, err)
	memory, err := k.Table(knftables.IPv4Family, "kpsim-conformance")
	require.NoError(t, err)
	real, err := nftables{}.Table(knftables.IPv4Family, "kpsim-conformance")
	require.NoError(t, err)
	ctx := context.Background()
	memSteps, realSteps := nftablesSteps(memory.NewTransaction), nftablesSteps(real.NewTransaction)
	var last *state.NFTable
	for i := range memSteps {
		memErr, realErr := memory.Run(ctx, memSteps[i].tx), real.Run(ctx, realSteps[i].tx)
		if memSteps[i].fail {
			require.Error(t, memErr, "step %d fails in memory", i)
			require.Error(t, realErr, "step %d fails on the kernel", i)
		} else {
			require.NoError(t, memErr, "step %d in memory", i)
			require.NoError(t, realErr, "step %d on the kernel", i)
		}
		want, err := state.ReadNFTable(real)
		require.NoError(t, err)
		got, err := state.ReadNFTable(memory)
		require.NoError(t, err)
		require.Equal(t, want, got, "after step %d", i)
		require.NotEmpty(t, want.Rules)
		require.NotEmpty(t, want.Sets)
		last = want
	}
	elements := map[string][]string{}
	for _, s := range last.Sets {
		elements[s.Kind+" "+s.Name] = s.Elements
	}
	require.Contains(t, slices.Concat(slices.Collect(maps.Values(elements))...), `172.30.0.10 . tcp . 80 : goto service-0-ns/svc0/tcp/p80`)
}
