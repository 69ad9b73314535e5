// Package calibrate measures what each kernel operation the proxier issues
// costs on a kernel, and writes it as a cost profile the in-memory kernel
// (sim/) charges from: how the sim comes to predict a particular node. It
// drives the real kernel (kernel/) and runs scenarios (scenarios/) to price
// the proxier's own work, so it sits above both, not inside kernel/.
package calibrate

import (
	"fmt"
	"io"
	"net/netip"
	"runtime"
	"sort"
	"strings"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/kpsim/kpsim/dataplane"
	"github.com/kpsim/kpsim/kernel/netns"
	"github.com/kpsim/kpsim/proxier"
	"github.com/kpsim/kpsim/sim"
)

// Options size the measurements.
type Options struct {
	// Entries is how many set entries, IPVS services and destinations,
	// addresses and conntrack entries each measurement creates (default 1000).
	Entries int
	// ExecEntries is the entry count for the one-process-per-entry ipset
	// strategy, which is slow (default 100).
	ExecEntries int
	// Name is the profile's name (default "calibrated").
	Name string
	// Where says where the measurement ran ("host kernel, Debian 12, 2 cores";
	// "QEMU TCG VM, -smp 2"); it opens the profile's source text.
	Where string
	// Skip names capabilities this kernel lacks, with why, keyed "ipvs",
	// "dummy", "conntrack", "nftables", or measurements to leave out,
	// "iptables-mode" (iptables mode's restores, minutes on an emulated
	// CPU, and a release's own code in that mode): their operations are not
	// measured, and the source text says so.
	Skip map[string]string
	// NFTVersion is what `nft --version` says, for the source text.
	NFTVersion string
	// IPTables names the iptables the kernel backend restores with (its
	// variant's command and what it says of its version), for the source
	// text.
	IPTables string
	// Log receives one line per measurement; nil discards.
	Log io.Writer
	// ProxierServices are the cluster sizes the proxier's own work is
	// measured at (default 1,000 and 4,000 services); empty with
	// SkipProxier measures none.
	ProxierServices []int
	// SkipProxier leaves the proxier's work unmeasured (the profile then
	// prices it as the host profile does).
	SkipProxier bool
	// Clock returns elapsed kernel time since its first call. Nil means
	// wall time plus the dataplane's ModeledDelay, if it has one (so that
	// calibrating the in-memory kernel gives back its profile).
	Clock func(dataplane.Dataplane) func() time.Duration
}

// OpenDataplane opens a dataplane with an ipset strategy; close releases it.
type OpenDataplane func(dataplane.IPSetStrategy) (dp dataplane.Dataplane, close func(), err error)

// calibration accumulates one profile.
type calibration struct {
	opts     Options
	p        *sim.Profile
	notes    []string // what was measured, one item each
	skipped  []string
	log      io.Writer
	dp       dataplane.Dataplane
	newClock func() func() time.Duration
}

