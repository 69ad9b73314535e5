package proxier

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/types"

	"github.com/kpsim/kpsim/dataplane"
)

// apply-changes folds the handlers' changes into the proxier's knowledge
// and recomputes what the changed services want: every service on the
// first sync and whenever the node's addresses, IP or zone changed (what
// every service's wants may depend on), only the changed ones otherwise. A
// full sync re-reads the node and verifies the kernel against every
// service's wants; wants that nothing changed need no recomputing.
func (s *syncRun) applyChanges() {
	p := s.p
	p.mu.Lock()
	ch := p.pending
	p.pending = newChanges()
	nodeIP, zone := p.nodeIP, p.nodeZone
	p.mu.Unlock()
	p.recomputed = dataplane.Work{}
	defer func() { s.work(p.recomputed) }()

	if len(p.services) == 0 && len(ch.services) > 0 {
		// The initial list: size the maps once instead of growing them.
		p.services = make(map[types.NamespacedName]*parsedService, len(ch.services))
	}
	if len(p.sliceSvc) == 0 && len(ch.slices) > 0 {
		p.slices = make(map[types.NamespacedName][]namedSlice, len(ch.slices))
		p.sliceSvc = make(map[types.NamespacedName]types.NamespacedName, len(ch.slices))
	}
	dirty := map[types.NamespacedName]bool{}
	mark := func(k types.NamespacedName) { dirty[k] = true }
	for key, svc := range ch.services {
		old, had := p.services[key]
		if svc == nil {
			if !had {
				continue
			}
			delete(p.services, key)
		} else {
			if had && old.resourceVersion != "" && old.resourceVersion == svc.resourceVersion {
				continue
			}
			p.services[key] = svc
		}
		mark(key)
	}
	for key, sc := range ch.slices {
		svc := sc.service
		changed := false
		if old, ok := p.sliceSvc[key]; ok {
			// Drop the slice's old contribution (its service label may have changed).
			if rest := removeSlice(p.slices[old], key.Name); len(rest) == 0 {
				delete(p.slices, old)
			} else {
				p.slices[old] = rest
			}
			delete(p.sliceSvc, key)
			mark(old)
			changed = old == svc
		}
		if sc.endpoints != nil {
			p.slices[svc] = addSlice(p.slices[svc], namedSlice{key.Name, sc.endpoints})
			p.sliceSvc[key] = svc
			mark(svc)
			changed = true
		}
		if !sc.trigger.IsZero() && changed {
			p.programmed = append(p.programmed, pendingProgrammed{object: key.String(), trigger: sc.trigger})
		}
	}

	nodeChanged := false
	if s.full || !p.nodeKnown {
		changed, err := p.readNode(nodeIP, zone)
		if err != nil {
			s.fail(err)
			// Without the node's addresses the NodePort wants are incomplete:
			// removing what they do not cover would be removing live state.
			s.fullPicture = false
		}
		nodeChanged = changed
	} else if ch.node && (nodeIP != p.node.nodeIP || zone != p.node.zone) {
		p.node.nodeIP, p.node.zone = nodeIP, zone
		nodeChanged = true
	}

	if !p.built || s.full && nodeChanged {
		// Rebuild every service's wants from scratch: on the first sync, and
		// when node addresses may have moved under NodePorts and external IPs.
		p.built = true
		old := p.ports
		p.resetDesired(len(p.services))
		p.ports = make(map[types.NamespacedName][]*portState, len(p.services))
		p.tracking = false
		defer func() { p.tracking = true }()
		for key := range p.services {
			p.recompute(key, old[key], false)
		}
		for key, st := range old {
			if _, ok := p.services[key]; !ok {
				p.queueConntrack(st, nil, false)
			}
		}
		return
	}
	if nodeChanged {
		// The node's address decides load balancer source-range entries,
		// its zone the endpoints of topology-aware services: every service
		// is worth a look.
		for k := range p.ports {
			dirty[k] = true
		}
	}
	keys := make([]types.NamespacedName, 0, len(dirty))
	for k := range dirty {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].String() < keys[j].String() })
	for _, k := range keys {
		old := p.ports[k]
		for _, st := range old {
			p.release(st)
		}
		p.recompute(k, old, true)
	}
}

// readNode reads the node's addresses from the kernel and reports whether
// the node, as the wants see it, changed.
func (p *Proxier) readNode(nodeIP netip.Addr, zone string) (changed bool, err error) {
	addrs, err := p.dp.Links.LocalAddresses(p.family, dataplane.DummyLink)
	if err != nil {
		return false, fmt.Errorf("list local %s addresses: %w", p.family, err)
	}
	n := nodeInfo{localAddrs: map[netip.Addr]bool{}, nodeIP: nodeIP, zone: zone}
	for _, ia := range addrs {
		a := ia.Prefix.Addr().Unmap()
		if dataplane.FamilyOf(a) != p.family {
			continue
		}
		n.localAddrs[a] = true
		if p.nodePortIP(a) {
			n.nodePortIPs = append(n.nodePortIPs, a)
		}
	}
	slices.SortFunc(n.nodePortIPs, netip.Addr.Compare)
	n.nodePortIPs = slices.Compact(n.nodePortIPs)
	changed = !p.nodeKnown || n.nodeIP != p.node.nodeIP || n.zone != p.node.zone ||
		!slices.Equal(n.nodePortIPs, p.node.nodePortIPs) || !maps.Equal(n.localAddrs, p.node.localAddrs)
	p.node = n
	p.nodeKnown = true
	return changed, nil
}

