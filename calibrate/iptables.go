package calibrate

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"
	"time"

	"github.com/kpsim/kpsim/dataplane"
	"github.com/kpsim/kpsim/sim"
)

// outFilterRules are n rules of the shape kube-proxy adds one of per load
// balancer port whose source ranges leave the node out, the only rules its
// ruleset grows by, in chain KUBE-IPVS-OUT-FILTER; without the ipvs match,
// the same rule matching a comment instead.
func outFilterRules(n int, ipvsMatch bool) []byte {
	var b strings.Builder
	b.WriteString("*filter\n")
	for i := range n {
		a := calibrationAddr(19, i)
		if ipvsMatch {
			fmt.Fprintf(&b, "-A KUBE-IPVS-OUT-FILTER -s %s -m ipvs --vaddr %s --vproto tcp --vport 80 -j DROP\n", a, a)
		} else {
			fmt.Fprintf(&b, "-A KUBE-IPVS-OUT-FILTER -s %s -m comment --comment \"kpsim calibration\" -j DROP\n", a)
		}
	}
	b.WriteString("COMMIT\n")
	return []byte(b.String())
}

// iptablesModeSizes are the clusters (services of one endpoint) whose nat
// table, as kube-proxy's iptables mode writes it, the calibration restores
// for entries entries: half, twice and four times as many services, up to
// maxIPTablesModeServices. Over these sizes a restore's time goes from
// growing with its payload to growing with the cube of the cluster
// (sim.IPTablesRestoreCost).
func iptablesModeSizes(entries int) []int {
	var sizes []int
	for _, n := range []int{max(1, entries/2), 2 * entries, 4 * entries} {
		if n = min(n, maxIPTablesModeServices); !slices.Contains(sizes, n) {
			sizes = append(sizes, n)
		}
	}
	return sizes
}

// maxIPTablesModeServices bounds iptablesModeSizes: 4,000 services took
// 2.4 s a restore here, 20,000 took 293 s (docs/kernel-costs.md).
const maxIPTablesModeServices = 4000

// iptablesModeRepeats is how often each iptables-mode load runs; the
// median is priced and the range reported.
const iptablesModeRepeats = 3

// iptablesModeTable is the nat table of iptables mode for n services of
// one endpoint, as kube-proxy writes it: chains named by a hash, so in no
// order (iptables-nft takes twice as long for the same chains declared in
// the order of their names), each service's chains declared in turn, then
// each service's rules in turn (a jump in KUBE-SERVICES, a service chain
// jumping to an endpoint chain that marks hairpin traffic and DNATs). full
// writes it onto no chains of its own, services is a partial sync's rewrite
// of KUBE-SERVICES alone onto it, and cleanup removes it.
func iptablesModeTable(n int) (full, services, cleanup []byte) {
	name := func(prefix string, i int) string {
		h := fnv.New64a()
		fmt.Fprintf(h, "%s%d", prefix, i)
		return fmt.Sprintf("KUBE-%s-%016X", prefix, h.Sum64())
	}
	var head, jumps, rest, decl, drop strings.Builder
	head.WriteString("*nat\n:KUBE-SERVICES - [0:0]\n")
	for i := range n {
		svc, sep := name("SVC", i), name("SEP", i)
		vip, ep := calibrationAddr(18, i), calibrationAddr(19, i)
		fmt.Fprintf(&decl, ":%s - [0:0]\n:%s - [0:0]\n", svc, sep)
		fmt.Fprintf(&drop, "-X %s\n-X %s\n", svc, sep)
		jump := fmt.Sprintf("-A KUBE-SERVICES -d %s/32 -p tcp -m comment --comment \"ns/svc-%d:p0 cluster IP\" -m tcp --dport 80 -j %s\n", vip, i, svc)
		jumps.WriteString(jump)
		rest.WriteString(jump)
		fmt.Fprintf(&rest, "-A %s -m comment --comment \"ns/svc-%d:p0 -> %s:8080\" -j %s\n", svc, i, ep, sep)
		fmt.Fprintf(&rest, "-A %s -s %s/32 -m comment --comment \"ns/svc-%d:p0\" -j MARK --set-xmark 0x4000/0x4000\n", sep, ep, i)
		fmt.Fprintf(&rest, "-A %s -p tcp -m comment --comment \"ns/svc-%d:p0\" -m tcp -j DNAT --to-destination %s:8080\n", sep, i, ep)
	}
	full = []byte(head.String() + decl.String() + rest.String() + "COMMIT\n")
	services = []byte(head.String() + jumps.String() + "COMMIT\n")
	cleanup = []byte(head.String() + decl.String() + drop.String() + "-X KUBE-SERVICES\nCOMMIT\n")
	return full, services, cleanup
}

