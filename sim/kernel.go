package sim

import (
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kpsim/kpsim/dataplane"
)

// nOps is the number of operation kinds; cost tables are indexed by dataplane.Op.
const nOps = len(dataplane.Ops{})

// Options configure a Kernel. The zero value is a usable node: the host
// profile, costs accounted but not slept, dataplane.DefaultIPSetStrategy,
// and the default node addresses.
type Options struct {
	// Profile prices every operation; nil means the embedded "host" profile.
	Profile *Profile
	// TimeScale is the fraction of modeled cost spent as wall time: 0 only
	// accounts it (fast runs; Kernel reports the cost), 1 sleeps it all
	// (the proxier feels the kernel in real time). Between 0 and 1.
	TimeScale float64
	// IPSetStrategy is how ipset batches reach the modeled kernel; it only
	// changes their cost. Empty means dataplane.DefaultIPSetStrategy.
	IPSetStrategy dataplane.IPSetStrategy
	// NodeAddresses are bound on eth0. Empty means dataplane.DefaultNodeAddresses.
	NodeAddresses []dataplane.InterfaceAddr
}

// Kernel is one node's kernel in memory. All methods are safe for concurrent
// use: a dual-stack node runs two proxiers on one kernel while probes read it.
//
// Kernel implements dataplane.IPVS, IPSet, IPTables, Links, Sysctls and
// Conntrack directly (their method names do not collide), the way one netlink
// handle serves every family.
type Kernel struct {
	mu sync.Mutex

	profile *Profile
	scale   float64
	costs   costTable

	ops     dataplane.Ops
	modeled time.Duration   // every cost charged
	delay   time.Duration   // the part of modeled not slept
	owed    time.Duration   // scaled cost not yet slept (sleeping is batched); negative: overslept
	sleep   time.Duration   // to sleep when the current call releases the lock
	late    atomic.Int64    // wall time slept beyond what was owed, taken off what is owed next
	clock   dataplane.Clock // a modeled clock the costs are spent on, instead of sleeping
	spend   time.Duration   // to spend on clock when the current call releases the lock
	work    ProxierCost     // prices the proxier's own work on the modeled clock

	faults   []*faultState
	faultOps [nOps]int // active faults per op, so the hot path checks one int

	services map[dataplane.ServiceKey]*ipvsService
	sets     map[string]*ipset
	tables   map[dataplane.Family]map[string]*table
	links    map[string]*link
	sysctls  map[string]string
	flows    map[flowKey]netip.AddrPort
	nft      map[nftKey]*nftState
	nftNext  map[netip.AddrPort]int // the next numgen choice a probe of a service address takes
	iptNext  map[*chain]int         // the next statistic choice a probe takes in an iptables chain
}

var _ interface {
	dataplane.IPVS
	dataplane.IPSet
	dataplane.IPTables
	dataplane.Links
	dataplane.Sysctls
	dataplane.Conntrack
	dataplane.NFTables
} = (*Kernel)(nil)

// New returns a kernel in its boot state: eth0 (up) with the node addresses,
// lo with 127.0.0.1/8 and ::1/128, the iptables built-in chains of the
// filter, nat, mangle and raw tables for both families, and the sysctls
// kube-proxy touches at their kernel defaults.
func New(o Options) (*Kernel, error) {
	if o.TimeScale < 0 || o.TimeScale > 1 {
		return nil, fmt.Errorf("sim: time scale %v: must be between 0 and 1", o.TimeScale)
	}
	if o.Profile == nil {
		p, err := LoadProfile(DefaultProfile)
		if err != nil {
			return nil, err
		}
		o.Profile = p
	}
	if o.IPSetStrategy == "" {
		o.IPSetStrategy = dataplane.DefaultIPSetStrategy
	}
	costs, err := o.Profile.table(o.IPSetStrategy)
	if err != nil {
		return nil, err
	}
	work, err := o.Profile.ProxierWork()
	if err != nil {
		return nil, err
	}
	if len(o.NodeAddresses) == 0 {
		for _, f := range []dataplane.Family{dataplane.IPv4, dataplane.IPv6} {
			o.NodeAddresses = append(o.NodeAddresses, dataplane.InterfaceAddr{Link: "eth0", Prefix: dataplane.DefaultNodeAddresses[f]})
		}
	}
	k := &Kernel{
		profile:  o.Profile,
		scale:    o.TimeScale,
		costs:    costs,
		work:     work,
		services: make(map[dataplane.ServiceKey]*ipvsService),
		sets:     make(map[string]*ipset),
		tables:   newTables(),
		links: map[string]*link{
			"eth0": newLink(false),
			"lo":   newLink(false),
		},
		sysctls: defaultSysctls(),
		flows:   make(map[flowKey]netip.AddrPort),
		nft:     make(map[nftKey]*nftState),
		nftNext: make(map[netip.AddrPort]int),
		iptNext: make(map[*chain]int),
	}
	k.links["lo"].addrs[netip.MustParseAddr("127.0.0.1")] = netip.MustParsePrefix("127.0.0.1/8")
	k.links["lo"].addrs[netip.MustParseAddr("::1")] = netip.MustParsePrefix("::1/128")
	for _, a := range o.NodeAddresses {
		if err := k.AddLocalAddress(a.Link, a.Prefix); err != nil {
			return nil, fmt.Errorf("sim: node address: %w", err)
		}
	}
	return k, nil
}

// Dataplane returns the kernel as the proxier sees it, with the kernel as
// its Model of time.
func (k *Kernel) Dataplane() dataplane.Dataplane {
	return dataplane.Dataplane{IPVS: k, IPSet: k, IPTables: k, Links: k, Sysctls: k, Conntrack: k, NFTables: k, Model: k}
}