// Run measures the per-operation costs of the kernel behind open and
// returns them as a cost profile the simulation loads. It changes only the
// namespace it runs in and removes what it created; run it in an isolated
// process.
func Run(open OpenDataplane, opts Options) (*sim.Profile, error) {
	if opts.Entries <= 0 {
		opts.Entries = 1000
	}
	if opts.ExecEntries <= 0 {
		opts.ExecEntries = 100
	}
	if opts.Name == "" {
		opts.Name = "calibrated"
	}
	if len(opts.ProxierServices) == 0 {
		opts.ProxierServices = []int{1000, 4000}
	}
	c := &calibration{
		opts: opts,
		p: &sim.Profile{Name: opts.Name, Ops: map[string]float64{}, ListItem: map[string]float64{},
			IPSet: map[dataplane.IPSetStrategy]sim.IPSetCost{}},
		log: opts.Log,
	}
	if c.log == nil {
		c.log = io.Discard
	}
	for _, s := range dataplane.IPSetStrategies {
		dp, closeDP, err := open(s)
		if err != nil {
			return nil, fmt.Errorf("calibrate: open dataplane (ipset %s): %w", s, err)
		}
		c.dp = dp
		c.newClock = func() func() time.Duration { return c.clock(dp) }
		err = c.ipset(s)
		if err == nil && s == dataplane.IPSetStrategies[0] {
			err = c.others()
		}
		closeDP()
		if err != nil {
			return nil, err
		}
	}
	if !opts.SkipProxier {
		if err := c.proxierWork(); err != nil {
			return nil, err
		}
		// The kube-proxy releases this binary has (upstream/), each priced
		// by its own code's time.
		for _, impl := range proxier.Implementations() {
			if impl == proxier.ImplementationKpsim {
				continue
			}
			modes := []proxier.Mode{proxier.ModeIPVS}
			if proxier.HasNFTablesMode(impl) { // and iptables mode
				modes = append(modes, proxier.ModeNFTables)
				if _, skip := opts.Skip["iptables-mode"]; !skip {
					modes = append(modes, proxier.ModeIPTables)
				}
			}
			for _, mode := range modes {
				price, err := FitRelease(impl, mode, opts.ProxierServices, c.where(), c.log)
				if err != nil {
					return nil, err
				}
				if c.p.Releases == nil {
					c.p.Releases = map[string]sim.ProxierCost{}
				}
				c.p.Releases[proxier.Config{Implementation: impl, Mode: mode}.Priced()] = price
			}
		}
	}
	c.p.Source = c.source()
	if err := c.p.Validate(); err != nil {
		return nil, fmt.Errorf("calibrate: %w", err)
	}
	return c.p, nil
}

func (c *calibration) clock(dp dataplane.Dataplane) func() time.Duration {
	if c.opts.Clock != nil {
		return c.opts.Clock(dp)
	}
	start := time.Now()
	var unspent0 time.Duration
	if dp.Model != nil {
		_, unspent0 = dp.Model.Kernel()
	}
	return func() time.Duration {
		d := time.Since(start)
		if dp.Model != nil {
			_, unspent := dp.Model.Kernel()
			d += unspent - unspent0
		}
		return d
	}
}

// each times n calls of f and returns the mean cost in seconds.
func (c *calibration) each(what string, n int, f func(i int) error) (float64, error) {
	clk := c.newClock()
	for i := 0; i < n; i++ {
		if err := f(i); err != nil {
			return 0, fmt.Errorf("calibrate %s (%d of %d): %w", what, i+1, n, err)
		}
	}
	per := clk().Seconds() / float64(n)
	fmt.Fprintf(c.log, "%-44s n=%-6d %10.1f us each\n", what, n, per*1e6)
	return per, nil
}

// once times one call of f in seconds.
func (c *calibration) once(what string, f func() error) (float64, error) {
	clk := c.newClock()
	if err := f(); err != nil {
		return 0, fmt.Errorf("calibrate %s: %w", what, err)
	}
	d := clk().Seconds()
	fmt.Fprintf(c.log, "%-44s %10.1f us\n", what, d*1e6)
	return d, nil
}

// typical times n calls of f and returns the median, in seconds: for a read
// whose first call pays for what the ones after it reuse.
func (c *calibration) typical(what string, n int, f func() error) (float64, error) {
	times, err := c.times(what, n, f)
	if err != nil {
		return 0, err
	}
	return median(times), nil
}

// times times n calls of f, in seconds, and logs their median.
func (c *calibration) times(what string, n int, f func() error) ([]float64, error) {
	times := make([]float64, 0, n)
	for i := 0; i < n; i++ {
		clk := c.newClock()
		if err := f(); err != nil {
			return nil, fmt.Errorf("calibrate %s (%d of %d): %w", what, i+1, n, err)
		}
		times = append(times, clk().Seconds())
	}
	fmt.Fprintf(c.log, "%-44s n=%-6d %10.1f us median\n", what, n, median(times)*1e6)
	return times, nil
}

// fit returns the fixed and per-item parts of a cost measured at two sizes.
func fit(small, large float64, nSmall, nLarge int) (fixed, perItem float64) {
	perItem = (large - small) / float64(nLarge-nSmall)
	if perItem < 0 {
		perItem = 0
	}
	fixed = small - perItem*float64(nSmall)
	if fixed < 0 {
		fixed = 0
	}
	return fixed, perItem
}