// restoreLoad is one payload restored, and what the in-memory kernel
// prices it by.
type restoreLoad struct {
	name                    string
	bytes, written, flushed int
	// rules written by the chains the payload declares, by the chains
	// their table holds after, and by both, summed over its tables: what
	// sim.IPTablesRestoreCost prices
	byDeclared, byChains, byBoth float64
	seconds, spread              float64 // the median time, and the range's width over it
}

// row is what the load is priced by: a call, its bytes, and its rules
// (restoreLoad's sums).
func (l restoreLoad) row() []float64 {
	return []float64{1, float64(l.bytes), l.byDeclared, l.byChains, l.byBoth}
}

// newRestoreLoad counts payload's rules and the chains its tables declare
// and hold once it is restored onto resident chains of their own (by
// table).
func newRestoreLoad(name string, payload []byte, resident map[string]int, flushed int, seconds []float64) (restoreLoad, error) {
	tables, err := dataplane.ParseSave(dataplane.IPv4, payload)
	if err != nil {
		return restoreLoad{}, err
	}
	l := restoreLoad{name: name, bytes: len(payload), flushed: flushed, seconds: median(seconds)}
	if l.seconds > 0 {
		l.spread = (slices.Max(seconds) - slices.Min(seconds)) / l.seconds
	}
	builtins := map[string]int{"nat": 4, "filter": 3}
	for name, t := range tables {
		written := 0
		for _, rs := range t.Rules {
			written += len(rs)
		}
		declared := len(ownChains(t))
		w, d, n := float64(written), float64(declared), float64(builtins[name]+max(declared, resident[name]))
		l.written += written
		l.byDeclared += w * d
		l.byChains += w * n
		l.byBoth += w * d * n
	}
	return l, nil
}

