package sim

import (
	"context"
	"slices"
	"time"

	"sigs.k8s.io/knftables"

	"github.com/kpsim/kpsim/dataplane"
)

// nftKey names an nftables table of the in-memory kernel.
type nftKey struct {
	family knftables.Family
	name   string
}

// Table is dataplane.NFTables: one table of nf_tables on this kernel
// (nftState), charged from the profile and seen by probes. A table lives
// as long as the kernel: a restarted proxier finds what the previous one
// wrote.
func (k *Kernel) Table(family knftables.Family, name string, options ...knftables.Option) (knftables.Interface, error) {
	k.lock()
	defer k.unlock()
	key := nftKey{family, name}
	s := k.nft[key]
	if s == nil {
		s = newNFTState(family, name)
		k.nft[key] = s
	}
	return nftTable{k, s, slices.Contains(options, knftables.UseNetlink)}, nil
}

// nftTable charges each call what the nft process it stands for costs:
//
//   - a transaction (one `nft -f`) its price plus a price per object the
//     table holds (nft reads the table's objects into its cache before it
//     applies anything), and each of its commands a price plus a price per
//     object the table holds as the transaction runs (taken as before it
//     plus half its commands: a command looks its chain or map up among
//     them), so that a large transaction onto a large table grows as nft
//     1.0.6 was measured to (docs/nftables.md), a price more if it
//     deletes anything (nft-deleting), and for each rule with a map of its
//     own a price (nft-map-rule) plus one per entry of the transaction
//     before it and one per rule with a map the table holds by then (the
//     profile's NFTMapRule);
//   - a listing of names as List says; of one set's or map's elements,
//     its price plus a price per object the table holds (nft reads the
//     table to print one map).
//
// Counts and prices go through the kernel's lock, as every operation's do.
type nftTable struct {
	k       *Kernel
	s       *nftState
	netlink bool // names are listed over netlink (knftables.UseNetlink)
}

func (t nftTable) NewTransaction() *knftables.Transaction { return t.s.factory.NewTransaction() }

// Run takes the transaction's time, then applies it: nft commits a
// transaction at its end, all at once, so probes see the table as it was
// until then.
func (t nftTable) Run(_ context.Context, tx *knftables.Transaction) error {
	t.k.lock()
	t.k.transaction(t.s, tx)
	t.k.unlock() // spends the time
	t.k.lock()
	defer t.k.unlock()
	return t.s.run(tx)
}

func (t nftTable) Check(_ context.Context, tx *knftables.Transaction) error {
	t.k.lock()
	defer t.k.unlock()
	t.k.transaction(t.s, tx)
	return t.s.check(tx)
}

func (t nftTable) ListAll(context.Context) (map[string][]string, error) {
	t.k.lock()
	defer t.k.unlock()
	all, n := map[string][]string{}, 0
	for _, kind := range []string{"chain", "set", "map", "counter", "flowtable"} {
		names, err := t.s.list(kind)
		if err != nil {
			t.k.read(dataplane.OpNFTList, 0)
			return nil, err
		}
		all[kind], n = names, n+len(names)
	}
	t.k.read(dataplane.OpNFTList, n)
	return all, nil
}

// List lists names: with the nft binary, which reads and prints the whole
// table, at a price per object the table holds and per pair of them (nft
// 1.0.6 was measured to take longer than linear); or over netlink, at a
// price per object the table holds.
func (t nftTable) List(_ context.Context, objectType string) ([]string, error) {
	t.k.lock()
	defer t.k.unlock()
	names, err := t.s.list(objectType)
	objects := t.s.objects()
	if t.netlink {
		t.k.read(dataplane.OpNFTListNetlink, objects)
	} else {
		t.k.readThrough(dataplane.OpNFTList, objects, objects)
	}
	return names, err
}

func (t nftTable) ListRules(_ context.Context, chain string) ([]*knftables.Rule, error) {
	t.k.lock()
	defer t.k.unlock()
	rules, err := t.s.listRules(chain)
	t.k.read(dataplane.OpNFTList, len(rules))
	return rules, err
}

func (t nftTable) ListElements(_ context.Context, objectType, name string) ([]*knftables.Element, error) {
	t.k.lock()
	defer t.k.unlock()
	t.s.expire(t.k.now()) // what traffic wrote and has expired is not listed
	elems, err := t.s.listElements(objectType, name)
	t.k.read(dataplane.OpNFTListElements, t.s.objects()) // nft reads the table to print one map
	return elems, err
}

func (t nftTable) ListCounters(context.Context) ([]*knftables.Counter, error) {
	t.k.lock()
	defer t.k.unlock()
	counters, err := t.s.listCounters()
	t.k.read(dataplane.OpNFTList, len(counters))
	return counters, err
}

// transaction counts and charges one transaction of tx's commands onto s.
func (k *Kernel) transaction(s *nftState, tx *knftables.Transaction) {
	n := tx.NumOperations()
	size := float64(s.objects() + n/2)
	deleting := k.ops[dataplane.OpNFTDeleting]
	mapRules := k.ops.NFTTransaction(tx)
	k.charge(k.costs.op[dataplane.OpNFTTransaction] + time.Duration(n)*k.costs.op[dataplane.OpNFTCommand] +
		seconds(k.costs.item[dataplane.OpNFTTransaction]*size+float64(n)*k.costs.item[dataplane.OpNFTCommand]*size))
	if k.ops[dataplane.OpNFTDeleting] > deleting {
		k.charge(k.costs.op[dataplane.OpNFTDeleting])
	}
	inTable := 0
	if len(mapRules) > 0 || k.costs.mapRule.PerTransaction > 0 {
		inTable = s.mapRules()
	}
	k.charge(k.costs.mapRule.Transaction(inTable))
	for _, at := range mapRules {
		at.Table = inTable
		k.charge(k.costs.op[dataplane.OpNFTMapRule] + k.costs.mapRule.Price(at))
	}
}
