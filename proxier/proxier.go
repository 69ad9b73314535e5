// Package proxier is an IPVS proxier with kube-proxy's semantics: it turns
// Services, EndpointSlices and the Node into IPVS virtual servers, ipsets,
// iptables rules and addresses on kube-ipvs0, through the small interfaces
// of dataplane.
//
// Unlike upstream, a sync does only the kernel work its changes require:
// the proxier keeps a model of what it has programmed, recomputes only the
// services whose objects changed, and reads the kernel back only on full
// syncs (the first one and every SyncPeriod), where it repairs drift.
package proxier

import (
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"github.com/kpsim/kpsim/dataplane"
	"github.com/kpsim/kpsim/objects"
	"github.com/kpsim/kpsim/record"
)

// Proxier programs one IP family of one node.
type Proxier struct {
	cfg     Config
	opts    Options
	family  dataplane.Family
	dp      dataplane.Dataplane // counted
	counter *dataplane.Counter
	clock   clock.WithTicker
	killed  <-chan struct{} // closed when the run stops the proxier (Run's ctx)
	runner  *runner

	excludeCIDRs []netip.Prefix
	clusterCIDR  netip.Prefix
	nodePortNets []netip.Prefix

	// mu guards what handlers write: pending changes and the initial-sync flags.
	mu             sync.Mutex
	pending        changes
	servicesSynced bool
	slicesSynced   bool
	nodeZone       string     // the Node's topology.kubernetes.io/zone label, the one label kube-proxy reads
	nodeIP         netip.Addr // kube-proxy's node IP of the family: see nodeIPOf
	slicesSeen     sliceTracker

	// syncMu serializes syncs; everything below belongs to the sync.
	syncMu sync.Mutex
	seq    int
	state
}

// state is the proxier's knowledge: the objects it has been told about, what
// each service port wants, and what it believes the kernel holds.
type state struct {
	services  map[types.NamespacedName]*parsedService
	slices    map[types.NamespacedName][]namedSlice         // service -> its slices, sorted by name
	sliceSvc  map[types.NamespacedName]types.NamespacedName // slice -> its service
	ports     map[types.NamespacedName][]*portState         // what each service wants, as applied
	node      nodeInfo
	nodeKnown bool
	// built: every service's wants have been computed once (the first
	// sync); from then on they are kept up to date change by change.
	built bool

	// Desired state, aggregated over service ports with reference counts
	// because several ports share addresses, entries and even virtual servers.
	claims    map[dataplane.ServiceKey][]*portState // sorted by service port name
	entryRef  [numSets]map[string]int
	addrRef   map[netip.Addr]int
	outFilter map[string]int

	// Totals over ports, for the sync record.
	numPorts, numEndpoints int

	// What this sync must look at (incremental syncs only; a full rebuild
	// looks at everything and leaves tracking off).
	tracking       bool
	touchedVS      map[dataplane.ServiceKey]struct{}
	touchedEntries [numSets]map[string]struct{}
	touchedAddrs   map[netip.Addr]struct{}
	conntrackWork  []dataplane.ConntrackFilter
	programmed     []pendingProgrammed
	recomputed     dataplane.Work // what apply-changes recomputed, priced as the proxier's work

	kernel   kernelModel
	draining map[drainKey]time.Time // real servers at weight 0, and when to check them next
	needFull bool
}

type pendingProgrammed struct {
	object  string
	trigger time.Time
}

type drainKey struct {
	vs   dataplane.ServiceKey
	dest netip.AddrPort
}

// kernelModel is what the proxier believes the kernel holds for its family.
type kernelModel struct {
	vs      map[dataplane.ServiceKey]*kernelVS
	entries [numSets]map[string]struct{}
	addrs   map[netip.Addr]bool
	setsOK  bool
	linkOK  bool
	rules   []byte // the iptables payload (without jump inserts) known to be in the kernel
}

