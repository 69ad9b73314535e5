package calibrate

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"sigs.k8s.io/knftables"

	"github.com/kpsim/kpsim/dataplane"
	"github.com/kpsim/kpsim/sim"
)

// nftables prices nft on this kernel, the way the in-memory kernel charges
// it (sim/nftables.go), on a table shaped like kube-proxy's nftables mode
// at two sizes (Entries services, then four times as many). Each service is
// kube-proxy v1.37's at one endpoint (nftService): five commands, four
// objects as the sim counts them. Every measurement is taken in each of
// nftRounds rounds (nftRound), and each price is fitted on the median of
// its samples over all the rounds (of a load with maps, the median of its
// differences from its twin run just before it).
//
//   - A transaction of n commands onto a table of S objects is charged
//     nft-transaction's price plus its per-object price times the size
//     (S plus n/2), and n times nft-command's price plus its per-object
//     price times the size; one that deletes anything (nft-deleting) a
//     price more; one onto a table holding rules with maps of their own a
//     price per such rule (nft_map_rule's per_transaction). These six are
//     fitted together (fitNonNegative) on the loads of the table, and on
//     transactions adding and deleting one element and ten services' worth
//     at both sizes, and one element onto the table of rules with maps
//     below.
//   - A rule with a map of its own (nft-map-rule) costs a price plus one
//     per entry of the transaction before it, one per element of the
//     sets before it and one per rule with a map before it, in the table
//     or the transaction (fitMapRule), fitted apart on what loads of
//     services of two endpoints (and of mapElements) took beyond the same
//     loads at one endpoint.
//   - A listing of names with the nft binary (nft-list) is its price plus a
//     price per object and one per pair of objects; over netlink
//     (nft-list-netlink) and a listing of one set's elements
//     (nft-list-elements) a price plus one per object. Each is fitted on
//     the table with no service, and at the two sizes.
//
// The table is deleted at the end.
func (c *calibration) nftables() error {
	const name = "kpsim-calibrate"
	nft, err := c.dp.NFTables.Table(knftables.IPv4Family, name)
	if err != nil {
		return fmt.Errorf("calibrate nftables: %w", err)
	}
	overNetlink, err := c.dp.NFTables.Table(knftables.IPv4Family, name, knftables.UseNetlink)
	if err != nil {
		return fmt.Errorf("calibrate nftables: %w", err)
	}
	defer func() { _ = nft.Run(context.Background(), dropTable(nft)) }()
	rounds := make([]*nftSamples, nftRounds)
	for r := range rounds {
		fmt.Fprintf(c.log, "nftables: round %d of %d\n", r+1, nftRounds)
		if rounds[r], err = c.nftRound(nft, overNetlink); err != nil {
			return err
		}
	}
	// Each round's speed: a round takes the same loads in the same order
	// every time, so its total time is its speed. This machine's moves by
	// half for minutes at a time (a round took 18-20 s or 28-32 s, in runs
	// of rounds); the medians over the rounds price this kernel at the
	// speed most of the rounds ran at.
	totals := make([]float64, len(rounds))
	var took []string
	for r, s := range rounds {
		totals[r] = s.total()
		took = append(took, fmt.Sprintf("%.1f s", totals[r]))
	}
	speeds := fmt.Sprintf("the %d rounds' measurements took %s", len(rounds), strings.Join(took, ", "))
	if fastest, slowest := slices.Min(totals), slices.Max(totals); slowest > maxDrift*fastest {
		fmt.Fprintf(c.log, "kpsim calibrate: warning: this machine's speed moved while it was measured: %s (%.2f times); the nftables prices are this kernel's at the speed of most rounds, and another calibration may differ\n", speeds, slowest/fastest)
	}
	pooled, err := poolRounds(rounds)
	if err != nil {
		return fmt.Errorf("calibrate nftables: %w", err)
	}
	p, err := pooled.fit()
	if err != nil {
		return err
	}
	// Each round fitted alone gives each price's spread: how far one
	// round's samples would have moved it.
	alone := make([][]namedPrice, len(rounds))
	for r, s := range rounds {
		q, err := s.fit()
		if err != nil {
			return fmt.Errorf("round %d of %d: %w", r+1, len(rounds), err)
		}
		alone[r] = q.named()
	}
	c.set(dataplane.OpNFTTransaction, p.tx[0])
	c.p.ListItem[dataplane.OpNFTTransaction.String()] = p.tx[1]
	c.set(dataplane.OpNFTCommand, p.tx[2])
	c.p.ListItem[dataplane.OpNFTCommand.String()] = p.tx[3]
	c.set(dataplane.OpNFTDeleting, p.tx[4])
	c.set(dataplane.OpNFTMapRule, p.rule)
	walk := p.walk
	walk.PerTransaction = p.tx[5]
	c.p.NFTMapRule = &walk
	for op, q := range p.lists {
		c.set(op, q[0])
		c.p.ListItem[op.String()] = q[1]
		if len(q) == 3 {
			if c.p.ListPairs == nil {
				c.p.ListPairs = map[string]float64{}
			}
			c.p.ListPairs[op.String()] = q[2]
		}
	}
	var mapNote []string
	for _, l := range pooled.mapLoads {
		mapNote = append(mapNote, fmt.Sprintf("%d rules of %d elements, the first %d entries in after %d maps, onto %d, %s against %s without maps, %s more (%s-%s against %s-%s)", len(l.before), l.elements, l.before[0].Entries, l.before[0].Maps, l.tableMaps, dur(l.seconds()), dur(l.twin()), dur(l.beyond()), dur(slices.Min(l.times)), dur(slices.Max(l.times)), dur(slices.Min(l.twins)), dur(slices.Max(l.twins))))
	}
	var spread []string
	for i, np := range p.named() {
		var each []float64
		for _, q := range alone {
			each = append(each, q[i].value)
		}
		spread = append(spread, fmt.Sprintf("%s %s (%s-%s)", np.name, np.format(np.value), np.format(slices.Min(each)), np.format(slices.Max(each))))
	}
	c.notes = append(c.notes, fmt.Sprintf("nftables with %s, a table shaped like kube-proxy's nftables mode (%d objects per service at one endpoint), every measurement below taken in each of %d rounds, one after the other in the same order, and priced at its median over them all: loaded to %d and %d services in one transaction each "+
		"(%s and %s), with transactions of one element and of ten services added and deleted at each size (three times a round): a transaction %s plus %s per object the table holds, each command in it %s plus %.3g ns per object, %s more if it deletes; "+
		"services of two endpoints (and of %d), each DNAT rule with its map, loaded likewise, each load against its twin at one endpoint run just before it (the loads' and the twins' medians, the median of their differences, and the loads' and the twins' ranges: %s): such a rule %s plus %s per entry of the transaction before it (a command or a rule's set), %s per element of the sets before it and %s per rule with a map before it (in the table or the transaction); each transaction %s per rule with a map the table holds; "+
		"a listing of names with the nft binary %s plus %s per object plus %.3g ns per pair of objects; over netlink %s plus %s per object; one set's elements %s plus %s per object. "+
		"Each price, and its range over the rounds fitted alone: %s. Speed: %s",
		c.nftVersion(), nftServiceObjects, nftRounds, c.opts.Entries, 4*c.opts.Entries, dur(median(pooled.loads[0])), dur(median(pooled.loads[1])),
		c.op(dataplane.OpNFTTransaction), dur(p.tx[1]), c.op(dataplane.OpNFTCommand), p.tx[3]*1e9, c.op(dataplane.OpNFTDeleting),
		mapElements, strings.Join(mapNote, ", "), c.op(dataplane.OpNFTMapRule), dur(walk.PerEntry), dur(walk.PerElement), dur(walk.PerMap), dur(walk.PerTransaction),
		c.op(dataplane.OpNFTList), dur(c.p.ListItem[dataplane.OpNFTList.String()]), c.p.ListPairs[dataplane.OpNFTList.String()]*1e9,
		c.op(dataplane.OpNFTListNetlink), dur(c.p.ListItem[dataplane.OpNFTListNetlink.String()]),
		c.op(dataplane.OpNFTListElements), dur(c.p.ListItem[dataplane.OpNFTListElements.String()]),
		strings.Join(spread, ", "), speeds))
	return nil
}

