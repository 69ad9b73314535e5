package dataplane_test

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"sigs.k8s.io/knftables"

	"github.com/kpsim/kpsim/dataplane"
)

// nftTransactionOpsText is how NFTTransactionOps counted before it read the
// commands: from the transaction's text, line by line. The oracle its
// counts are checked against.
func nftTransactionOpsText(tx *knftables.Transaction) (deletes bool, mapRules []dataplane.NFTMapRule) {
	entries, elements := 0, 0
	for line := range strings.Lines(tx.String()) {
		verb, rest, _ := strings.Cut(line, " ")
		switch {
		case verb == "delete" || verb == "destroy":
			deletes = true
		case (verb == "add" || verb == "insert" || verb == "replace") && strings.HasPrefix(rest, "rule ") && dataplane.HasMap(rest):
			_, set, _ := strings.Cut(rest, "{")
			set, _, _ = strings.Cut(set, "}")
			mapRules = append(mapRules, dataplane.NFTMapRule{Entries: entries, Elements: elements, Maps: len(mapRules)})
			entries++
			elements += strings.Count(set, ",") + 1
		}
		entries++
	}
	return deletes, mapRules
}

// TestNFTTransactionOpsAsText: counted from the commands, random
// transactions of every command kube-proxy's nftables proxier writes
// (v1.37's, its cleanup's and its localhost NodePort rejects') count as
// their text did. (Deleting a table, chain, set or map by handle, which
// kube-proxy never does, is not among them: knftables writes no line end
// after it, and the text ran it into the next command's line.)
func TestNFTTransactionOpsAsText(t *testing.T) {
	svc := "service-ULMVA6XW-ns1/svc1/tcp/p80"
	cmds := []func(tx *knftables.Transaction, i int){
		func(tx *knftables.Transaction, _ int) {
			tx.Add(&knftables.Table{Comment: knftables.PtrTo("rules for kube-proxy")})
		},
		func(tx *knftables.Transaction, _ int) {
			tx.Add(&knftables.Chain{Name: "nat-prerouting", Type: knftables.PtrTo(knftables.NATType),
				Hook: knftables.PtrTo(knftables.PreroutingHook), Priority: knftables.PtrTo(knftables.DNATPriority)})
		},
		func(tx *knftables.Transaction, _ int) {
			tx.Add(&knftables.Chain{Name: "filter-forward", Type: knftables.PtrTo(knftables.FilterType),
				Hook: knftables.PtrTo(knftables.ForwardHook), Priority: knftables.PtrTo(knftables.FilterPriority + "-10"), Policy: knftables.PtrTo(knftables.AcceptPolicy)})
		},
		func(tx *knftables.Transaction, _ int) {
			tx.Add(&knftables.Chain{Name: "reject-chain", Comment: knftables.PtrTo("helper for @no-endpoint-services / @no-endpoint-nodeports")})
		},
		func(tx *knftables.Transaction, _ int) { tx.Add(&knftables.Chain{Name: svc}) },
		func(tx *knftables.Transaction, _ int) { tx.Flush(&knftables.Chain{Name: svc}) },
		func(tx *knftables.Transaction, _ int) { tx.Delete(&knftables.Chain{Name: svc}) },
		func(tx *knftables.Transaction, _ int) { tx.Destroy(&knftables.Chain{Name: svc}) },
		func(tx *knftables.Transaction, _ int) {
			tx.Add(&knftables.Set{Name: "cluster-ips", Type: "ipv4_addr", Comment: knftables.PtrTo("Active ClusterIPs")})
		},
		func(tx *knftables.Transaction, _ int) {
			tx.Add(&knftables.Set{Name: "affinity-A", Type: "ipv4_addr", Flags: []knftables.SetFlag{knftables.DynamicFlag, knftables.TimeoutFlag}, Timeout: knftables.PtrTo(10800 * time.Second)})
		},
		func(tx *knftables.Transaction, _ int) {
			tx.Add(&knftables.Set{Name: "firewall-allow", TypeOf: "ip saddr", Flags: []knftables.SetFlag{knftables.IntervalFlag}})
		},
		func(tx *knftables.Transaction, _ int) { tx.Flush(&knftables.Set{Name: "cluster-ips"}) },
		func(tx *knftables.Transaction, _ int) { tx.Delete(&knftables.Set{Name: "affinity-A"}) },
		func(tx *knftables.Transaction, _ int) {
			tx.Add(&knftables.Map{Name: "service-ips", Type: "ipv4_addr . inet_proto . inet_service : verdict", Comment: knftables.PtrTo("ClusterIP, ExternalIP and LoadBalancer IP traffic")})
		},
		func(tx *knftables.Transaction, _ int) { tx.Flush(&knftables.Map{Name: "service-ips"}) },
		func(tx *knftables.Transaction, _ int) {
			tx.Delete(&knftables.Map{Name: "localhost-nodeport-reject-ports"})
		},
		func(tx *knftables.Transaction, _ int) {
			tx.Add(&knftables.Counter{Name: "localhost-nodeport-rejected-tcp"})
		},
		func(tx *knftables.Transaction, _ int) {
			tx.Delete(&knftables.Counter{Name: "localhost-nodeport-rejected-tcp"})
		},
		func(tx *knftables.Transaction, i int) {
			tx.Add(&knftables.Element{Set: "cluster-ips", Key: []string{fmt.Sprintf("172.30.0.%d", i)}})
		},
		func(tx *knftables.Transaction, i int) {
			tx.Add(&knftables.Element{Map: "service-ips", Key: []string{fmt.Sprintf("172.30.0.%d", i), "tcp", "80"}, Value: []string{"goto " + svc}})
		},
		func(tx *knftables.Transaction, i int) {
			tx.Add(&knftables.Element{Map: "no-endpoint-services", Key: []string{fmt.Sprintf("172.30.0.%d", i), "tcp", "80"}, Value: []string{"goto reject-chain"}, Comment: knftables.PtrTo("ns6/svc6:p80")})
		},
		func(tx *knftables.Transaction, i int) {
			tx.Delete(&knftables.Element{Map: "service-ips", Key: []string{fmt.Sprintf("172.30.0.%d", i), "tcp", "80"}})
		},
		func(tx *knftables.Transaction, i int) {
			tx.Destroy(&knftables.Element{Set: "cluster-ips", Key: []string{fmt.Sprintf("172.30.0.%d", i)}})
		},
		func(tx *knftables.Transaction, _ int) {
			tx.Add(&knftables.Rule{Chain: "services", Rule: "ip daddr . meta l4proto . th dport vmap @service-ips"})
		},
		func(tx *knftables.Transaction, _ int) {
			tx.Add(&knftables.Rule{Chain: "cluster-ips-check", Rule: "ip daddr { 172.30.0.0/16 } drop", Comment: knftables.PtrTo("Drop traffic to unallocated ClusterIPs")})
		},
		func(tx *knftables.Transaction, i int) {
			eps := make([]string, 1+i%4)
			for j := range eps {
				eps[j] = fmt.Sprintf("%d : 10.180.0.%d . 80", j, j)
			}
			tx.Add(&knftables.Rule{Chain: svc, Rule: knftables.Concat("meta l4proto tcp dnat ip addr . port to numgen random mod", len(eps), "map {", strings.Join(eps, " , "), "}")})
		},
		func(tx *knftables.Transaction, _ int) {
			tx.Add(&knftables.Rule{Chain: svc, Rule: "numgen random mod 2 vmap { 0 : goto endpoint-A , 1 : goto endpoint-B }"})
		},
		func(tx *knftables.Transaction, _ int) {
			tx.Add(&knftables.Rule{Chain: "endpoint-A", Rule: "update @affinity-A { ip saddr }"})
		},
		func(tx *knftables.Transaction, _ int) {
			tx.Add(&knftables.Rule{Chain: "external-X", Rule: "mark set mark or 0x4000", Comment: knftables.PtrTo("masquerade")})
		},
		func(tx *knftables.Transaction, _ int) {
			tx.Add(&knftables.Rule{Chain: "localhost-nodeport-reject-tcp", Rule: `counter name "localhost-nodeport-rejected-tcp" reject`})
		},
		func(tx *knftables.Transaction, i int) {
			tx.Insert(&knftables.Rule{Chain: "firewall-X", Rule: "ip saddr != { 203.0.113.0/25 , 198.51.100.0/24 } drop", Index: knftables.PtrTo(i % 3)})
		},
		func(tx *knftables.Transaction, i int) {
			tx.Replace(&knftables.Rule{Chain: svc, Rule: "meta l4proto tcp dnat to 10.180.0.3:80", Handle: knftables.PtrTo(i)})
		},
		func(tx *knftables.Transaction, i int) {
			tx.Delete(&knftables.Rule{Chain: svc, Handle: knftables.PtrTo(i)})
		},
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for n := range 300 {
		tx := knftables.NewFake(knftables.IPv4Family, "kube-proxy").NewTransaction()
		for i := range rng.IntN(40) {
			cmds[rng.IntN(len(cmds))](tx, i)
		}
		deletes, mapRules := dataplane.NFTTransactionOps(tx)
		wantDeletes, wantMapRules := nftTransactionOpsText(tx)
		require.Equal(t, wantDeletes, deletes, "transaction %d:\n%s", n, tx)
		require.Equal(t, wantMapRules, mapRules, "transaction %d:\n%s", n, tx)
	}
}

// BenchmarkNFTTransactionOps counts a first sync's transaction of 10,000
// services (50,000 commands, half the rules with a map) from its commands,
// and from its text as before.
func BenchmarkNFTTransactionOps(b *testing.B) {
	tx := knftables.NewFake(knftables.IPv4Family, "kube-proxy").NewTransaction()
	for i := range 10000 {
		svc := fmt.Sprintf("service-%08d-ns/svc%d/tcp/p80", i, i)
		ip := fmt.Sprintf("172.30.%d.%d", i>>8, i&255)
		tx.Add(&knftables.Chain{Name: svc})
		tx.Flush(&knftables.Chain{Name: svc})
		rule := "meta l4proto tcp dnat to 10.180.0.1:80"
		if i%2 == 1 {
			rule = "meta l4proto tcp dnat ip addr . port to numgen random mod 2 map { 0 : 10.180.0.1 . 80 , 1 : 10.180.0.2 . 80 }"
		}
		tx.Add(&knftables.Rule{Chain: svc, Rule: rule})
		tx.Add(&knftables.Element{Set: "cluster-ips", Key: []string{ip}})
		tx.Add(&knftables.Element{Map: "service-ips", Key: []string{ip, "tcp", "80"}, Value: []string{"goto " + svc}})
	}
	for name, count := range map[string]func(*knftables.Transaction) (bool, []dataplane.NFTMapRule){
		"commands": dataplane.NFTTransactionOps,
		"text":     nftTransactionOpsText,
	} {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				count(tx)
			}
		})
	}
}
