package dataplane

import (
	"context"
	"net/netip"
	"slices"
	"sync"

	"sigs.k8s.io/knftables"
)

// Counter counts the operations issued through a Dataplane returned by Count.
// It belongs to one proxier, whose syncs run one at a time; it is not locked.
type Counter struct {
	ops   Ops
	churn *Churn
}

// Ops returns the counts so far. Phases take differences of snapshots.
func (c *Counter) Ops() Ops { return c.ops }

// Churn remembers what was deleted from the kernel so that adding it back is
// counted as wasted work: the incident's signature is thousands of ipset
// entries deleted by one sync and re-added by the next. One Churn is shared by
// every proxier of a run (both families, and across restarts).
type Churn struct {
	mu      sync.Mutex
	deleted map[churnKey]struct{}
	readded Ops
	// dests are the real servers known to be in each virtual server: a
	// service delete takes them with it, and re-creating them is wasted too.
	dests map[ServiceKey]Dests
}

// churnKey identifies a kernel object by value, so that counting costs no
// formatting on the hot path.
type churnKey struct {
	op    Op // the add operation that would undo the delete
	svc   ServiceKey
	dst   netip.AddrPort
	name  string // set or link name
	entry string // set entry
	addr  netip.Prefix
}

// NewChurn returns an empty Churn.
func NewChurn() *Churn {
	return &Churn{deleted: make(map[churnKey]struct{}), dests: make(map[ServiceKey]Dests)}
}

// Readded returns, per add operation, how many additions re-created something
// deleted earlier in the run.
func (c *Churn) Readded() Ops {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.readded
}

func (c *Churn) deleteSeen(k churnKey) {
	if c == nil {
		return
	}
	c.mu.Lock()
	c.deleted[k] = struct{}{}
	c.mu.Unlock()
}

func (c *Churn) addSeen(k churnKey) {
	if c == nil {
		return
	}
	c.mu.Lock()
	if _, ok := c.deleted[k]; ok {
		delete(c.deleted, k)
		c.readded[k.op]++
	}
	if k.op == OpIPVSDestinationAdd {
		m := c.dests[k.svc]
		m.Set(k.dst, 0)
		c.dests[k.svc] = m
	}
	c.mu.Unlock()
}

// destsSeen records a virtual server's real servers as the kernel listed them.
func (c *Churn) destsSeen(svc ServiceKey, rs []RealServer) {
	if c == nil {
		return
	}
	var m Dests
	for _, r := range rs {
		m.Set(r.AddrPort(), 0)
	}
	c.mu.Lock()
	c.dests[svc] = m
	c.mu.Unlock()
}

// destDeleted forgets one real server, deleted by itself.
func (c *Churn) destDeleted(svc ServiceKey, d netip.AddrPort) {
	if c == nil {
		return
	}
	c.mu.Lock()
	c.deleted[churnKey{op: OpIPVSDestinationAdd, svc: svc, dst: d}] = struct{}{}
	if m, ok := c.dests[svc]; ok {
		m.Delete(d)
		c.dests[svc] = m
	}
	c.mu.Unlock()
}

// serviceDeleted records a virtual server's delete and, with it, the delete
// of every real server known to be in it: the kernel removes them together.
func (c *Churn) serviceDeleted(svc ServiceKey) {
	if c == nil {
		return
	}
	c.mu.Lock()
	c.deleted[churnKey{op: OpIPVSServiceAdd, svc: svc}] = struct{}{}
	m := c.dests[svc]
	for d := range m.All() {
		c.deleted[churnKey{op: OpIPVSDestinationAdd, svc: svc, dst: d}] = struct{}{}
	}
	delete(c.dests, svc)
	c.mu.Unlock()
}