// nftRounds is how many times calibrate takes every nftables measurement.
// The measurements of one round follow each other in a fixed order, and
// a price is fitted on each one's median over the rounds: this kernel's
// speed drifts by the minute here, and when each load was repeated three
// times in a row its price took the speed of its minute. A slow spell in
// a minority of the rounds moves no price. The rounds did not make two
// calibrations agree much better: 6 to 13 of 17 nftables prices within
// 15% in five pairs, against 6 before (docs/nftables.md, "Rounds").
const nftRounds = 5

// nftSamples is what a round measured (or every round, together): the
// rows and times of the transactions without rules with maps, the
// listings, the loads with maps against their twins, and the table's two
// plain loads.
type nftSamples struct {
	txRows   [][]float64
	txTimes  [][]float64 // each row's
	lists    map[dataplane.Op]*listSamples
	mapLoads []mapLoad
	loads    [][]float64 // each size's
}

// total is how long the samples took together.
func (s *nftSamples) total() float64 {
	sum := 0.0
	add := func(vs ...[]float64) {
		for _, v := range vs {
			for _, x := range v {
				sum += x
			}
		}
	}
	add(s.txTimes...)
	add(s.loads...)
	for _, l := range s.lists {
		add(l.times...)
	}
	for _, l := range s.mapLoads {
		add(l.times, l.twins)
	}
	return sum
}

