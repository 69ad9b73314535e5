package sim

import (
	"context"
	"time"

	"sigs.k8s.io/knftables"

	"github.com/kpsim/kpsim/dataplane"
)

// nftKey names an nftables table of the in-memory kernel.
type nftKey struct {
	family knftables.Family
	name   string
}

// Table is dataplane.NFTables: one table of nf_tables, held as knftables'
// own fake holds it (its transactions apply atomically or not at all, with
// nft's errors for a missing or existing object), on this kernel, charged
// from the profile and seen by probes. A table lives as long as the
// kernel: a restarted proxier finds what the previous one wrote.
func (k *Kernel) Table(family knftables.Family, name string) (knftables.Interface, error) {
	k.lock()
	defer k.unlock()
	key := nftKey{family, name}
	f := k.nft[key]
	if f == nil {
		f = knftables.NewFake(family, name)
		k.nft[key] = f
	}
	return nftTable{k, f}, nil
}

// nftTable charges each call what the nft process it stands for costs:
//
//   - a transaction (one `nft -f`) its price plus a price per object the
//     table holds (nft reads the table's objects into its cache before it
//     applies anything), and each of its commands a price plus a price per
//     object the table holds as the transaction runs (taken as before it
//     plus half its commands: a command looks its chain or map up among
//     them), so that a large transaction onto a large table grows as nft
//     1.0.6 was measured to (docs/nftables.md);
//   - a listing its price plus a price per name or element it returns.
//
// Counts and prices go through the kernel's lock, as every operation's do.
type nftTable struct {
	k    *Kernel
	fake *knftables.Fake
}

func (t nftTable) NewTransaction() *knftables.Transaction { return t.fake.NewTransaction() }

// Run takes the transaction's time, then applies it: nft commits a
// transaction at its end, all at once, so probes see the table as it was
// until then.
func (t nftTable) Run(ctx context.Context, tx *knftables.Transaction) error {
	t.k.lock()
	t.k.transaction(t.fake, tx)
	t.k.unlock() // spends the time
	t.k.lock()
	defer t.k.unlock()
	return t.fake.Run(ctx, tx)
}

func (t nftTable) Check(ctx context.Context, tx *knftables.Transaction) error {
	t.k.lock()
	defer t.k.unlock()
	t.k.transaction(t.fake, tx)
	return t.fake.Check(ctx, tx)
}

func (t nftTable) ListAll(ctx context.Context) (map[string][]string, error) {
	t.k.lock()
	defer t.k.unlock()
	all, err := t.fake.ListAll(ctx)
	n := 0
	for _, names := range all {
		n += len(names)
	}
	t.k.read(dataplane.OpNFTList, n)
	return all, err
}

func (t nftTable) List(ctx context.Context, objectType string) ([]string, error) {
	t.k.lock()
	defer t.k.unlock()
	names, err := t.fake.List(ctx, objectType)
	t.k.read(dataplane.OpNFTList, len(names))
	return names, err
}

func (t nftTable) ListRules(ctx context.Context, chain string) ([]*knftables.Rule, error) {
	t.k.lock()
	defer t.k.unlock()
	rules, err := t.fake.ListRules(ctx, chain)
	t.k.read(dataplane.OpNFTList, len(rules))
	return rules, err
}

func (t nftTable) ListElements(ctx context.Context, objectType, name string) ([]*knftables.Element, error) {
	t.k.lock()
	defer t.k.unlock()
	elems, err := t.fake.ListElements(ctx, objectType, name)
	t.k.read(dataplane.OpNFTListElements, len(elems))
	// The fake hands out its own slice, which its next transaction
	// replaces but does not change: as a listing's output, it stays.
	return elems, err
}

func (t nftTable) ListCounters(ctx context.Context) ([]*knftables.Counter, error) {
	t.k.lock()
	defer t.k.unlock()
	counters, err := t.fake.ListCounters(ctx)
	t.k.read(dataplane.OpNFTList, len(counters))
	return counters, err
}

// transaction counts and charges one transaction of tx's commands onto f.
func (k *Kernel) transaction(f *knftables.Fake, tx *knftables.Transaction) {
	n := tx.NumOperations()
	size := time.Duration(nftObjects(f) + n/2)
	k.ops[dataplane.OpNFTTransaction]++
	k.ops[dataplane.OpNFTCommand] += int64(n)
	k.charge(k.costs.op[dataplane.OpNFTTransaction] + k.costs.item[dataplane.OpNFTTransaction]*size +
		time.Duration(n)*(k.costs.op[dataplane.OpNFTCommand]+k.costs.item[dataplane.OpNFTCommand]*size))
}

// nftObjects is how many objects f's table holds: chains, rules, sets,
// maps and their elements.
func nftObjects(f *knftables.Fake) int {
	f.RLock()
	defer f.RUnlock()
	t := f.Table
	if t == nil {
		return 0
	}
	n := len(t.Chains) + len(t.Sets) + len(t.Maps)
	for _, c := range t.Chains {
		n += len(c.Rules)
	}
	for _, s := range t.Sets {
		n += len(s.Elements)
	}
	for _, m := range t.Maps {
		n += len(m.Elements)
	}
	return n
}
