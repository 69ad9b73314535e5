package sim

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"sigs.k8s.io/knftables"
)

// TestNFTStateAgreesWithKnftablesFake: random transactions of element adds,
// deletes, chain and rule changes, some of them failing, applied to the
// in-memory table and to knftables' own fake, leave the same table after
// every transaction (elements compared as sets: neither keeps an order nft
// promises), and fail alike, with the same kind of error.
func TestNFTStateAgreesWithKnftablesFake(t *testing.T) {
	ctx := context.Background()
	s := newNFTState(knftables.IPv4Family, "kube-proxy")
	fake := knftables.NewFake(knftables.IPv4Family, "kube-proxy")
	failed, applied := 0, 0
	both := func(build func(tx *knftables.Transaction)) {
		t.Helper()
		a, b := s.factory.NewTransaction(), fake.NewTransaction()
		build(a)
		build(b)
		errA, errB := s.run(a), fake.Run(ctx, b)
		require.Equal(t, errB == nil, errA == nil, "ours: %v; knftables': %v", errA, errB)
		if errA != nil {
			failed++
		} else {
			applied++
		}
		require.Equal(t, knftables.IsNotFound(errB), knftables.IsNotFound(errA), "%v / %v", errA, errB)
		require.Equal(t, knftables.IsAlreadyExists(errB), knftables.IsAlreadyExists(errA), "%v / %v", errA, errB)
		require.Equal(t, describe(fake.Table), describe(s.table))
	}
	both(func(tx *knftables.Transaction) {
		tx.Add(&knftables.Table{})
		tx.Add(&knftables.Chain{Name: "services"})
		tx.Add(&knftables.Map{Name: "service-ips", Type: "ipv4_addr . inet_proto . inet_service : verdict"})
		tx.Add(&knftables.Set{Name: "cluster-ips", Type: "ipv4_addr"})
	})
	rng := rand.New(rand.NewPCG(1, 2))
	ip := func() string { return fmt.Sprintf("10.96.0.%d", rng.IntN(40)) }
	for range 300 {
		// The same commands for both: drawn once.
		var ops []func(tx *knftables.Transaction)
		for range 1 + rng.IntN(6) {
			switch a := ip(); rng.IntN(14) {
			case 0, 1, 2, 9, 10, 11, 12:
				ops = append(ops, func(tx *knftables.Transaction) {
					tx.Add(&knftables.Chain{Name: "svc-" + a})
					tx.Add(&knftables.Element{Map: "service-ips", Key: []string{a, "tcp", "80"}, Value: []string{"goto svc-" + a}})
				})
			case 13:
				ops = append(ops, func(tx *knftables.Transaction) {
					tx.Add(&knftables.Element{Map: "service-ips", Key: []string{a, "udp", "53"}, Value: []string{"goto svc-" + a}}) // fails without the chain
				})
			case 3:
				ops = append(ops, func(tx *knftables.Transaction) {
					tx.Destroy(&knftables.Element{Map: "service-ips", Key: []string{a, "tcp", "80"}})
				})
			case 4:
				ops = append(ops, func(tx *knftables.Transaction) {
					tx.Delete(&knftables.Element{Set: "cluster-ips", Key: []string{a}}) // fails when missing
				})
			case 5:
				ops = append(ops, func(tx *knftables.Transaction) { tx.Add(&knftables.Element{Set: "cluster-ips", Key: []string{a}}) })
			case 6:
				ops = append(ops, func(tx *knftables.Transaction) {
					tx.Add(&knftables.Chain{Name: "svc-" + a})
					tx.Add(&knftables.Rule{Chain: "svc-" + a, Rule: "ip daddr " + a + " counter"})
				})
			case 7:
				ops = append(ops, func(tx *knftables.Transaction) { tx.Flush(&knftables.Chain{Name: "svc-" + a}) }) // fails when missing
			case 8:
				ops = append(ops, func(tx *knftables.Transaction) {
					tx.Create(&knftables.Element{Set: "cluster-ips", Key: []string{a}}) // fails when present
				})
			}
		}
		both(func(tx *knftables.Transaction) {
			for _, op := range ops {
				op(tx)
			}
		})
	}
	t.Logf("%d transactions applied, %d failed and were taken back", applied, failed)
	require.Positive(t, failed)
	require.Greater(t, applied, 100)
}

// describe is a table's content as sorted lines.
func describe(t *knftables.FakeTable) []string {
	if t == nil {
		return nil
	}
	var out []string
	for name, c := range t.Chains {
		var rules []string
		for _, r := range c.Rules {
			rules = append(rules, r.Rule)
		}
		out = append(out, "chain "+name+": "+strings.Join(rules, "; "))
	}
	for name, set := range t.Sets {
		for _, e := range set.Elements {
			out = append(out, "set "+name+" "+strings.Join(e.Key, " . "))
		}
	}
	for name, m := range t.Maps {
		for _, e := range m.Elements {
			out = append(out, "map "+name+" "+strings.Join(e.Key, " . ")+" : "+strings.Join(e.Value, " "))
		}
	}
	slices.Sort(out)
	return out
}