// nftRound takes every nftables measurement once (a change three times
// each way) on the table, which it creates and deletes.
//
// The table with no service (its creation and listings are samples), then
// with Entries services and with four times as many, each loaded in one
// transaction from scratch. Then the rules with maps: services of two
// endpoints loaded at five sizes from an eighth of --entries (where the
// rules' own price shows) up to four times --entries, and --entries of them
// after --entries, four and sixteen times --entries plain ones (where the
// entries before a rule show apart from the maps); services of mapElements
// endpoints at --entries and twice that (what an element of a map before a
// rule costs it: 6.1 and later kernels differ); and a quarter of --entries
// of services of two added onto the largest, as a sync adds services.
// Their rules stand at every place in a transaction up to the largest's
// end and far past it, after few or many maps in the transaction or in the
// table. What the maps cost is measured against a twin: the same
// transaction with those services at one endpoint (the same commands and
// objects, no map), run just before it; the difference of neighbours
// cancels this kernel's drift where one load against a model fitted on
// others did not. Onto the largest, one element added and deleted (as in
// the plain table) prices what every transaction pays for the maps a table
// holds.
func (c *calibration) nftRound(nft, overNetlink knftables.Interface) (*nftSamples, error) {
	ctx := context.Background()
	small, large := c.opts.Entries, 4*c.opts.Entries
	s := &nftSamples{lists: map[dataplane.Op]*listSamples{
		dataplane.OpNFTList: {}, dataplane.OpNFTListNetlink: {}, dataplane.OpNFTListElements: {},
	}}
	var (
		objects int // in the table, as the sim counts them
		maps    int // rules with maps in the table
	)
	// sample records one kind of transaction without rules with maps: n
	// commands onto a table of objects objects of which maps rules with
	// maps, deleting or not, and its times.
	sample := func(n, objects, maps int, deletes bool, times []float64) {
		size := float64(objects) + float64(n)/2
		deleting := 0.0
		if deletes {
			deleting = 1
		}
		s.txRows = append(s.txRows, []float64{1, size, float64(n), float64(n) * size, deleting, float64(maps)})
		s.txTimes = append(s.txTimes, times)
	}
	// change runs tx(false), which adds objs objects, and tx(true), which
	// deletes them, back and forth three times (inTable: they are in the
	// table to begin with, and the deletion goes first): each is a sample,
	// at the table's size when it ran.
	change := func(what string, tx func(del bool) *knftables.Transaction, objs int, inTable bool) error {
		times, commands, sizes := map[bool][]float64{}, map[bool]int{}, map[bool]int{}
		for range 3 {
			for _, del := range []bool{inTable, !inTable} {
				t := tx(del)
				commands[del], sizes[del] = t.NumOperations(), objects
				d, err := c.once(fmt.Sprintf("nft-transaction %s (delete %v, %d commands, %d objects)", what, del, commands[del], objects), func() error { return nft.Run(ctx, t) })
				if err != nil {
					return err
				}
				times[del] = append(times[del], d)
				if del {
					objects -= objs
				} else {
					objects += objs
				}
			}
		}
		for _, del := range []bool{false, true} {
			sample(commands[del], sizes[del], maps, del, times[del])
		}
		return nil
	}
	listAt := func() error {
		for _, l := range []struct {
			op dataplane.Op
			f  func() error
		}{
			{dataplane.OpNFTList, func() error { _, err := nft.List(ctx, "chain"); return err }},
			{dataplane.OpNFTListNetlink, func() error { _, err := overNetlink.List(ctx, "chain"); return err }},
			{dataplane.OpNFTListElements, func() error { _, err := nft.ListElements(ctx, "set", "cluster-ips"); return err }},
		} {
			times, err := c.times(fmt.Sprintf("%s (%d objects)", l.op, objects), 5, l.f)
			if err != nil {
				return err
			}
			s.lists[l.op].add(objects, times)
		}
		return nil
	}

	const tableObjects = 8
	create := func() (float64, int, error) {
		tx := nft.NewTransaction()
		tx.Add(&knftables.Table{})
		tx.Add(&knftables.Chain{Name: "nat-prerouting", Type: knftables.PtrTo(knftables.NATType), Hook: knftables.PtrTo(knftables.PreroutingHook), Priority: knftables.PtrTo(knftables.DNATPriority)})
		tx.Add(&knftables.Chain{Name: "services"})
		tx.Add(&knftables.Chain{Name: "mark-for-masquerade"})
		tx.Add(&knftables.Rule{Chain: "nat-prerouting", Rule: "jump services"})
		tx.Add(&knftables.Rule{Chain: "mark-for-masquerade", Rule: "mark set mark or 0x4000"})
		tx.Add(&knftables.Set{Name: "cluster-ips", Type: "ipv4_addr"})
		tx.Add(&knftables.Map{Name: "service-ips", Type: "ipv4_addr . inet_proto . inet_service : verdict"})
		tx.Add(&knftables.Rule{Chain: "services", Rule: "ip daddr . meta l4proto . th dport vmap @service-ips"})
		d, err := c.once(fmt.Sprintf("nft-transaction the table (%d commands)", tx.NumOperations()), func() error { return nft.Run(ctx, tx) })
		objects, maps = tableObjects, 0
		return d, tx.NumOperations(), err
	}
	drop := func() error {
		objects, maps = 0, 0
		return nft.Run(ctx, dropTable(nft))
	}
	// load creates the table afresh and loads plain services of one
	// endpoint, then mapped services of endpoints each (each DNAT rule with
	// its map), into it in one transaction, and returns its time and the
	// transaction.
	load := func(plain, mapped, endpoints int) (float64, *knftables.Transaction, error) {
		if err := drop(); err != nil {
			return 0, nil, fmt.Errorf("calibrate nftables: %w", err)
		}
		if _, _, err := create(); err != nil {
			return 0, nil, err
		}
		tx := nft.NewTransaction()
		for j := range plain + mapped {
			n := 1
			if j >= plain {
				n = endpoints
			}
			nftService(tx, j, n, false)
		}
		d, err := c.once(fmt.Sprintf("nft-transaction load %d services of one endpoint, then %d of %d (%d commands)", plain, mapped, endpoints, tx.NumOperations()), func() error { return nft.Run(ctx, tx) })
		objects += nftServiceObjects * (plain + mapped)
		maps += mapped
		return d, tx, err
	}
	d, n, err := create()
	if err != nil {
		return nil, err
	}
	sample(n, 0, 0, false, []float64{d})
	if err := listAt(); err != nil {
		return nil, err
	}
	// element adds (or deletes) one element: the least a transaction does.
	element := func(del bool) *knftables.Transaction {
		tx := nft.NewTransaction()
		e := &knftables.Element{Set: "cluster-ips", Key: []string{calibrationAddr(20, 0).String()}}
		if del {
			tx.Delete(e)
		} else {
			tx.Add(e)
		}
		return tx
	}
	for _, size := range []int{small, large} {
		d, tx, err := load(size, 0, 1)
		if err != nil {
			return nil, err
		}
		sample(tx.NumOperations(), tableObjects, 0, false, []float64{d})
		s.loads = append(s.loads, []float64{d})
		// One element, then ten services (a sync's worth of changes).
		services := func(del bool) *knftables.Transaction {
			tx := nft.NewTransaction()
			for i := range 10 {
				nftService(tx, i, 1, del)
			}
			return tx
		}
		if err := change("one element", element, 1, false); err != nil {
			return nil, err
		}
		if err := change("ten services", services, 10*nftServiceObjects, true); err != nil {
			return nil, err
		}
		if err := listAt(); err != nil {
			return nil, err
		}
	}

	for _, l := range [][3]int{{0, small / 8, 2}, {0, small / 2, 2}, {0, small, 2}, {0, 2 * small, 2}, {0, large, 2}, {small, small, 2}, {large, small, 2}, {4 * large, small, 2},
		{0, small, mapElements}, {0, 2 * small, mapElements}} {
		// The smallest loads show a rule's own price, in differences of a
		// few milliseconds: five pairs of them a round, for a few
		// hundredths of a second each. The loads of larger maps alone
		// price an element: three pairs.
		pairs := 1
		switch {
		case l[0]+l[1] <= small/2:
			pairs = 5
		case l[2] == mapElements:
			pairs = 3
		}
		var times, twins []float64
		var tx, twinTx *knftables.Transaction
		for range pairs {
			twin, tt, err := load(l[0]+l[1], 0, 1)
			if err != nil {
				return nil, err
			}
			d, t, err := load(l[0], l[1], l[2])
			if err != nil {
				return nil, err
			}
			times, twins, tx, twinTx = append(times, d), append(twins, twin), t, tt
		}
		// A twin is a load of plain services too, up to seventeen times
		// --entries: a sample of the transaction's and commands' prices
		// far past the two sizes above. Without them a command's price
		// per object the table holds came out 1 ns, from 1,000 and 4,000
		// services, and priced v1.37.1's first sync of 44,125 services of
		// one endpoint 31 s, five times what it took on this kernel.
		sample(twinTx.NumOperations(), tableObjects, 0, false, twins)
		_, before := dataplane.NFTTransactionOps(tx)
		s.mapLoads = append(s.mapLoads, mapLoad{times: times, twins: twins, elements: l[2], before: before})
		if l != [3]int{0, large, 2} {
			continue
		}
		ontoMaps := maps
		quarter := func(endpoints int, del bool) *knftables.Transaction {
			tx := nft.NewTransaction()
			for j := range small / 4 {
				nftService(tx, large+j, endpoints, del)
			}
			return tx
		}
		run := func(endpoints int, del bool) (float64, error) {
			tx := quarter(endpoints, del)
			return c.once(fmt.Sprintf("nft-transaction %d services of %d endpoints onto %d (delete %v, %d commands)", small/4, endpoints, large, del, tx.NumOperations()), func() error { return nft.Run(ctx, tx) })
		}
		twin, err := run(1, false)
		if err == nil {
			_, err = run(1, true)
		}
		var d float64
		if err == nil {
			d, err = run(2, false)
		}
		if err != nil {
			return nil, err
		}
		objects += nftServiceObjects * small / 4
		maps += small / 4
		_, before = dataplane.NFTTransactionOps(quarter(2, false))
		for i := range before {
			before[i].Table = ontoMaps
		}
		s.mapLoads = append(s.mapLoads, mapLoad{times: []float64{d}, twins: []float64{twin}, elements: 2, tableMaps: ontoMaps, before: before})
		if err := change("one element onto maps", element, 1, false); err != nil {
			return nil, err
		}
	}
	if err := drop(); err != nil {
		return nil, fmt.Errorf("calibrate nftables: %w", err)
	}
	return s, nil
}