// calibrationAddr returns the i-th address of the 198.18.0.0/15 benchmark
// range: configuration only, no traffic is ever sent to it.
func calibrationAddr(base byte, i int) netip.Addr {
	return netip.AddrFrom4([4]byte{198, base, byte(i / 250 % 256), byte(i%250 + 1)})
}

// The sets a calibration's entries go to, shaped like kube-proxy's at a
// cluster of ClusterIP services: each service puts its address in a
// hash:ip set (KUBE-IPVS-IPS) and address,proto:port in a hash:ip,port set
// (KUBE-CLUSTER-IP), and one in three an endpoint's hairpin in a
// hash:ip,port,ip set (KUBE-LOOP-BACK). The types cost differently to add
// (the VM's ipset restore: about 330 us per hash:ip,port entry, a third of
// that on average over kube-proxy's mix), so the mix is kube-proxy's.
var calibrationSets = []struct {
	suffix string
	typ    dataplane.SetType
}{{"IPS", dataplane.HashIP}, {"0", dataplane.HashIPPort}, {"LOOP", dataplane.HashIPPortIP}}

// setChanges spreads n entries over calibrationSets (the first under the
// name of set 0, created with the other timed creates), service by
// service, as additions or deletions.
func setChanges(n int, name func(suffix string) string, del bool) []dataplane.SetChange {
	lists := make([][]string, len(calibrationSets))
	for svc, count := 0, 0; count < n; svc++ {
		a := calibrationAddr(18, svc)
		ep := calibrationAddr(19, svc)
		for j, e := range []string{a.String(), fmt.Sprintf("%s,tcp:80", a), fmt.Sprintf("%s,tcp:8080,%s", ep, ep)} {
			if count == n || (j == 2 && svc%3 != 0) {
				continue
			}
			lists[j] = append(lists[j], e)
			count++
		}
	}
	var out []dataplane.SetChange
	for j, l := range lists {
		if len(l) == 0 {
			continue
		}
		ch := dataplane.SetChange{Set: name(calibrationSets[j].suffix)}
		if del {
			ch.Del = l
		} else {
			ch.Add = l
		}
		out = append(out, ch)
	}
	return out
}