// Count wraps dp so that every operation is counted in the returned Counter
// and every delete/add pair is reported to churn (which may be nil).
// Operations are counted when issued, whether or not they succeed: a failed
// write still cost a kernel round trip.
func Count(dp Dataplane, churn *Churn) (Dataplane, *Counter) {
	c := &Counter{churn: churn}
	out := dp
	out.IPVS = countedIPVS{dp.IPVS, c}
	out.IPSet = countedIPSet{dp.IPSet, c}
	out.IPTables = countedIPTables{dp.IPTables, c}
	out.Links = countedLinks{dp.Links, c}
	out.Sysctls = countedSysctls{dp.Sysctls, c}
	out.Conntrack = countedConntrack{dp.Conntrack, c}
	if dp.NFTables != nil {
		out.NFTables = countedNFTables{dp.NFTables, c}
	}
	return out, c
}

type countedIPVS struct {
	IPVS
	c *Counter
}

func (w countedIPVS) Service(k ServiceKey) (VirtualServer, error) {
	w.c.ops[OpIPVSList]++
	return w.IPVS.Service(k)
}

func (w countedIPVS) Services() ([]VirtualServer, error) {
	w.c.ops[OpIPVSList]++
	vss, err := w.IPVS.Services()
	if err == nil {
		for _, vs := range vss {
			w.c.churn.destsSeen(vs.ServiceKey, vs.Destinations)
		}
	}
	return vss, err
}

func (w countedIPVS) AddService(s VirtualServer) error {
	w.c.ops[OpIPVSServiceAdd]++
	w.c.churn.addSeen(churnKey{op: OpIPVSServiceAdd, svc: s.ServiceKey})
	return w.IPVS.AddService(s)
}

func (w countedIPVS) UpdateService(s VirtualServer) error {
	w.c.ops[OpIPVSServiceUpdate]++
	return w.IPVS.UpdateService(s)
}

func (w countedIPVS) DeleteService(k ServiceKey) error {
	w.c.ops[OpIPVSServiceDelete]++
	w.c.churn.serviceDeleted(k)
	return w.IPVS.DeleteService(k)
}

func (w countedIPVS) Destinations(k ServiceKey) ([]RealServer, error) {
	w.c.ops[OpIPVSDestinationList]++
	rs, err := w.IPVS.Destinations(k)
	if err == nil {
		w.c.churn.destsSeen(k, rs)
	}
	return rs, err
}

func (w countedIPVS) AddDestination(k ServiceKey, r RealServer) error {
	w.c.ops[OpIPVSDestinationAdd]++
	w.c.churn.addSeen(churnKey{op: OpIPVSDestinationAdd, svc: k, dst: r.AddrPort()})
	return w.IPVS.AddDestination(k, r)
}

func (w countedIPVS) UpdateDestination(k ServiceKey, r RealServer) error {
	w.c.ops[OpIPVSDestinationUpdate]++
	return w.IPVS.UpdateDestination(k, r)
}

func (w countedIPVS) DeleteDestination(k ServiceKey, r RealServer) error {
	w.c.ops[OpIPVSDestinationDelete]++
	w.c.churn.destDeleted(k, r.AddrPort())
	return w.IPVS.DeleteDestination(k, r)
}

type countedIPSet struct {
	IPSet
	c *Counter
}

func (w countedIPSet) Sets() ([]Set, error) {
	w.c.ops[OpIPSetList]++
	return w.IPSet.Sets()
}

func (w countedIPSet) Entries(name string) ([]string, error) {
	w.c.ops[OpIPSetList]++
	return w.IPSet.Entries(name)
}

func (w countedIPSet) CreateSet(s Set) error {
	w.c.ops[OpIPSetCreate]++
	return w.IPSet.CreateSet(s)
}

func (w countedIPSet) DestroySet(name string) error {
	w.c.ops[OpIPSetDestroy]++
	return w.IPSet.DestroySet(name)
}

func (w countedIPSet) Apply(changes []SetChange) error {
	for _, ch := range changes {
		w.c.ops[OpIPSetAdd] += int64(len(ch.Add))
		w.c.ops[OpIPSetDel] += int64(len(ch.Del))
		if w.c.churn != nil {
			for _, e := range ch.Del {
				w.c.churn.deleteSeen(churnKey{op: OpIPSetAdd, name: ch.Set, entry: e})
			}
			for _, e := range ch.Add {
				w.c.churn.addSeen(churnKey{op: OpIPSetAdd, name: ch.Set, entry: e})
			}
		}
	}
	return w.IPSet.Apply(changes)
}