type kernelVS struct {
	vs    dataplane.VirtualServer
	dests dataplane.Dests // weights
}

// New creates a proxier for one family. dp is wrapped once with
// dataplane.Count so every phase can report the operations it issued.
func New(cfg Config, family dataplane.Family, dp dataplane.Dataplane, opts Options) (*Proxier, error) {
	cfg = cfg.Defaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("proxier config: %w", err)
	}
	if family != dataplane.IPv4 && family != dataplane.IPv6 {
		return nil, fmt.Errorf("proxier: unknown IP family %q", family)
	}
	p := &Proxier{cfg: cfg, opts: opts, family: family, clock: opts.Clock}
	if p.clock == nil {
		p.clock = clock.RealClock{}
	}
	p.dp, p.counter = dataplane.Count(dp, opts.Churn)
	for _, c := range cfg.ExcludeCIDRs {
		if pr, err := netip.ParsePrefix(c); err == nil && dataplane.FamilyOf(pr.Addr()) == family {
			p.excludeCIDRs = append(p.excludeCIDRs, pr.Masked())
		}
	}
	for _, c := range cfg.ClusterCIDRs {
		if pr, err := netip.ParsePrefix(c); err == nil && dataplane.FamilyOf(pr.Addr()) == family {
			p.clusterCIDR = pr.Masked()
		}
	}
	for _, c := range cfg.NodePortAddresses {
		if pr, err := netip.ParsePrefix(c); err == nil && dataplane.FamilyOf(pr.Addr()) == family {
			p.nodePortNets = append(p.nodePortNets, pr.Masked())
		}
	}
	if slices.ContainsFunc(p.nodePortNets, func(n netip.Prefix) bool { return n.Bits() == 0 }) {
		p.nodePortNets = nil // a /0 of the family means every node address, as no setting does
	}
	p.pending = newChanges()
	p.nodeIP = nodeIPOf(nil, family)
	p.slicesSeen = newSliceTracker(p.clock.Now())
	p.services = map[types.NamespacedName]*parsedService{}
	p.slices = map[types.NamespacedName][]namedSlice{}
	p.sliceSvc = map[types.NamespacedName]types.NamespacedName{}
	p.ports = map[types.NamespacedName][]*portState{}
	p.tracking = true
	p.resetDesired(0)
	p.kernel = kernelModel{vs: map[dataplane.ServiceKey]*kernelVS{}, addrs: map[netip.Addr]bool{}}
	for i := range p.kernel.entries {
		p.kernel.entries[i] = map[string]struct{}{}
	}
	p.draining = map[drainKey]time.Time{}
	p.needFull = true
	p.runner = newRunner(func(trigger string) time.Time {
		_, again := p.sync(trigger)
		return again
	}, p.clock, cfg.MinSyncPeriod, cfg.SyncPeriod)
	return p, nil
}

// resetDesired empties the desired aggregates, sized for what they held
// (rehashing maps of 10,000s of entries is a large part of a full sync).
// Every service port has a cluster IP: hint is how many services there are.
func (p *Proxier) resetDesired(hint int) {
	p.claims = make(map[dataplane.ServiceKey][]*portState, max(len(p.claims), hint))
	for i := range p.entryRef {
		n := len(p.entryRef[i])
		if setID(i) == setClusterIP || setID(i) == setIPVSIPs {
			n = max(n, hint)
		}
		p.entryRef[i] = make(map[string]int, n)
	}
	p.addrRef = make(map[netip.Addr]int, max(len(p.addrRef), hint))
	p.outFilter = map[string]int{}
	p.numPorts, p.numEndpoints = 0, 0
	p.resetTouched()
}

func (p *Proxier) resetTouched() {
	p.touchedVS = map[dataplane.ServiceKey]struct{}{}
	for i := range p.touchedEntries {
		p.touchedEntries[i] = map[string]struct{}{}
	}
	p.touchedAddrs = map[netip.Addr]struct{}{}
}