func (c *calibration) ipset(s dataplane.IPSetStrategy) error {
	ips := c.dp.IPSet
	n := c.opts.Entries
	if s == dataplane.IPSetExec {
		n = c.opts.ExecEntries
	}
	const commands = 10
	name := func(i int) string { return fmt.Sprintf("KPSIM-CAL-%d", i) }
	set := func(i int) dataplane.Set {
		return dataplane.Set{Name: name(i), Type: dataplane.HashIPPort, Family: dataplane.IPv4, MaxElem: 262144}
	}
	create, err := c.each("ipset "+string(s)+" create", commands, func(i int) error { return ips.CreateSet(set(i)) })
	if err != nil {
		return err
	}
	destroy, err := c.each("ipset "+string(s)+" destroy", commands-1, func(i int) error { return ips.DestroySet(name(i + 1)) })
	if err != nil {
		return err
	}
	const small = 10
	byName := func(suffix string) string { return "KPSIM-CAL-" + suffix }
	for _, cs := range calibrationSets {
		if cs.suffix == "0" {
			continue // created above, timed
		}
		if err := ips.CreateSet(dataplane.Set{Name: byName(cs.suffix), Type: cs.typ, Family: dataplane.IPv4, MaxElem: 262144}); err != nil {
			return fmt.Errorf("calibrate: ipset create %s: %w", byName(cs.suffix), err)
		}
	}
	apply := func(what string, entries int, del bool) (float64, error) {
		return c.once(fmt.Sprintf("ipset %s %s x%d", s, what, entries), func() error {
			return ips.Apply(setChanges(entries, byName, del))
		})
	}
	addSmall, err := apply("add", small, false)
	if err != nil {
		return err
	}
	delSmall, err := apply("del", small, true)
	if err != nil {
		return err
	}
	// Reading every set back is one netlink dump whatever the strategy:
	// priced once, from the restore strategy's dataplane, on an empty set
	// and on a full one.
	listSet := func(want int) (float64, error) {
		return c.typical(fmt.Sprintf("ipset-list (%d entries)", want), 5, func() error {
			sets, err := ips.Sets()
			if err != nil {
				return err
			}
			got := 0
			for _, st := range sets {
				got += len(st.Entries)
			}
			if got != want {
				return fmt.Errorf("listed %d entries, want %d", got, want)
			}
			return nil
		})
	}
	var listEmpty, listFull float64
	if s == dataplane.IPSetRestore {
		if listEmpty, err = listSet(0); err != nil {
			return err
		}
	}
	addLarge, err := apply("add", n, false)
	if err != nil {
		return err
	}
	if s == dataplane.IPSetRestore {
		if listFull, err = listSet(n); err != nil {
			return err
		}
	}
	delLarge, err := apply("del", n, true)
	if err != nil {
		return err
	}
	for _, cs := range calibrationSets {
		if err := ips.DestroySet(byName(cs.suffix)); err != nil {
			return fmt.Errorf("calibrate: ipset destroy %s: %w", byName(cs.suffix), err)
		}
	}
	batchAdd, entryAdd := fit(addSmall, addLarge, small, n)
	batchDel, entryDel := fit(delSmall, delLarge, small, n)
	cost := sim.IPSetCost{PerEntry: (entryAdd + entryDel) / 2, PerCommand: (create + destroy) / 2}
	if s == dataplane.IPSetRestore {
		cost.PerBatch = (batchAdd + batchDel) / 2
	}
	c.p.IPSet[s] = cost
	c.notes = append(c.notes, fmt.Sprintf("ipset %s: %s per entry (add and del, fitted over batches of %d and %d, kube-proxy's mix of hash:ip, hash:ip,port and hash:ip,port,ip)%s, %s per create/destroy",
		s, dur(cost.PerEntry), small, n, batchNote(cost.PerBatch), dur(cost.PerCommand)))
	if s == dataplane.IPSetRestore {
		call, perEntry := fit(listEmpty, listFull, 0, n)
		c.set(dataplane.OpIPSetList, call)
		c.p.ListItem[dataplane.OpIPSetList.String()] = perEntry
		c.notes = append(c.notes, fmt.Sprintf("ipset list (every set in one netlink dump): %s per call plus %s per entry (%d entries)",
			dur(call), dur(perEntry), n))
	}
	return nil
}

func batchNote(b float64) string {
	if b == 0 {
		return ""
	}
	return fmt.Sprintf(" plus %s per batch", dur(b))
}

// others measures everything that does not depend on the ipset strategy.
func (c *calibration) others() error {
	for _, m := range []struct {
		cap string
		f   func() error
	}{
		{"ipvs", c.ipvs},
		{"", c.addresses},
		{"", c.iptables},
		{"", c.sysctl},
		{"conntrack", c.conntrack},
		{"nftables", c.nftables},
	} {
		if why, skip := c.opts.Skip[m.cap]; m.cap != "" && skip {
			c.skipped = append(c.skipped, fmt.Sprintf("%s operations (%s)", m.cap, why))
			continue
		}
		if err := m.f(); err != nil {
			return err
		}
	}
	return nil
}

func (c *calibration) set(op dataplane.Op, v float64) { c.p.Ops[op.String()] = v }

// destsPerService is how many real servers each calibration virtual
// server gets: as many as a typical service has endpoints, so that the
// whole table's read is priced on a table shaped like kube-proxy's.
const destsPerService = 3

