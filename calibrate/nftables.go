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
// objects as the sim counts them.
//
//   - A transaction of n commands onto a table of S objects is charged
//     nft-transaction's price plus its per-object price times the size
//     (S plus n/2), and n times nft-command's price plus its per-object
//     price times the size; one that deletes anything (nft-deleting) a
//     price more; one onto a table holding rules with maps of their own a
//     price per such rule (nft_map_rule's per_transaction). These six are
//     fitted together (fitNonNegative) on the loads of the table, and on
//     transactions adding and deleting one element and ten services' worth
//     (the median of five each), at both sizes, and one element onto the
//     table of rules with maps below.
//   - A rule with a map of its own (nft-map-rule) costs a price plus one
//     per entry of the transaction before it, one per element of the
//     sets before it and one per rule with a map before it, in the table
//     or the transaction (fitMapRule), fitted apart on what loads of
//     services of two endpoints (and of mapElements) took beyond the same
//     loads at one endpoint (the median of three differences each).
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
	ctx := context.Background()
	small, large := c.opts.Entries, 4*c.opts.Entries
	var (
		objects int       // in the table, as the sim counts them
		maps    int       // rules with maps in the table
		loads   []float64 // each size's load, in seconds
		txRows  [][]float64
		txSecs  []float64
		lists   = map[dataplane.Op]*listSamples{
			dataplane.OpNFTList: {}, dataplane.OpNFTListNetlink: {}, dataplane.OpNFTListElements: {},
		}
	)
	// sample records one kind of transaction without rules with maps: n
	// commands onto a table of objects objects of which maps rules with
	// maps, deleting or not, at its median time.
	sample := func(n, objects, maps int, deletes bool, times []float64) {
		size := float64(objects) + float64(n)/2
		deleting := 0.0
		if deletes {
			deleting = 1
		}
		txRows = append(txRows, []float64{1, size, float64(n), float64(n) * size, deleting, float64(maps)})
		txSecs = append(txSecs, median(times))
	}
	// change runs tx(false), which adds objs objects, and tx(true), which
	// deletes them, back and forth five times (inTable: they are in the
	// table to begin with, and the deletion goes first); the median time
	// of each is a sample, at the table's size when it ran.
	change := func(what string, tx func(del bool) *knftables.Transaction, objs int, inTable bool) error {
		times, commands, sizes := map[bool][]float64{}, map[bool]int{}, map[bool]int{}
		for range 5 {
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
			d, err := c.typical(fmt.Sprintf("%s (%d objects)", l.op, objects), 5, l.f)
			if err != nil {
				return err
			}
			lists[l.op].add(objects, d)
		}
		return nil
	}

	// The table with no service (its creation and listings are samples),
	// then with size services, loaded in one transaction three times from
	// scratch: the median load is a sample.
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
		tx := nft.NewTransaction()
		tx.Delete(&knftables.Table{})
		objects, maps = 0, 0
		return nft.Run(ctx, tx)
	}
	defer func() { _ = drop() }()
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
		return err
	}
	sample(n, 0, 0, false, []float64{d})
	if err := listAt(); err != nil {
		return err
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
		var times []float64
		var n int
		for range 3 {
			d, tx, err := load(size, 0, 1)
			if err != nil {
				return err
			}
			times, n = append(times, d), tx.NumOperations()
		}
		sample(n, tableObjects, 0, false, times)
		loads = append(loads, median(times))
		// One element, then ten services (a sync's worth of changes),
		// added and deleted five times each.
		services := func(del bool) *knftables.Transaction {
			tx := nft.NewTransaction()
			for i := range 10 {
				nftService(tx, i, 1, del)
			}
			return tx
		}
		if err := change("one element", element, 1, false); err != nil {
			return err
		}
		if err := change("ten services", services, 10*nftServiceObjects, true); err != nil {
			return err
		}
		if err := listAt(); err != nil {
			return err
		}
	}

	// Rules with maps: services of two endpoints loaded at five sizes from
	// an eighth of --entries (where the rules' own price shows) up to four
	// times --entries, and --entries of them after --entries, four and
	// sixteen times --entries plain ones (where the entries before a rule
	// show apart from the maps); services of mapElements endpoints at
	// --entries and twice that (what an element of a map before a rule
	// costs it: 6.1 and later kernels differ); and a quarter of --entries
	// of services of two added onto the largest, as a sync adds services.
	// Their rules stand at every place in a transaction up to the
	// largest's end and far past it, after few or many maps in the
	// transaction or in the table. What the maps cost is measured against a twin: the same
	// transaction with those services at one endpoint (the same commands
	// and objects, no map), run just before it, three times each; the
	// median of the three differences is the maps' (this kernel's speed
	// drifts by the minute here, and a difference of neighbours cancels it
	// where one load against a model fitted on others did not). Onto the
	// largest, one element added and deleted (as in the plain table)
	// prices what every transaction pays for the maps a table holds.
	var mapLoads []mapLoad
	for _, l := range [][3]int{{0, small / 8, 2}, {0, small / 2, 2}, {0, small, 2}, {0, 2 * small, 2}, {0, large, 2}, {small, small, 2}, {large, small, 2}, {4 * large, small, 2},
		{0, small, mapElements}, {0, 2 * small, mapElements}} {
		var times, twins, diffs []float64
		var tx, twinTx *knftables.Transaction
		for range 3 {
			twin, tt, err := load(l[0]+l[1], 0, 1)
			if err != nil {
				return err
			}
			d, t, err := load(l[0], l[1], l[2])
			if err != nil {
				return err
			}
			times, twins, diffs, tx, twinTx = append(times, d), append(twins, twin), append(diffs, d-twin), t, tt
		}
		// A twin is a load of plain services too, up to seventeen times
		// --entries: a sample of the transaction's and commands' prices
		// far past the two sizes above. Without them a command's price
		// per object the table holds came out 1 ns, from 1,000 and 4,000
		// services, and priced v1.37.1's first sync of 44,125 services of
		// one endpoint 31 s, five times what it took on this kernel.
		sample(twinTx.NumOperations(), tableObjects, 0, false, twins)
		_, before := dataplane.NFTTransactionOps(tx)
		mapLoads = append(mapLoads, mapLoad{seconds: median(times), twin: median(twins), beyond: max(0, median(diffs)), low: slices.Min(diffs), high: slices.Max(diffs), elements: l[2], before: before})
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
		times, twins, diffs = nil, nil, nil
		for i := range 3 {
			twin, err := run(1, false)
			if err == nil {
				_, err = run(1, true)
			}
			if err != nil {
				return err
			}
			d, err := run(2, false)
			if err != nil {
				return err
			}
			times, twins, diffs = append(times, d), append(twins, twin), append(diffs, d-twin)
			if i < 2 {
				if _, err := run(2, true); err != nil {
					return err
				}
			}
		}
		objects += nftServiceObjects * small / 4
		maps += small / 4
		_, before = dataplane.NFTTransactionOps(quarter(2, false))
		for i := range before {
			before[i].Table = ontoMaps
		}
		mapLoads = append(mapLoads, mapLoad{seconds: median(times), twin: median(twins), beyond: max(0, median(diffs)), low: slices.Min(diffs), high: slices.Max(diffs), elements: 2, tableMaps: ontoMaps, before: before})
		if err := change("one element onto maps", element, 1, false); err != nil {
			return err
		}
	}
	// The first load again, as a check that this kernel's speed held: on
	// a busy machine it moves by the minute (a calibration that took 91 s
	// where its neighbours took 50 and 59 priced a first sync 3.5 times
	// theirs), and the fits cannot tell that from a price.
	var again []float64
	for range 3 {
		d, _, err := load(small, 0, 1)
		if err != nil {
			return err
		}
		again = append(again, d)
	}
	if drift := median(again) / loads[0]; drift < 1/maxDrift || drift > maxDrift {
		warning := fmt.Sprintf("this kernel's speed moved while it was measured: %d services loaded in %s at the start and in %s at the end (the medians of three), %.2f times; the nftables prices are not to be trusted, calibrate again on a quiet machine",
			small, dur(loads[0]), dur(median(again)), drift)
		fmt.Fprintf(c.log, "kpsim calibrate: warning: %s\n", warning)
		c.notes = append(c.notes, "WARNING: "+warning)
	}
	// The transactions without maps price a transaction and a command;
	// what the loads with maps took beyond their twins prices their rules.
	p, err := fitNonNegative(txRows, txSecs)
	if err != nil {
		return fmt.Errorf("calibrate nftables transactions: %w", err)
	}
	perRule, walk, err := fitMapRule(mapLoads)
	if err != nil {
		return fmt.Errorf("calibrate nftables rules with maps: %w", err)
	}
	c.set(dataplane.OpNFTTransaction, p[0])
	c.p.ListItem[dataplane.OpNFTTransaction.String()] = p[1]
	c.set(dataplane.OpNFTCommand, p[2])
	c.p.ListItem[dataplane.OpNFTCommand.String()] = p[3]
	c.set(dataplane.OpNFTDeleting, p[4])
	c.set(dataplane.OpNFTMapRule, perRule)
	walk.PerTransaction = p[5]
	c.p.NFTMapRule = &walk
	for op, l := range lists {
		terms := 2
		if op == dataplane.OpNFTList {
			terms = 3 // nft reads the whole table, and takes longer than linearly
		}
		q, err := l.fit(terms)
		if err != nil {
			return fmt.Errorf("calibrate %s: %w", op, err)
		}
		c.set(op, q[0])
		c.p.ListItem[op.String()] = q[1]
		if terms == 3 {
			if c.p.ListPairs == nil {
				c.p.ListPairs = map[string]float64{}
			}
			c.p.ListPairs[op.String()] = q[2]
		}
	}
	var mapNote []string
	for _, l := range mapLoads {
		mapNote = append(mapNote, fmt.Sprintf("%d rules of %d elements, the first %d entries in after %d maps, onto %d, %s against %s without maps: %s (%s-%s)", len(l.before), l.elements, l.before[0].Entries, l.before[0].Maps, l.tableMaps, dur(l.seconds), dur(l.twin), dur(l.beyond), dur(l.low), dur(l.high)))
	}
	c.notes = append(c.notes, fmt.Sprintf("nftables with %s, a table shaped like kube-proxy's nftables mode (%d objects per service at one endpoint) loaded to %d and %d services in one transaction each "+
		"(%s and %s), with transactions of one element and of ten services added and deleted at each size (the median of five): a transaction %s plus %s per object the table holds, each command in it %s plus %.3g ns per object, %s more if it deletes; "+
		"services of two endpoints (and of %d), each DNAT rule with its map, loaded likewise, each load against its twin at one endpoint (the medians of three, and the differences' median and range: %s): such a rule %s plus %s per entry of the transaction before it (a command or a rule's set), %s per element of the sets before it and %s per rule with a map before it (in the table or the transaction); each transaction %s per rule with a map the table holds; "+
		"a listing of names with the nft binary %s plus %s per object plus %.3g ns per pair of objects; over netlink %s plus %s per object; one set's elements %s plus %s per object",
		c.nftVersion(), nftServiceObjects, small, large, dur(loads[0]), dur(loads[1]),
		c.op(dataplane.OpNFTTransaction), dur(p[1]), c.op(dataplane.OpNFTCommand), p[3]*1e9, c.op(dataplane.OpNFTDeleting),
		mapElements, strings.Join(mapNote, ", "), c.op(dataplane.OpNFTMapRule), dur(walk.PerEntry), dur(walk.PerElement), dur(walk.PerMap), dur(walk.PerTransaction),
		c.op(dataplane.OpNFTList), dur(c.p.ListItem[dataplane.OpNFTList.String()]), c.p.ListPairs[dataplane.OpNFTList.String()]*1e9,
		c.op(dataplane.OpNFTListNetlink), dur(c.p.ListItem[dataplane.OpNFTListNetlink.String()]),
		c.op(dataplane.OpNFTListElements), dur(c.p.ListItem[dataplane.OpNFTListElements.String()])))
	return nil
}