// dropTable deletes the table.
func dropTable(nft knftables.Interface) *knftables.Transaction {
	tx := nft.NewTransaction()
	tx.Delete(&knftables.Table{})
	return tx
}

// poolRounds is every round's samples together.
func poolRounds(rounds []*nftSamples) (*nftSamples, error) {
	first := rounds[0]
	p := &nftSamples{txRows: first.txRows, txTimes: make([][]float64, len(first.txTimes)), loads: make([][]float64, len(first.loads)),
		lists: map[dataplane.Op]*listSamples{}, mapLoads: slices.Clone(first.mapLoads)}
	for op, l := range first.lists {
		p.lists[op] = &listSamples{objects: l.objects, times: make([][]float64, len(l.times))}
	}
	for i := range p.mapLoads {
		p.mapLoads[i].times, p.mapLoads[i].twins = nil, nil
	}
	for _, r := range rounds {
		if len(r.txTimes) != len(p.txTimes) || len(r.mapLoads) != len(p.mapLoads) || len(r.loads) != len(p.loads) {
			return nil, fmt.Errorf("the rounds measured different things")
		}
		for k, v := range r.txTimes {
			p.txTimes[k] = append(p.txTimes[k], v...)
		}
		for k, v := range r.loads {
			p.loads[k] = append(p.loads[k], v...)
		}
		for op, l := range r.lists {
			for k, v := range l.times {
				p.lists[op].times[k] = append(p.lists[op].times[k], v...)
			}
		}
		for k, l := range r.mapLoads {
			p.mapLoads[k].times = append(p.mapLoads[k].times, l.times...)
			p.mapLoads[k].twins = append(p.mapLoads[k].twins, l.twins...)
		}
	}
	return p, nil
}