func (c *calibration) ipvs() error {
	v := c.dp.IPVS
	n := c.opts.Entries
	key := func(i int) dataplane.ServiceKey {
		return dataplane.ServiceKey{Address: calibrationAddr(19, i), Port: 80, Protocol: dataplane.TCP}
	}
	vs := func(i int, sched string) dataplane.VirtualServer {
		return dataplane.VirtualServer{ServiceKey: key(i), Scheduler: sched, Netmask: 0xffffffff}
	}
	affine := func(i int) dataplane.VirtualServer {
		s := vs(i, "rr")
		s.Flags, s.Timeout = dataplane.FlagPersistent, 10800
		return s
	}
	// Real server j of every virtual server; i enumerates them all.
	rs := func(i, w int) dataplane.RealServer {
		return dataplane.RealServer{Address: calibrationAddr(18, i/destsPerService), Port: uint16(8080 + i%destsPerService), Weight: w}
	}
	listAll := func(what string, want int) (float64, error) {
		return c.typical(fmt.Sprintf("ipvs-list (%s)", what), 3, func() error {
			got, err := v.Services()
			items := len(got)
			for _, s := range got {
				items += len(s.Destinations)
			}
			if err == nil && items != want {
				err = fmt.Errorf("listed %d virtual and real servers, want %d", items, want)
			}
			return err
		})
	}
	steps := []struct {
		op    dataplane.Op
		calls int
		f     func(i int) error
	}{
		{dataplane.OpIPVSServiceAdd, n, func(i int) error { return v.AddService(vs(i, "rr")) }},
		// Session affinity switched on: kube-proxy's most common update.
		{dataplane.OpIPVSServiceUpdate, n, func(i int) error { return v.UpdateService(affine(i)) }},
		{dataplane.OpIPVSDestinationAdd, n * destsPerService, func(i int) error { return v.AddDestination(key(i/destsPerService), rs(i, 1)) }},
		{dataplane.OpIPVSDestinationUpdate, n, func(i int) error { return v.UpdateDestination(key(i), rs(i*destsPerService, 0)) }},
		// One virtual server's real servers, with their counters: what
		// graceful termination reads.
		{dataplane.OpIPVSDestinationList, n, func(i int) error {
			got, err := v.Destinations(key(i))
			if err == nil && len(got) != destsPerService {
				err = fmt.Errorf("listed %d real servers of %s, added %d", len(got), key(i), destsPerService)
			}
			return err
		}},
	}
	for _, s := range steps {
		per, err := c.each(s.op.String(), s.calls, s.f)
		if err != nil {
			return err
		}
		c.set(s.op, per)
	}
	full, err := listAll(fmt.Sprintf("%d virtual servers, %d real servers", n, n*destsPerService), n*(1+destsPerService))
	if err != nil {
		return err
	}
	per, err := c.each(dataplane.OpIPVSDestinationDelete.String(), n*destsPerService, func(i int) error {
		return v.DeleteDestination(key(i/destsPerService), rs(i, 0))
	})
	if err != nil {
		return err
	}
	c.set(dataplane.OpIPVSDestinationDelete, per)
	if per, err = c.each(dataplane.OpIPVSServiceDelete.String(), n, func(i int) error { return v.DeleteService(key(i)) }); err != nil {
		return err
	}
	c.set(dataplane.OpIPVSServiceDelete, per)
	empty, err := listAll("empty table", 0)
	if err != nil {
		return err
	}
	// The whole table's read: a fixed part and a part per virtual or real
	// server. One virtual server's read is priced at the same per-item cost,
	// the rest per call.
	call, perItem := fit(empty, full, 0, n*(1+destsPerService))
	c.set(dataplane.OpIPVSList, call)
	c.p.ListItem[dataplane.OpIPVSList.String()] = perItem
	c.p.ListItem[dataplane.OpIPVSDestinationList.String()] = perItem
	c.set(dataplane.OpIPVSDestinationList, max(0, c.p.Ops[dataplane.OpIPVSDestinationList.String()]-destsPerService*perItem))
	c.notes = append(c.notes, fmt.Sprintf("IPVS over netlink, %d virtual servers with %d real servers each: service add %s, update %s, delete %s; destination add %s, update %s, delete %s; "+
		"the whole table's read (a netlink dump and /proc/net/ip_vs) %s per call plus %s per virtual or real server; one virtual server's real servers %s per call plus as much per real server",
		n, destsPerService, c.op(dataplane.OpIPVSServiceAdd), c.op(dataplane.OpIPVSServiceUpdate), c.op(dataplane.OpIPVSServiceDelete),
		c.op(dataplane.OpIPVSDestinationAdd), c.op(dataplane.OpIPVSDestinationUpdate), c.op(dataplane.OpIPVSDestinationDelete),
		c.op(dataplane.OpIPVSList), dur(perItem), c.op(dataplane.OpIPVSDestinationList)))
	return nil
}