// SetClock puts the kernel on a modeled clock: from now on each operation's
// cost is spent on c by the calling goroutine after the kernel's lock is
// released (so probes and the other family's proxier see the kernel in the
// meantime), and Compute prices the proxier's work on it too. Only a kernel
// at time scale 0 can have a clock: at any other scale time is real.
func (k *Kernel) SetClock(c dataplane.Clock) error {
	if !ModeledAt(k.scale) {
		return fmt.Errorf("sim: a modeled clock needs time scale 0, not %v", k.scale)
	}
	k.mu.Lock()
	k.clock = c
	k.mu.Unlock()
	return nil
}

// ModeledAt reports whether a kernel at time scale scale can run on a
// modeled clock: only at 0, where no cost is slept; at any other scale
// time is the wall clock's.
func ModeledAt(scale float64) bool { return scale == 0 }

// Kernel returns the modeled cost of every operation so far and the part not slept.
func (k *Kernel) Kernel() (total, unspent time.Duration) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.modeled, k.delay
}

// now is the kernel's time, for what it keeps by time (IPVS persistence
// templates, nftables set elements with a timeout): the modeled clock's
// instant when it is on one that tells it, the wall clock's otherwise.
// Callers hold the lock.
func (k *Kernel) now() time.Time {
	if c, ok := k.clock.(interface{ Now() time.Time }); ok {
		return c.Now()
	}
	return time.Now()
}

// Clocked reports whether the kernel is on a modeled clock (SetClock).
func (k *Kernel) Clocked() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.clock != nil
}

// Compute prices a proxier's own work from the profile and, on a modeled
// clock, spends it there and returns it. Without a clock the proxier's time
// is its own wall time, and Compute returns 0.
func (k *Kernel) Compute(w dataplane.Work) time.Duration { return k.spendWork(k.work, w) }

// ComputeAs prices impl's work by the profile's prices for it, if any.
func (k *Kernel) ComputeAs(impl string, w dataplane.Work) time.Duration {
	if c, ok := k.profile.Releases[impl]; ok {
		return k.spendWork(c, w)
	}
	return k.Compute(w)
}

func (k *Kernel) spendWork(price ProxierCost, w dataplane.Work) time.Duration {
	k.mu.Lock()
	c := k.clock
	k.mu.Unlock()
	if c == nil {
		return 0
	}
	d := price.Price(w)
	c.Spend(d)
	return d
}

// Profile returns the cost profile the kernel charges from, so that a run
// can record which one it was (the default when Options named none).
func (k *Kernel) Profile() *Profile { return k.profile }

// Ops returns the kernel's own count of every operation it executed, from
// every caller. It counts the way dataplane.Count does (an operation counts
// when issued, failed or not; link-create only when a link was created;
// conntrack-delete per entry deleted), so a single proxier's Counter and the
// kernel agree.
func (k *Kernel) Ops() dataplane.Ops {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.ops
}

// lock and unlock bracket every operation. Sleeping happens after the lock
// is released, so a modeled slow kernel call delays its caller, not readers
// and the other family's proxier.
func (k *Kernel) lock() { k.mu.Lock() }

func (k *Kernel) unlock() { k.unlockUntil(nil) }

// unlockUntil is unlock for a call that stops once stop is closed (nil:
// never): the wall time owed is slept until then, and it reports whether the
// call may go on.
func (k *Kernel) unlockUntil(stop <-chan struct{}) bool {
	d, sp := k.sleep, k.spend
	k.sleep, k.spend = 0, 0
	c := k.clock
	k.mu.Unlock()
	if d > 0 {
		start := time.Now()
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-stop:
			t.Stop()
		}
		// A sleep ends late (a fraction of a millisecond, more on a busy
		// machine): over the thousands of sleeps of a batch that adds
		// seconds the model did not charge, which the proxier's phases
		// would count as its own time. The next sleeps make up for it.
		if late := time.Since(start) - d; late > 0 {
			k.late.Add(int64(late))
		}
	}
	if sp > 0 {
		c.Spend(sp)
	}
	select {
	case <-stop:
		return false
	default:
		return true
	}
}

// sleepChunk is the least wall time slept at once: sleeping per operation
// (microseconds each) would measure the timer, not the model.
const sleepChunk = time.Millisecond

// charge accounts cost d: all of it as modeled, the scaled part owed as wall
// time (slept in chunks when the lock is released, less what earlier sleeps
// overran), the rest as delay.
func (k *Kernel) charge(d time.Duration) {
	if d <= 0 {
		return
	}
	k.modeled += d
	if k.scale == 0 {
		k.delay += d
		if k.clock != nil {
			k.spend += d
		}
		return
	}
	s := time.Duration(float64(d) * k.scale)
	k.delay += d - s
	k.owed += s - time.Duration(k.late.Swap(0))
	if k.owed >= sleepChunk {
		k.sleep += k.owed
		k.owed = 0
	}
}

// count records n operations of kind op and charges their per-operation cost.
func (k *Kernel) count(op dataplane.Op, n int) {
	k.ops[op] += int64(n)
	k.charge(k.costs.op[op] * time.Duration(n))
}

// read charges a read operation: one call plus its items.
func (k *Kernel) read(op dataplane.Op, items int) { k.readThrough(op, items, items) }

// readThrough charges a read that returns items and goes through through
// (priced by the pair: ListPairs).
func (k *Kernel) readThrough(op dataplane.Op, items, through int) {
	k.ops[op]++
	k.charge(k.costs.op[op] + seconds(k.costs.item[op]*float64(items)+k.costs.pair[op]*float64(through)*float64(through)))
}

// errorf wraps err (usually an errno) with the operation and object that failed.
func errorf(err error, format string, args ...any) error {
	return fmt.Errorf("%s: %w", fmt.Sprintf(format, args...), err)
}