// nftPrices are the nftables prices fitted on one set of samples: the
// transactions' six (fitNonNegative's order: a transaction, per object,
// a command, per command and object, deleting, per rule with a map the
// table holds), a rule with a map's own and its walk, and each listing's.
type nftPrices struct {
	tx    []float64
	rule  float64
	walk  sim.NFTMapRuleCost
	lists map[dataplane.Op][]float64
}

// fit prices the samples: the transactions without maps price a
// transaction and a command; what the loads with maps took beyond their
// twins prices their rules.
func (s *nftSamples) fit() (nftPrices, error) {
	var p nftPrices
	var err error
	secs := make([]float64, len(s.txTimes))
	for k, v := range s.txTimes {
		secs[k] = median(v)
	}
	if p.tx, err = fitNonNegative(s.txRows, secs); err != nil {
		return p, fmt.Errorf("calibrate nftables transactions: %w", err)
	}
	if p.rule, p.walk, err = fitMapRule(s.mapLoads); err != nil {
		return p, fmt.Errorf("calibrate nftables rules with maps: %w", err)
	}
	p.lists = map[dataplane.Op][]float64{}
	for op, l := range s.lists {
		terms := 2
		if op == dataplane.OpNFTList {
			terms = 3 // nft reads the whole table, and takes longer than linearly
		}
		if p.lists[op], err = l.fit(terms); err != nil {
			return p, fmt.Errorf("calibrate %s: %w", op, err)
		}
	}
	return p, nil
}