func (c *calibration) op(op dataplane.Op) string { return dur(c.p.Ops[op.String()]) }

func (c *calibration) addresses() error {
	l := c.dp.Links
	n := c.opts.Entries
	link := dataplane.DummyLink
	if why, skip := c.opts.Skip["dummy"]; skip {
		// Binding to lo costs the same netlink request; only link creation is lost.
		link = "lo"
		c.skipped = append(c.skipped, fmt.Sprintf("link-create (%s); addresses were bound to lo instead of a dummy link", why))
	} else {
		const links = 10
		per, err := c.each("link-create (dummy)", links, func(i int) error {
			_, err := l.EnsureDummy(fmt.Sprintf("kpsim-cal%d", i))
			return err
		})
		if err != nil {
			return err
		}
		for i := 0; i < links; i++ {
			if err := l.DeleteLink(fmt.Sprintf("kpsim-cal%d", i)); err != nil {
				return fmt.Errorf("calibrate: delete link kpsim-cal%d: %w", i, err)
			}
		}
		c.set(dataplane.OpLinkCreate, per)
		if _, err := l.EnsureDummy(link); err != nil {
			return fmt.Errorf("calibrate: create %s: %w", link, err)
		}
		defer l.DeleteLink(link)
	}
	prefix := func(i int) netip.Prefix { return netip.PrefixFrom(calibrationAddr(19, i), 32) }
	bind, err := c.each("address-bind", n, func(i int) error { return l.AddAddress(link, prefix(i)) })
	if err != nil {
		return err
	}
	list, err := c.typical(fmt.Sprintf("address-list (%d addresses)", n), 10, func() error {
		_, err := l.Addresses(link, dataplane.IPv4)
		return err
	})
	if err != nil {
		return err
	}
	unbind, err := c.each("address-unbind", n, func(i int) error { return l.DelAddress(link, prefix(i)) })
	if err != nil {
		return err
	}
	listEmpty, err := c.typical("address-list (no addresses)", 10, func() error {
		_, err := l.Addresses(link, dataplane.IPv4)
		return err
	})
	if err != nil {
		return err
	}
	c.set(dataplane.OpAddressBind, bind)
	c.set(dataplane.OpAddressUnbind, unbind)
	c.set(dataplane.OpAddressList, listEmpty)
	c.p.ListItem[dataplane.OpAddressList.String()] = max(0, (list-listEmpty)/float64(n))
	c.notes = append(c.notes, fmt.Sprintf("addresses on %s (%d): bind %s, unbind %s, list %s per call plus %s per address",
		link, n, dur(bind), dur(unbind), dur(listEmpty), dur(c.p.ListItem[dataplane.OpAddressList.String()])))
	return nil
}

func (c *calibration) sysctl() error {
	s := c.dp.Sysctls
	const key = "net/ipv4/conf/all/arp_ignore" // one kube-proxy writes (strictARP)
	old, err := s.Sysctl(key)
	if err != nil {
		return fmt.Errorf("calibrate: sysctl %s: %w", key, err)
	}
	per, err := c.each("sysctl-write", 100, func(i int) error { return s.SetSysctl(key, fmt.Sprint(i%2)) })
	if err != nil {
		return err
	}
	if err := s.SetSysctl(key, old); err != nil {
		return fmt.Errorf("calibrate: sysctl %s=%s: %w", key, old, err)
	}
	c.set(dataplane.OpSysctlWrite, per)
	c.notes = append(c.notes, fmt.Sprintf("sysctl write %s", dur(per)))
	return nil
}