// Family is the proxier's IP family.
func (p *Proxier) Family() dataplane.Family { return p.family }

// ---------------------------------------------------------------------------
// Handlers. They only record the change and ask the runner for a sync; they
// never wait for a sync in progress.

func (p *Proxier) queued() {
	if m := p.opts.Metrics; m != nil {
		m.LastQueuedTimestamp.WithLabelValues(string(p.family)).Set(float64(p.clock.Now().UnixNano()) / 1e9)
	}
	p.runner.Request()
}

func (p *Proxier) serviceChanged(key types.NamespacedName, svc *v1.Service) {
	var ps *parsedService
	if ports := servicePorts(svc, p.family); len(ports) > 0 {
		ps = &parsedService{resourceVersion: svc.ResourceVersion, ports: ports}
	}
	p.mu.Lock()
	p.pending.services[key] = ps
	n := len(p.pending.services)
	p.mu.Unlock()
	if m := p.opts.Metrics; m != nil {
		m.ServiceChangesTot.WithLabelValues(string(p.family)).Inc()
		m.ServiceChangesPend.WithLabelValues(string(p.family)).Set(float64(n))
	}
	p.queued()
}

// OnServiceAdd records a new Service.
func (p *Proxier) OnServiceAdd(svc *v1.Service) { p.OnServiceUpdate(nil, svc) }

// OnServiceUpdate records a Service's new version.
func (p *Proxier) OnServiceUpdate(_, svc *v1.Service) {
	// A service that turns headless or foreign is gone for kube-proxy: servicePorts returns nothing.
	p.serviceChanged(types.NamespacedName{Namespace: svc.Namespace, Name: svc.Name}, svc)
}

// OnServiceDelete records a Service's removal.
func (p *Proxier) OnServiceDelete(svc *v1.Service) {
	p.serviceChanged(types.NamespacedName{Namespace: svc.Namespace, Name: svc.Name}, nil)
}

func (p *Proxier) sliceChanged(s *discoveryv1.EndpointSlice, deleted bool) {
	switch reason, gone := objects.SliceIgnored(s); {
	case gone:
		deleted = true // kube-proxy's informer reports a slice it stops selecting as deleted
	case reason != "":
		return // kube-proxy's endpoints cache drops the event and keeps what it had
	}
	key := types.NamespacedName{Namespace: s.Namespace, Name: s.Name}
	ch := &sliceChange{service: types.NamespacedName{Namespace: s.Namespace, Name: s.Labels[objects.LabelServiceName]}}
	if !deleted {
		ch.endpoints, _ = parseSlice(s, p.family, p.cfg.NodeName)
	}
	p.mu.Lock()
	changed := p.slicesSeen.record(&p.pending, key, ch, triggerTime(s), deleted)
	n := len(p.pending.slices)
	p.mu.Unlock()
	if !changed {
		return
	}
	if m := p.opts.Metrics; m != nil {
		m.EndpointChangesTot.WithLabelValues(string(p.family)).Inc()
		m.EndpointChangesPend.WithLabelValues(string(p.family)).Set(float64(n))
	}
	p.queued()
}

// OnEndpointSliceAdd records a new EndpointSlice.
func (p *Proxier) OnEndpointSliceAdd(s *discoveryv1.EndpointSlice) { p.sliceChanged(s, false) }

// OnEndpointSliceUpdate records an EndpointSlice's new version.
func (p *Proxier) OnEndpointSliceUpdate(_, s *discoveryv1.EndpointSlice) { p.sliceChanged(s, false) }

// OnEndpointSliceDelete records an EndpointSlice's removal.
func (p *Proxier) OnEndpointSliceDelete(s *discoveryv1.EndpointSlice) { p.sliceChanged(s, true) }

// OnNodeAdd records this node's zone and node IP; other nodes are ignored
// (the fake clientset ignores the field selector kube-proxy's informer uses).
func (p *Proxier) OnNodeAdd(n *v1.Node) { p.OnNodeUpdate(nil, n) }