// namedPrice is a price with what it is and how to write it.
type namedPrice struct {
	name   string
	value  float64
	format func(float64) string
}

// named lists the prices in a fixed order, for the spread over rounds.
func (p nftPrices) named() []namedPrice {
	ns := func(v float64) string { return fmt.Sprintf("%.3g ns", v*1e9) }
	out := []namedPrice{
		{"a transaction", p.tx[0], dur}, {"per object the table holds", p.tx[1], dur},
		{"a command", p.tx[2], dur}, {"per command and object", p.tx[3], ns},
		{"deleting", p.tx[4], dur}, {"per rule with a map the table holds", p.tx[5], dur},
		{"a rule with a map", p.rule, dur}, {"per entry before it", p.walk.PerEntry, dur},
		{"per element before it", p.walk.PerElement, dur}, {"per map before it", p.walk.PerMap, dur},
	}
	for _, op := range []dataplane.Op{dataplane.OpNFTList, dataplane.OpNFTListNetlink, dataplane.OpNFTListElements} {
		q := p.lists[op]
		out = append(out, namedPrice{op.String(), q[0], dur}, namedPrice{op.String() + " per object", q[1], dur})
		if len(q) == 3 {
			out = append(out, namedPrice{op.String() + " per pair", q[2], ns})
		}
	}
	return out
}

// mapLoad is one transaction of services with rules with maps, against
// its twin at one endpoint: their times, the maps' (their difference),
// the rules with maps the table held before it, and where each such rule
// stands (dataplane.NFTTransactionOps, with the table's maps).
type mapLoad struct {
	times, twins []float64 // the load's, its twin's without maps, in pairs
	elements     int       // in each rule's map
	tableMaps    int
	before       []dataplane.NFTMapRule
}

func (l mapLoad) seconds() float64 { return median(l.times) }
func (l mapLoad) twin() float64    { return median(l.twins) }

// beyond is what the maps took: the differences' median, or nothing.
func (l mapLoad) beyond() float64 {
	diffs := make([]float64, len(l.times))
	for i := range diffs {
		diffs[i] = l.times[i] - l.twins[i]
	}
	return max(0, median(diffs))
}