// conntrack creates UDP flows to one service address over netlink and times
// listing the family's table (kube-proxy lists it at every sync of a
// cluster with UDP services, to find stale flows) with them and without,
// and deleting them the way kube-proxy does (every flow to a service
// address). A listing walks the whole of the kernel's flow table, whichever
// namespace the flows are in: its price is mostly the call's.
func (c *calibration) conntrack() error {
	if !netns.Isolated() {
		return fmt.Errorf("calibrate conntrack: %w", netns.ErrNotIsolated)
	}
	n := c.opts.Entries
	svc := calibrationAddr(19, 0)
	create := func() error {
		for i := 0; i < n; i++ {
			f := &netlink.ConntrackFlow{
				FamilyType: unix.AF_INET,
				Forward: netlink.IPTuple{SrcIP: calibrationAddr(18, i).AsSlice(), DstIP: svc.AsSlice(),
					Protocol: unix.IPPROTO_UDP, SrcPort: uint16(10000 + i%50000), DstPort: 53},
				Reverse: netlink.IPTuple{SrcIP: svc.AsSlice(), DstIP: calibrationAddr(18, i).AsSlice(),
					Protocol: unix.IPPROTO_UDP, SrcPort: 53, DstPort: uint16(10000 + i%50000)},
				TimeOut: 120,
			}
			if err := netlink.ConntrackCreate(netlink.ConntrackTable, netlink.FAMILY_V4, f); err != nil {
				return fmt.Errorf("conntrack create %s: %w", f, err)
			}
		}
		return nil
	}
	list := func(what string) (float64, error) {
		return c.typical(fmt.Sprintf("conntrack-list (%s)", what), 5, func() error {
			_, err := c.dp.Conntrack.Flows(dataplane.IPv4)
			return err
		})
	}
	listEmpty, err := list("no flows")
	if err != nil {
		return err
	}
	if err := create(); err != nil {
		return fmt.Errorf("calibrate: %w", err)
	}
	listFull, err := list(fmt.Sprintf("%d flows", n))
	if err != nil {
		return err
	}
	var deleted int
	d, err := c.once(fmt.Sprintf("conntrack-delete (%d flows)", n), func() error {
		var err error
		deleted, err = c.dp.Conntrack.Delete(dataplane.ConntrackFilter{Protocol: dataplane.UDP, OrigDst: svc, OrigDstPort: 53})
		return err
	})
	if err != nil {
		return err
	}
	if deleted != n {
		return fmt.Errorf("calibrate: conntrack delete: deleted %d of %d flows", deleted, n)
	}
	per := d / float64(n)
	c.set(dataplane.OpConntrackDelete, per)
	fixed, perFlow := fit(listEmpty, listFull, 0, n)
	c.set(dataplane.OpConntrackList, fixed)
	c.p.ListItem[dataplane.OpConntrackList.String()] = perFlow
	c.notes = append(c.notes, fmt.Sprintf("conntrack delete %s per flow (%d UDP flows to one service port); list %s per call plus %s per flow",
		dur(per), n, dur(fixed), dur(perFlow)))
	return nil
}

// where names the machine and the day, for source texts.
func (c *calibration) where() string {
	w := c.opts.Where
	if w == "" {
		w = "an unnamed machine"
	}
	return fmt.Sprintf("%s (kernel %s, %d CPUs, %s)", w, kernelRelease(), runtime.NumCPU(), time.Now().UTC().Format("2006-01-02"))
}

func (c *calibration) source() string {
	var b strings.Builder
	fmt.Fprintf(&b, "Measured by `kpsim calibrate` on %s, in a private network namespace. ", c.where())
	b.WriteString(strings.Join(c.notes, "; "))
	b.WriteString(".")
	if len(c.skipped) > 0 {
		sort.Strings(c.skipped)
		b.WriteString(" Not measured, this kernel cannot: " + strings.Join(c.skipped, "; ") +
			". Those operations are absent from the profile, so the simulation charges nothing for them; load another profile to price them.")
	}
	return b.String()
}

func kernelRelease() string {
	var uts unix.Utsname
	if unix.Uname(&uts) != nil {
		return "unknown"
	}
	return unix.ByteSliceToString(uts.Release[:])
}

// dur formats seconds for the source text.
func dur(s float64) string {
	d := time.Duration(s * 1e9)
	switch {
	case d >= time.Millisecond:
		return fmt.Sprintf("%.2f ms", s*1e3)
	case d >= time.Microsecond:
		return fmt.Sprintf("%.1f us", s*1e6)
	}
	return fmt.Sprintf("%.0f ns", s*1e9)
}