// OnNodeUpdate is OnNodeAdd for a new version.
func (p *Proxier) OnNodeUpdate(_, n *v1.Node) {
	if n.Name == p.cfg.NodeName {
		p.nodeChanged(nodeIPOf(n, p.family), n.Labels[v1.LabelTopologyZone])
	}
}

// OnNodeDelete forgets the node's zone and address: kube-proxy exits
// when its Node goes, and starts again without one.
func (p *Proxier) OnNodeDelete(n *v1.Node) {
	if n.Name == p.cfg.NodeName {
		p.nodeChanged(nodeIPOf(nil, p.family), "")
	}
}

func (p *Proxier) nodeChanged(ip netip.Addr, zone string) {
	p.mu.Lock()
	changed := ip != p.nodeIP || zone != p.nodeZone
	p.nodeIP, p.nodeZone = ip, zone
	if changed {
		p.pending.node = true
	}
	p.mu.Unlock()
	if changed {
		p.queued()
	}
}

// nodeIPOf is kube-proxy's node IP of family f: the Node object's first
// address of the family (objects.NodeAddresses' order), or loopback where
// it has none or there is no Node object, as kube-proxy falls back. It
// decides whether a load balancer's source ranges let the node in.
func nodeIPOf(n *v1.Node, f dataplane.Family) netip.Addr {
	if n != nil {
		for _, a := range objects.NodeAddresses(n) {
			if dataplane.FamilyOf(a) == f {
				return a.Unmap()
			}
		}
	}
	if f == dataplane.IPv6 {
		return netip.IPv6Loopback()
	}
	return netip.AddrFrom4([4]byte{127, 0, 0, 1})
}

// OnServicesSynced tells the proxier its handlers have seen every Service of
// the initial list; with OnEndpointSlicesSynced it completes the full picture
// that stale-state removal waits for.
func (p *Proxier) OnServicesSynced() {
	p.mu.Lock()
	p.servicesSynced = true
	p.mu.Unlock()
}

// OnEndpointSlicesSynced is OnServicesSynced for EndpointSlices.
func (p *Proxier) OnEndpointSlicesSynced() {
	p.mu.Lock()
	p.slicesSynced = true
	p.mu.Unlock()
}

// fullPicture reports whether the proxier may treat what it has not been
// told about as stale. The legacy mode always believes it may: that is the bug.
func (p *Proxier) fullPicture() bool {
	if p.cfg.InitialSync == InitialSyncLegacy {
		return true
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.servicesSynced && p.slicesSynced
}

// Conflicts lists virtual servers that more than one service port maps to,
// as "vs: winner (also: others)". Upstream lets map order decide and may
// flip between syncs; kpsim always gives the virtual server to the service
// port whose name sorts first and reports the rest here (docs/proxier.md:
// "Deliberate differences from kube-proxy").
func (p *Proxier) Conflicts() []string {
	p.syncMu.Lock()
	defer p.syncMu.Unlock()
	var out []string
	for k, owners := range p.claims {
		if len(owners) < 2 {
			continue
		}
		others := make([]string, 0, len(owners)-1)
		for _, o := range owners[1:] {
			others = append(others, o.sp.name)
		}
		out = append(out, fmt.Sprintf("%s: %s (also: %v)", k, owners[0].sp.name, others))
	}
	sort.Strings(out)
	return out
}

// Sync runs one sync now (trigger "changes", or "initial" for the first) and returns its record.
func (p *Proxier) Sync() record.Sync {
	trigger := TriggerChanges
	p.syncMu.Lock()
	if p.seq == 0 {
		trigger = TriggerInitial
	}
	p.syncMu.Unlock()
	rec, _ := p.sync(trigger)
	return rec
}

// SyncFull runs a full sync now, as the periodic verification does.
func (p *Proxier) SyncFull() record.Sync {
	rec, _ := p.sync(TriggerPeriodic)
	return rec
}