// fitMapRule prices a rule with a map on the loads' time beyond their
// commands (sim.NFTMapRuleCost): a price per rule, per entry and per
// element before it, and per rule with a map before it (in the table or
// earlier in the transaction): a non-negative least squares fit of each
// load's error relative to its whole time, so the small loads count as
// much as the large. It searches nothing. A knee (the place past which
// every step cost more), found as the place the fit erred least,
// wandered from 21,000 to 81,000 entries between calibrations minutes
// apart, where the kernel's own time past some tens of thousands of
// entries moves by up to four times between calibrations; a price per
// square of the rules with maps, to bend the price the same way, came out
// nothing or next to nothing in three.
func fitMapRule(loads []mapLoad) (float64, sim.NFTMapRuleCost, error) {
	rows := make([][]float64, len(loads))
	beyond := make([]float64, len(loads))
	for j, l := range loads {
		// A rule, entries, elements, rules with maps.
		row := make([]float64, 4)
		row[0] = float64(len(l.before))
		for _, at := range l.before {
			row[1] += float64(at.Entries)
			row[2] += float64(at.Elements)
			row[3] += float64(at.Maps + at.Table)
		}
		w := 1 / max(l.seconds(), 1e-9)
		for k := range row {
			row[k] *= w
		}
		rows[j], beyond[j] = row, l.beyond()*w
	}
	q, err := fitNonNegative(rows, beyond)
	if err != nil {
		return 0, sim.NFTMapRuleCost{}, fmt.Errorf("no non-negative fit of %d loads: %w", len(loads), err)
	}
	return q[0], sim.NFTMapRuleCost{PerEntry: q[1], PerElement: q[2], PerMap: q[3]}, nil
}

// maxDrift is how much longer than the fastest the slowest round may take
// before calibrate warns that the machine's speed moved.
const maxDrift = 1.25

// mapElements is how many endpoints (elements in its map) the services of
// the loads that price an element of a map have: kube-proxy's rules for
// services of ten endpoints and one port.
const mapElements = 11

// nftServiceObjects is how many objects nftService adds.
const nftServiceObjects = 4

// nftService adds (or deletes) service i as kube-proxy v1.37's nftables
// mode writes a ClusterIP service: its chain (added, then flushed, as every
// sync writes it), one rule DNATing to the endpoint (to one of several by a
// numgen map written into the rule: nft-map-rule), an element in the map of
// service addresses (to the chain) and one in the set of cluster IPs.
func nftService(tx *knftables.Transaction, i, endpoints int, del bool) {
	ip, ep := calibrationAddr(18, i), calibrationAddr(19, i)
	chain := &knftables.Chain{Name: fmt.Sprintf("service-%d-ns/svc%d/tcp/p80", i, i)}
	elements := []*knftables.Element{
		{Set: "cluster-ips", Key: []string{ip.String()}},
		{Map: "service-ips", Key: []string{ip.String(), "tcp", "80"}, Value: []string{"goto " + chain.Name}},
	}
	if del {
		// As kube-proxy removes a service: nothing may refer to a chain,
		// nor a rule be left in it, when it is deleted.
		for _, e := range elements {
			tx.Delete(e)
		}
		tx.Flush(chain)
		tx.Delete(chain)
		return
	}
	tx.Add(chain)
	tx.Flush(chain)
	rule := fmt.Sprintf("meta l4proto tcp dnat to %s:8080", ep)
	if endpoints > 1 {
		var eps []string
		for j := range endpoints {
			eps = append(eps, fmt.Sprintf("%d : %s . %d", j, ep, 8080+j))
		}
		rule = fmt.Sprintf("meta l4proto tcp dnat ip addr . port to numgen random mod %d map { %s }", endpoints, strings.Join(eps, " , "))
	}
	tx.Add(&knftables.Rule{Chain: chain.Name, Rule: rule})
	for _, e := range elements {
		tx.Add(e)
	}
}

// listSamples are one listing's times by the table's size.
type listSamples struct {
	objects []int
	times   [][]float64
}

func (l *listSamples) add(objects int, times []float64) {
	l.objects = append(l.objects, objects)
	l.times = append(l.times, times)
}

// fit prices the listing per call, per object and (terms 3) per pair.
func (l *listSamples) fit(terms int) ([]float64, error) {
	var rows [][]float64
	for _, n := range l.objects {
		rows = append(rows, []float64{1, float64(n), float64(n) * float64(n)}[:terms])
	}
	secs := make([]float64, len(l.times))
	for k, v := range l.times {
		secs[k] = median(v)
	}
	return fitNonNegative(rows, secs)
}

// nftVersion names the nft this kernel's dataplane runs, for the source.
func (c *calibration) nftVersion() string {
	if v := c.opts.NFTVersion; v != "" {
		return v
	}
	return "nft"
}