type countedIPTables struct {
	IPTables
	c *Counter
}

func (w countedIPTables) Restore(f Family, payload []byte) error {
	w.c.ops[OpIPTablesRestore]++
	w.c.ops[OpIPTablesRestoreBytes] += int64(len(payload))
	return w.IPTables.Restore(f, payload)
}

func (w countedIPTables) Save(f Family, table string) ([]byte, error) {
	w.c.ops[OpIPTablesSave]++
	return w.IPTables.Save(f, table)
}

func (w countedIPTables) Command(f Family, table string, args ...string) error {
	w.c.ops[OpIPTablesCommand]++
	return w.IPTables.Command(f, table, args...)
}

type countedLinks struct {
	Links
	c *Counter
}

func (w countedLinks) EnsureDummy(name string) (bool, error) {
	created, err := w.Links.EnsureDummy(name)
	if created {
		w.c.ops[OpLinkCreate]++
	}
	return created, err
}

func (w countedLinks) Addresses(link string, f Family) ([]netip.Addr, error) {
	w.c.ops[OpAddressList]++
	return w.Links.Addresses(link, f)
}

func (w countedLinks) AddAddress(link string, p netip.Prefix) error {
	w.c.ops[OpAddressBind]++
	w.c.churn.addSeen(churnKey{op: OpAddressBind, name: link, addr: p})
	return w.Links.AddAddress(link, p)
}

func (w countedLinks) DelAddress(link string, p netip.Prefix) error {
	w.c.ops[OpAddressUnbind]++
	w.c.churn.deleteSeen(churnKey{op: OpAddressBind, name: link, addr: p})
	return w.Links.DelAddress(link, p)
}

func (w countedLinks) LocalAddresses(f Family, exclude ...string) ([]InterfaceAddr, error) {
	w.c.ops[OpAddressList]++
	return w.Links.LocalAddresses(f, exclude...)
}

type countedSysctls struct {
	Sysctls
	c *Counter
}

func (w countedSysctls) SetSysctl(key, value string) error {
	w.c.ops[OpSysctlWrite]++
	return w.Sysctls.SetSysctl(key, value)
}

type countedConntrack struct {
	Conntrack
	c *Counter
}

func (w countedConntrack) Flows(f Family) ([]ConntrackFlow, error) {
	w.c.ops[OpConntrackList]++
	return w.Conntrack.Flows(f)
}

func (w countedConntrack) Delete(f ConntrackFilter) (int, error) {
	n, err := w.Conntrack.Delete(f)
	w.c.ops[OpConntrackDelete] += int64(n)
	return n, err
}

type countedNFTables struct {
	NFTables
	c *Counter
}

func (w countedNFTables) Table(family knftables.Family, name string, options ...knftables.Option) (knftables.Interface, error) {
	t, err := w.NFTables.Table(family, name, options...)
	if err != nil {
		return nil, err
	}
	return countedNFTTable{t, w.c, slices.Contains(options, knftables.UseNetlink)}, nil
}

// countedNFTTable counts what a sync issues: its transactions and its
// listings (of names: with nft, or over netlink; of one set's or map's
// elements). Check, ListAll, ListRules and ListCounters, which kube-proxy
// calls only in its cleanup and its failure logging, are not counted.
type countedNFTTable struct {
	knftables.Interface
	c       *Counter
	netlink bool
}

func (w countedNFTTable) Run(ctx context.Context, tx *knftables.Transaction) error {
	w.c.ops.NFTTransaction(tx)
	return w.Interface.Run(ctx, tx)
}

func (w countedNFTTable) List(ctx context.Context, objectType string) ([]string, error) {
	if w.netlink {
		w.c.ops[OpNFTListNetlink]++
	} else {
		w.c.ops[OpNFTList]++
	}
	return w.Interface.List(ctx, objectType)
}

func (w countedNFTTable) ListElements(ctx context.Context, objectType, name string) ([]*knftables.Element, error) {
	w.c.ops[OpNFTListElements]++
	return w.Interface.ListElements(ctx, objectType, name)
}
