package kernel

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"sigs.k8s.io/knftables"

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

// nftablesListing is what the knftables listings say of a table: its
// chains, sets and maps, each set's and map's elements, each chain's number
// of rules and their comments, sorted: what kube-proxy reads back.
func nftablesListing(t *testing.T, nft knftables.Interface) []string {
	t.Helper()
	ctx := context.Background()
	var out []string
	for _, kind := range []string{"chain", "set", "map"} {
		names, err := nft.List(ctx, kind)
		require.NoError(t, err, kind)
		slices.Sort(names)
		for _, name := range names {
			out = append(out, kind+" "+name)
			switch kind {
			case "chain":
				rules, err := nft.ListRules(ctx, name)
				require.NoError(t, err)
				for _, r := range rules {
					comment := ""
					if r.Comment != nil {
						comment = *r.Comment
					}
					out = append(out, fmt.Sprintf("  rule comment=%q", comment))
				}
			default:
				elems, err := nft.ListElements(ctx, kind, name)
				require.NoError(t, err)
				var es []string
				for _, e := range elems {
					es = append(es, "  element "+strings.Join(e.Key, " . ")+" : "+strings.Join(e.Value, " "))
				}
				slices.Sort(es)
				out = append(out, es...)
			}
		}
	}
	return out
}

// TestNFTablesConformance: the same transactions on the in-memory kernel's
// nftables (sim) and on this kernel's nf_tables (Debian's nft, in a
// namespace of the test's own) succeed or fail alike and list back the same
// table, step by step.
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
	for i := range memSteps {
		memErr, realErr := memory.Run(ctx, memSteps[i].tx), real.Run(ctx, realSteps[i].tx)
		if memSteps[i].fail {
			require.Error(t, memErr, "step %d fails in memory", i)
			require.Error(t, realErr, "step %d fails on the kernel", i)
		} else {
			require.NoError(t, memErr, "step %d in memory", i)
			require.NoError(t, realErr, "step %d on the kernel", i)
		}
		require.Equal(t, nftablesListing(t, real), nftablesListing(t, memory), "after step %d", i)
	}
	require.Contains(t, nftablesListing(t, real), `  element 172.30.0.10 . tcp . 80 : goto service-0-ns/svc0/tcp/p80`)
}