// iptables prices iptables-restore and iptables-save. The restores: the
// ruleset kpsim's proxier writes for a cluster with NodePort, LoadBalancer
// and UDP services (nat and filter, set matches, the extensions kube-proxy
// loads), as it is and with as many KUBE-IPVS-OUT-FILTER rules more as a
// measurement has entries; and iptables mode's nat table at
// iptablesModeSizes, from no chains, replacing itself, and a partial
// sync's KUBE-SERVICES onto it. A restore is priced per call, per byte,
// and per rule written times chain the payload declares and times chain
// its table holds (a fit of the loads, less what replacing costs:
// fitNonNegative), and, when it replaces chains, once more and per rule
// flushed (the ruleset's and the largest table's replacements against
// their creations). A save is a fixed part and a part per rule.
func (c *calibration) iptables() error {
	t := c.dp.IPTables
	const reps = 10
	ruleset, sets, err := kubeProxyRuleset()
	if err != nil {
		return fmt.Errorf("calibrate iptables: %w", err)
	}
	for _, s := range sets {
		if err := c.dp.IPSet.CreateSet(s); err != nil {
			return fmt.Errorf("calibrate iptables: %w", err)
		}
	}
	cleanup, err := flushRuleset(ruleset)
	if err != nil {
		return fmt.Errorf("calibrate iptables: %w", err)
	}
	n := c.opts.Entries
	probe := []byte("*filter\n:KPSIM-CAL - [0:0]\n-A KPSIM-CAL -m ipvs --vaddr 198.18.0.1 -j RETURN\nCOMMIT\n")
	ipvsMatch := t.Restore(dataplane.IPv4, probe) == nil
	if ipvsMatch {
		if err := t.Restore(dataplane.IPv4, []byte("*filter\n:KPSIM-CAL - [0:0]\n-X KPSIM-CAL\nCOMMIT\n")); err != nil {
			return fmt.Errorf("calibrate iptables: %w", err)
		}
	}
	grown := append(slices.Clone(ruleset), outFilterRules(n, ipvsMatch)...)
	restore := func(what string, payload []byte) (time.Duration, error) {
		clk := c.newClock()
		if err := t.Restore(dataplane.IPv4, payload); err != nil {
			return 0, fmt.Errorf("calibrate iptables-restore (%s): %w", what, err)
		}
		return clk(), nil
	}
	// times restores, in turn, each payload of a round reps times, the first
	// after clean and each on what the one before it left; it returns each
	// payload's times in seconds.
	times := func(what string, reps int, clean []byte, round ...[]byte) ([][]float64, error) {
		out := make([][]float64, len(round))
		for range reps {
			if err := t.Restore(dataplane.IPv4, clean); err != nil {
				return nil, fmt.Errorf("calibrate iptables: clean up: %w", err)
			}
			for i, p := range round {
				d, err := restore(what, p)
				if err != nil {
					return nil, err
				}
				out[i] = append(out[i], d.Seconds())
			}
		}
		for i, p := range round {
			fmt.Fprintf(c.log, "%-44s n=%-6d %10.1f us median (%.1f-%.1f, %d bytes)\n", fmt.Sprintf("iptables-restore (%s, %d of %d)", what, i+1, len(round)),
				reps, median(out[i])*1e6, slices.Min(out[i])*1e6, slices.Max(out[i])*1e6, len(p))
		}
		return out, nil
	}
	save := func() (float64, int, error) {
		out, err := t.Save(dataplane.IPv4, "filter")
		if err != nil {
			return 0, 0, err
		}
		rules := bytes.Count(out, []byte("\n-A "))
		d, err := c.each(fmt.Sprintf("iptables-save filter (%d rules)", rules), reps, func(int) error {
			_, err := t.Save(dataplane.IPv4, "filter")
			return err
		})
		return d, rules, err
	}
	own, err := ownRules(ruleset)
	if err != nil {
		return fmt.Errorf("calibrate iptables: %w", err)
	}
	rs, err := times("kube-proxy's ruleset", reps, cleanup, ruleset, ruleset)
	if err != nil {
		return err
	}
	saveA, rulesA, err := save()
	if err != nil {
		return err
	}
	// One iptables command on the nat table kube-proxy's IPVS mode holds: a
	// chain made, then deleted, reps times. Making one costs about what
	// checking a rule does (the process and its read; timed by hand here
	// with ip netns exec, -C 4.9-7.5 ms, -N 4.8-7.2 ms); a deletion commits slower with iptables-nft
	// (here -N 2.2 ms, -X 14 ms: docs/kernel-costs.md), priced as the
	// command and an item removed (sim.Kernel.Command).
	var made, deleted []float64
	for i := range reps {
		for _, cmd := range []string{"-N", "-X"} {
			clk := c.newClock()
			if err := t.Command(dataplane.IPv4, "nat", cmd, "KPSIM-CAL-CMD"); err != nil {
				return fmt.Errorf("calibrate iptables %s (%d of %d): %w", cmd, i+1, reps, err)
			}
			if cmd == "-N" {
				made = append(made, clk().Seconds())
			} else {
				deleted = append(deleted, clk().Seconds())
			}
		}
	}
	command, removal := median(made), max(0, median(deleted)-median(made))
	fmt.Fprintf(c.log, "%-44s n=%-6d %10.1f us median, -X %.1f us\n", "iptables -N (nat, kpsim's ruleset)", reps, command*1e6, median(deleted)*1e6)
	gs, err := times(fmt.Sprintf("and %d KUBE-IPVS-OUT-FILTER rules", n), reps, cleanup, grown)
	if err != nil {
		return err
	}
	saveB, rulesB, err := save()
	if err != nil {
		return err
	}
	var loads []restoreLoad
	add := func(name string, payload []byte, resident map[string]int, flushed int, secs []float64) error {
		l, err := newRestoreLoad(name, payload, resident, flushed, secs)
		loads = append(loads, l)
		return err
	}
	err = errors.Join(add("kpsim's ruleset", ruleset, nil, 0, rs[0]), add("and KUBE-IPVS-OUT-FILTER", grown, nil, 0, gs[0]))
	if err := errors.Join(err, t.Restore(dataplane.IPv4, cleanup)); err != nil {
		return fmt.Errorf("calibrate iptables: %w", err)
	}
	var replaced [2]float64 // the largest table replacing itself: seconds more, rules flushed
	sizes := iptablesModeSizes(n)
	if why, skip := c.opts.Skip["iptables-mode"]; skip {
		sizes = nil
		c.skipped = append(c.skipped, fmt.Sprintf("iptables-restore at iptables mode's sizes (%s): a restore is priced by kpsim's ruleset alone, replacing per rule flushed", why))
	}
	for i, size := range sizes {
		last := i == len(sizes)-1
		full, services, drop := iptablesModeTable(size)
		round := [][]byte{full}
		if last { // and replacing itself, and a partial sync's rewrite
			round = append(round, full, services)
		}
		ms, err := times(fmt.Sprintf("iptables mode, %d services", size), iptablesModeRepeats, drop, round...)
		if err != nil {
			return err
		}
		if err := t.Restore(dataplane.IPv4, drop); err != nil {
			return fmt.Errorf("calibrate iptables: clean up: %w", err)
		}
		rules := 4 * size // KUBE-SERVICES's, and three per service in its chains
		if err := add(fmt.Sprintf("iptables mode %d", size), full, nil, 0, ms[0]); err != nil {
			return fmt.Errorf("calibrate iptables: %w", err)
		}
		if last {
			replaced = [2]float64{max(0, median(ms[1])-median(ms[0])), float64(rules)}
			if err := add(fmt.Sprintf("iptables mode %d, KUBE-SERVICES again", size), services, map[string]int{"nat": 2*size + 1}, size, ms[2]); err != nil {
				return fmt.Errorf("calibrate iptables: %w", err)
			}
		}
	}
	// Without iptables mode's tables, what replacing the ruleset costs more
	// is priced per rule flushed, as a restore of kpsim's ruleset flushes
	// them all; a restore that flushes a few (IPVS mode's cleanup, in the
	// VM's switch) then pays for those few.
	replaced0 := max(0, median(rs[1])-median(rs[0]))
	replace, perFlushed := 0.0, replaced0/float64(own)
	if len(sizes) > 0 {
		replace, perFlushed = fit(replaced0, replaced[0], own, int(replaced[1]))
	}
	// Without iptables mode's tables the loads cannot tell what grows with
	// the chains from what grows with the bytes: a call and its bytes only.
	cols := len(restoreLoad{}.row())
	if len(sizes) == 0 {
		cols = 2
	}
	rows := make([][]float64, len(loads))
	secs := make([]float64, len(loads))
	for i, l := range loads {
		rows[i] = l.row()[:cols]
		secs[i] = l.seconds
		if l.flushed > 0 {
			secs[i] = max(0, secs[i]-replace-perFlushed*float64(l.flushed))
		}
	}
	price, err := fitNonNegative(rows, secs)
	if err != nil {
		return fmt.Errorf("calibrate iptables-restore: %w", err)
	}
	price = append(price, make([]float64, len(restoreLoad{}.row())-cols)...)
	c.set(dataplane.OpIPTablesRestore, price[0])
	c.set(dataplane.OpIPTablesRestoreBytes, price[1])
	c.p.ListItem[dataplane.OpIPTablesRestore.String()] = perFlushed
	c.p.IPTablesRestore = &sim.IPTablesRestoreCost{Replace: replace, PerDeclared: price[2], PerChain: price[3], PerDeclaredChain: price[4]}
	saveCall, perRule := fit(saveA, saveB, rulesA, rulesB)
	c.set(dataplane.OpIPTablesSave, saveCall)
	c.set(dataplane.OpIPTablesCommand, command)
	c.p.ListItem[dataplane.OpIPTablesCommand.String()] = removal
	c.p.ListItem[dataplane.OpIPTablesSave.String()] = perRule
	match := "the ipvs match"
	if !ipvsMatch {
		match = "a comment match (this kernel has no ipvs match)"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "iptables-restore --noflush with %s, %s (median of %d or %d, range over median): ", cmp.Or(c.opts.IPTables, "iptables"), match, reps, iptablesModeRepeats)
	for i, l := range loads {
		if i > 0 {
			b.WriteString("; ")
		}
		pred := 0.0
		for j, x := range l.row() {
			pred += price[j] * x
		}
		if l.flushed > 0 {
			pred += replace + perFlushed*float64(l.flushed)
		}
		fmt.Fprintf(&b, "%s (%d bytes, %d rules, %d flushed) %s (%.0f%%), priced %s", l.name, l.bytes, l.written, l.flushed, dur(l.seconds), 100*l.spread, dur(pred))
	}
	fmt.Fprintf(&b, ". Fitted (least squares on relative errors): %s per call, %s per byte, %s per rule written and chain declared, %s per rule written and chain of its table, %s per rule written and pair of both; replacing chains %s more per call and %s per rule flushed. iptables-save of the filter table %s per call plus %s per rule. One iptables command (-N on the nat table, median of %d) %s, a deletion (-X) %s more",
		dur(price[0]), dur(price[1]), dur(price[2]), dur(price[3]), fmt.Sprintf("%.3g ps", price[4]*1e12), dur(replace), dur(perFlushed), dur(saveCall), dur(perRule),
		reps, dur(command), dur(removal))
	c.notes = append(c.notes, b.String())
	// Leave the namespace as it was: no chains, no sets.
	err = nil
	for _, s := range sets {
		err = errors.Join(err, c.dp.IPSet.DestroySet(s.Name))
	}
	if err != nil {
		return fmt.Errorf("calibrate iptables: clean up: %w", err)
	}
	return nil
}