// nodePortIP reports whether NodePort virtual servers listen on a: never
// on loopback (kube-proxy v1.37 drops loopback addresses from the node
// addresses it lists, so 127.0.0.1:NODEPORT and [::1]:NODEPORT are not
// served in IPVS mode); without nodePortAddresses (or with a /0 of the
// family) on every other node address but IPv6 link-local ones, as its
// netlink handle lists them; with them on every address they contain.
func (p *Proxier) nodePortIP(a netip.Addr) bool {
	if a.IsLoopback() {
		return false
	}
	if len(p.nodePortNets) == 0 {
		return !(a.Is6() && a.IsLinkLocalUnicast())
	}
	for _, n := range p.nodePortNets {
		if n.Contains(a) {
			return true
		}
	}
	return false
}

// recompute derives a service's port states afresh and claims what they
// want (the caller has released the old ones, or reset everything), noting
// stale UDP flows against old. newcomers says whether a service port that
// did not exist before may have had blackholed flows (not on a full rebuild,
// where "not known before" only means the proxier just started).
func (p *Proxier) recompute(key types.NamespacedName, old []*portState, newcomers bool) {
	var fresh []*portState
	var ports []servicePort
	if ps := p.services[key]; ps != nil {
		ports = ps.ports
	}
	for _, sp := range ports {
		eps := mergeEndpoints(p.slices[key], portKey(sp.port, sp.protocol))
		fresh = append(fresh, p.computePort(sp, eps, &p.node))
		p.recomputed.Derived++
		p.recomputed.Endpoints += len(eps)
	}
	for _, st := range fresh {
		p.claim(st)
	}
	if len(fresh) == 0 {
		delete(p.ports, key)
	} else {
		p.ports[key] = fresh
	}
	p.queueConntrack(old, fresh, newcomers)
}

func byPortName(a, b *portState) int { return strings.Compare(a.sp.name, b.sp.name) }

func (p *Proxier) claim(st *portState) {
	for _, v := range st.vss {
		k := v.vs.ServiceKey
		owners := p.claims[k]
		if i, found := slices.BinarySearchFunc(owners, st, byPortName); !found {
			p.claims[k] = slices.Insert(owners, i, st)
		}
		if p.tracking {
			p.touchedVS[k] = struct{}{}
		}
	}
	for _, e := range st.entries {
		p.entryRef[e.set][e.entry]++
		if p.tracking {
			p.touchedEntries[e.set][e.entry] = struct{}{}
		}
	}
	for _, a := range st.binds {
		p.addrRef[a]++
		if p.tracking {
			p.touchedAddrs[a] = struct{}{}
		}
	}
	for _, r := range st.outFilter {
		p.outFilter[r]++
	}
	p.numPorts++
	p.numEndpoints += st.endpoints
}

func (p *Proxier) release(st *portState) {
	for _, v := range st.vss {
		k := v.vs.ServiceKey
		owners := p.claims[k]
		if i, found := slices.BinarySearchFunc(owners, st, byPortName); found {
			owners = slices.Delete(owners, i, i+1)
		}
		if len(owners) == 0 {
			delete(p.claims, k)
		} else {
			p.claims[k] = owners
		}
		p.touchedVS[k] = struct{}{}
	}
	for _, e := range st.entries {
		if p.entryRef[e.set][e.entry]--; p.entryRef[e.set][e.entry] <= 0 {
			delete(p.entryRef[e.set], e.entry)
		}
		p.touchedEntries[e.set][e.entry] = struct{}{}
	}
	for _, a := range st.binds {
		if p.addrRef[a]--; p.addrRef[a] <= 0 {
			delete(p.addrRef, a)
		}
		p.touchedAddrs[a] = struct{}{}
	}
	for _, r := range st.outFilter {
		if p.outFilter[r]--; p.outFilter[r] <= 0 {
			delete(p.outFilter, r)
		}
	}
	p.numPorts--
	p.numEndpoints -= st.endpoints
}

// wantVS returns the virtual server that the claimant whose name sorts first wants at k.
func (p *Proxier) wantVS(k dataplane.ServiceKey) (vsWant, bool) {
	owners := p.claims[k]
	if len(owners) == 0 {
		return vsWant{}, false
	}
	for _, v := range owners[0].vss {
		if v.vs.ServiceKey == k {
			return v, true
		}
	}
	return vsWant{}, false
}

// queueConntrack notes the UDP flows kube-proxy clears: flows of removed
// endpoints, and flows to a service address that had no endpoint (packets
// the kernel blackholed keep their conntrack entry and would stick).
func (p *Proxier) queueConntrack(old, fresh []*portState, newcomers bool) {
	byName := map[string]*portState{}
	for _, st := range old {
		byName[st.sp.name] = st
	}
	for _, st := range fresh {
		prev := byName[st.sp.name]
		if st.sp.protocol != dataplane.UDP {
			continue
		}
		if prev == nil || !prev.hasDests() {
			if st.hasDests() && (prev != nil || newcomers) {
				for _, v := range st.vss {
					p.conntrackWork = append(p.conntrackWork, dataplane.ConntrackFilter{
						Protocol: dataplane.UDP, OrigDst: v.vs.Address, OrigDstPort: v.vs.Port})
				}
			}
			continue
		}
		p.staleFlows(prev, st.destSet())
		delete(byName, st.sp.name)
	}
	for _, prev := range byName {
		if prev.sp.protocol == dataplane.UDP {
			p.staleFlows(prev, nil)
		}
	}
}

func (p *Proxier) staleFlows(prev *portState, now map[netip.AddrPort]bool) {
	for d := range prev.destSet() {
		if now[d] {
			continue
		}
		for _, v := range prev.vss {
			p.conntrackWork = append(p.conntrackWork, dataplane.ConntrackFilter{
				Protocol: dataplane.UDP, OrigDst: v.vs.Address, OrigDstPort: v.vs.Port,
				ReplySrc: d.Addr(), ReplySrcPort: d.Port()})
		}
	}
}