// mapLoad is one transaction of services with rules with maps, against
// its twin at one endpoint: their times, the maps' (their difference),
// the rules with maps the table held before it, and where each such rule
// stands (dataplane.NFTTransactionOps, with the table's maps).
type mapLoad struct {
	seconds, twin float64 // medians: the load, its twin without maps
	// beyond is the median of the three differences, low and high their
	// range.
	beyond, low, high float64
	elements          int // in each rule's map
	tableMaps         int
	before            []dataplane.NFTMapRule
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
		w := 1 / max(l.seconds, 1e-9)
		for k := range row {
			row[k] *= w
		}
		rows[j], beyond[j] = row, l.beyond*w
	}
	q, err := fitNonNegative(rows, beyond)
	if err != nil {
		return 0, sim.NFTMapRuleCost{}, fmt.Errorf("no non-negative fit of %d loads: %w", len(loads), err)
	}
	return q[0], sim.NFTMapRuleCost{PerEntry: q[1], PerElement: q[2], PerMap: q[3]}, nil
}

// maxDrift is how far the first load's time may move by the end of the
// calibration before its prices are called untrustworthy.
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
	seconds []float64
}

func (l *listSamples) add(objects int, seconds float64) {
	l.objects = append(l.objects, objects)
	l.seconds = append(l.seconds, seconds)
}

// fit prices the listing per call, per object and (terms 3) per pair.
func (l *listSamples) fit(terms int) ([]float64, error) {
	var rows [][]float64
	for _, n := range l.objects {
		rows = append(rows, []float64{1, float64(n), float64(n) * float64(n)}[:terms])
	}
	return fitNonNegative(rows, l.seconds)
}

// nftVersion names the nft this kernel's dataplane runs, for the source.
func (c *calibration) nftVersion() string {
	if v := c.opts.NFTVersion; v != "" {
		return v
	}
	return "nft"
}
