package proxier

import (
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kpsim/kpsim/dataplane"
	"github.com/kpsim/kpsim/internal/k8sapi"
	"github.com/kpsim/kpsim/objects"
)

// annotationTriggerTime is when the change to a slice was triggered; kube-proxy measures network programming latency from it.
const annotationTriggerTime = v1.EndpointsLastChangeTriggerTime

// changes is what the handlers have reported since the last sync, merged per
// object: only the latest version of each object is kept, so an add followed
// by a delete before a sync leaves a nil that matches what the proxier
// already knows (nothing), and the sync sees no change.
// Objects are converted in the handler (as kube-proxy's change trackers
// do), so a sync starts from the proxier's own types.
type changes struct {
	services map[types.NamespacedName]*parsedService // nil: deleted, skipped, or not of this family
	slices   map[types.NamespacedName]*sliceChange
	node     bool
}

type parsedService struct {
	resourceVersion string
	ports           []servicePort
}

type sliceChange struct {
	endpoints sliceEndpoints // nil: deleted, or not of this family
	service   types.NamespacedName
	trigger   time.Time // the earliest last-change-trigger-time among the merged events
}

func newChanges() changes {
	return changes{services: map[types.NamespacedName]*parsedService{}, slices: map[types.NamespacedName]*sliceChange{}}
}

// sliceTracker is what the EndpointSlice handlers remember across syncs, as
// kube-proxy's endpoints change tracker does, so that network programming
// latency counts only the changes this proxier was late to program.
type sliceTracker struct {
	// start is when the proxier started. A change made before it (the
	// initial list after a restart carries hours-old trigger times) is not
	// this proxier's latency: kube-proxy counts a trigger time only when it
	// is after its tracker started.
	start time.Time
	// seen is what each slice last said to this proxier. A relist or a
	// resync delivers unchanged objects again, and an update may touch only
	// fields kube-proxy ignores (the trigger time annotation itself): none is
	// a change, to be synced or to be reported.
	seen map[types.NamespacedName]seenSlice
}

type seenSlice struct {
	service   types.NamespacedName
	endpoints sliceEndpoints
}

func newSliceTracker(start time.Time) sliceTracker {
	return sliceTracker{start: start, seen: map[types.NamespacedName]seenSlice{}}
}

// record merges one EndpointSlice event (ch, with the slice's trigger time;
// a deletion has no endpoints) into pending and reports whether it is a
// change. Merged events keep the earliest trigger time that counts.
func (t *sliceTracker) record(pending *changes, key types.NamespacedName, ch *sliceChange, trigger time.Time, deleted bool) bool {
	old, known := t.seen[key]
	if deleted {
		delete(t.seen, key)
	} else {
		t.seen[key] = seenSlice{ch.service, ch.endpoints}
	}
	if known && old.service == ch.service && old.endpoints.equal(ch.endpoints) {
		return false
	}
	if !trigger.After(t.start) {
		trigger = time.Time{}
	}
	if prev, ok := pending.slices[key]; ok && !prev.trigger.IsZero() && (trigger.IsZero() || prev.trigger.Before(trigger)) {
		trigger = prev.trigger
	}
	ch.trigger = trigger
	pending.slices[key] = ch
	return true
}

// servicePort is one port of a service as one family's proxier sees it.
type servicePort struct {
	name            string // namespace/name:port
	port            string // the port's name, to match EndpointSlice ports
	protocol        dataplane.Protocol
	clusterIP       netip.Addr
	portNum         uint16
	nodePort        uint16
	externalIPs     []netip.Addr
	lbIPs           []netip.Addr
	sourceRanges    []netip.Prefix
	affinityTimeout uint32 // 0: no session affinity
	externalLocal   bool
	internalLocal   bool
	healthCheckPort uint16
}

// servicePorts converts a Service into the family's service ports, or nil
// when the family has no cluster IP for it.
func servicePorts(svc *v1.Service, f dataplane.Family) []servicePort {
	if svc == nil || objects.ServiceIgnored(svc) != "" {
		return nil
	}
	clusterIP := objects.ClusterIP(svc, v1.IPFamily(f))
	if !clusterIP.IsValid() {
		return nil
	}
	base := servicePort{clusterIP: clusterIP}
	for _, s := range svc.Spec.ExternalIPs {
		if a, err := netip.ParseAddr(s); err == nil && dataplane.FamilyOf(a) == f {
			base.externalIPs = append(base.externalIPs, a.Unmap())
		}
	}
	if svc.Spec.Type == v1.ServiceTypeLoadBalancer {
		for _, ing := range svc.Status.LoadBalancer.Ingress {
			if ing.IP == "" || (ing.IPMode != nil && *ing.IPMode == v1.LoadBalancerIPModeProxy) {
				continue // hostname-only or proxy-mode ingress: the load balancer does the work
			}
			if a, err := netip.ParseAddr(ing.IP); err == nil && dataplane.FamilyOf(a) == f {
				base.lbIPs = append(base.lbIPs, a.Unmap())
			}
		}
	}
	for _, s := range svc.Spec.LoadBalancerSourceRanges {
		p, err := netip.ParsePrefix(strings.TrimSpace(s)) // the API server lets padding through
		if err != nil || dataplane.FamilyOf(p.Addr()) != f {
			continue // other-family ranges are dropped
		}
		p = p.Masked()
		if p.Bits() == 0 {
			base.sourceRanges = nil // open to everyone: no ranges at all
			break
		}
		base.sourceRanges = append(base.sourceRanges, p)
	}
	if svc.Spec.SessionAffinity == v1.ServiceAffinityClientIP {
		base.affinityTimeout = uint32(v1.DefaultClientIPServiceAffinitySeconds)
		if c := svc.Spec.SessionAffinityConfig; c != nil && c.ClientIP != nil && c.ClientIP.TimeoutSeconds != nil {
			base.affinityTimeout = uint32(*c.ClientIP.TimeoutSeconds)
		}
	}
	base.externalLocal = objects.ExternallyAccessible(svc) && svc.Spec.ExternalTrafficPolicy == v1.ServiceExternalTrafficPolicyLocal
	base.internalLocal = svc.Spec.InternalTrafficPolicy != nil && *svc.Spec.InternalTrafficPolicy == v1.ServiceInternalTrafficPolicyLocal
	if svc.Spec.Type == v1.ServiceTypeLoadBalancer && base.externalLocal {
		base.healthCheckPort = uint16(svc.Spec.HealthCheckNodePort)
	}
	out := make([]servicePort, 0, len(svc.Spec.Ports))
	for _, p := range svc.Spec.Ports {
		sp := base
		sp.name = svc.Namespace + "/" + svc.Name + ":" + p.Name
		sp.port = p.Name
		sp.protocol = dataplane.Protocol(p.Protocol)
		if sp.protocol == "" {
			sp.protocol = dataplane.TCP
		}
		sp.portNum = uint16(p.Port)
		if svc.Spec.Type == v1.ServiceTypeNodePort || svc.Spec.Type == v1.ServiceTypeLoadBalancer {
			sp.nodePort = uint16(p.NodePort)
		}
		out = append(out, sp)
	}
	return out
}

// endpoint is one address:port of a service port.
type endpoint struct {
	addr        netip.AddrPort
	local       bool
	ready       bool
	serving     bool
	terminating bool
	// Topology hints the EndpointSlice controller set (hintSet form).
	zoneHints, nodeHints string
}

// hintSet is a set of hint names as one comparable string: each name
// prefixed with a NUL, sorted. "" is no hint; a hint may be "".
func hintSet(names []string) string {
	if len(names) == 0 {
		return ""
	}
	names = slices.Compact(slices.Sorted(slices.Values(names)))
	return "\x00" + strings.Join(names, "\x00")
}

func hasHint(set, name string) bool {
	return set != "" && strings.Contains(set+"\x00", "\x00"+name+"\x00")
}

// sliceEndpoints keeps, per port name and protocol (portKey), the endpoints
// one slice contributes, sorted by key: a port the slice names has its entry
// even when none of its endpoints is of the family. Pairs in a slice, not a
// map: a slice has one port or a few, and a map of one entry takes some 400
// bytes, 20 MB at 50,000 slices, kept for every slice as long as it lives.
type sliceEndpoints []portEndpoints

type portEndpoints struct {
	key       string
	endpoints []endpoint
}

func portKey(name string, p dataplane.Protocol) string { return name + "/" + string(p) }

// get returns the endpoints of port key; nil when the slice has none.
func (a sliceEndpoints) get(key string) []endpoint {
	if i, ok := slices.BinarySearchFunc(a, key, func(p portEndpoints, k string) int { return strings.Compare(p.key, k) }); ok {
		return a[i].endpoints
	}
	return nil
}

// equal reports whether two parses of a slice are the same for the proxier;
// nil (not of this family, or deleted) equals only nil.
func (a sliceEndpoints) equal(b sliceEndpoints) bool {
	return (a == nil) == (b == nil) && slices.EqualFunc(a, b, func(x, y portEndpoints) bool {
		return x.key == y.key && slices.Equal(x.endpoints, y.endpoints)
	})
}

// parseSlice extracts a slice's endpoints for the family; ok is false when the
// slice is not the family's (or not kube-proxy's to read).
func parseSlice(s *discoveryv1.EndpointSlice, f dataplane.Family, node string) (sliceEndpoints, bool) {
	want := discoveryv1.AddressTypeIPv4
	if f == dataplane.IPv6 {
		want = discoveryv1.AddressTypeIPv6
	}
	if s.AddressType != want {
		return nil, false
	}
	out := sliceEndpoints{}
	for _, p := range objects.SlicePorts(s) {
		// Sized for every endpoint (those of the family, usually all): the
		// slice is kept as long as the EndpointSlice lives.
		eps := make([]endpoint, 0, len(s.Endpoints))
		for i := range s.Endpoints {
			e := &s.Endpoints[i]
			a, ok := objects.EndpointAddress(e)
			if !ok || dataplane.FamilyOf(a) != f {
				continue
			}
			ep := endpoint{
				addr:  netip.AddrPortFrom(a, p.Port),
				local: e.NodeName != nil && *e.NodeName == node,
			}
			ep.ready, ep.serving, ep.terminating = objects.ProxyConditions(e.Conditions)
			if h := e.Hints; h != nil {
				var zones []string
				for _, z := range h.ForZones {
					zones = append(zones, z.Name)
				}
				ep.zoneHints, ep.nodeHints = hintSet(zones), hintSet(k8sapi.NodeHints(h))
			}
			eps = append(eps, ep)
		}
		if len(eps) == 0 {
			eps = nil
		}
		k := portKey(p.Name, dataplane.Protocol(p.Protocol))
		if i, found := slices.BinarySearchFunc(out, k, func(p portEndpoints, k string) int { return strings.Compare(p.key, k) }); found {
			out[i].endpoints = append(out[i].endpoints, eps...) // two ports of one name and protocol
		} else {
			out = slices.Insert(out, i, portEndpoints{k, eps})
		}
	}
	return out, true
}

// triggerTime parses a slice's last-change-trigger-time annotation.
func triggerTime(s *discoveryv1.EndpointSlice) time.Time {
	v, ok := s.Annotations[annotationTriggerTime]
	if !ok {
		return time.Time{}
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return time.Time{}
	}
	return t
}

// namedSlice is one EndpointSlice's contribution to its service.
type namedSlice struct {
	name      string
	endpoints sliceEndpoints
}

func sliceIndex(ss []namedSlice, name string) (int, bool) {
	return slices.BinarySearchFunc(ss, name, func(s namedSlice, n string) int { return strings.Compare(s.name, n) })
}

// addSlice inserts or replaces a slice, keeping ss sorted by name.
func addSlice(ss []namedSlice, s namedSlice) []namedSlice {
	i, found := sliceIndex(ss, s.name)
	if found {
		ss[i] = s
		return ss
	}
	return slices.Insert(ss, i, s)
}

func removeSlice(ss []namedSlice, name string) []namedSlice {
	if i, found := sliceIndex(ss, name); found {
		return slices.Delete(ss, i, i+1)
	}
	return ss
}

// mergeEndpoints joins a service's slices for one port in slice-name order,
// one endpoint per address. A later copy of an address replaces an earlier
// one unless it is terminating: kube-proxy's endpoints cache prefers the
// running pod when a terminating pod's IP is reused (between two slices its
// order is map order; kpsim's is slice names).
func mergeEndpoints(ss []namedSlice, key string) []endpoint {
	if len(ss) == 1 {
		return dedupe(ss[0].endpoints.get(key))
	}
	var out []endpoint
	for _, s := range ss {
		out = append(out, s.endpoints.get(key)...)
	}
	return dedupe(out)
}

// dedupe keeps one endpoint per address, by mergeEndpoints' rule.
func dedupe(eps []endpoint) []endpoint {
	if len(eps) <= 16 {
		for i := 1; i < len(eps); i++ {
			for j := range i {
				if eps[j].addr == eps[i].addr {
					return dedupeMap(eps)
				}
			}
		}
		return eps
	}
	return dedupeMap(eps)
}

func dedupeMap(eps []endpoint) []endpoint {
	out := make([]endpoint, 0, len(eps))
	at := make(map[netip.AddrPort]int, len(eps))
	for _, e := range eps {
		i, seen := at[e.addr]
		switch {
		case !seen:
			at[e.addr] = len(out)
			out = append(out, e)
		case !e.terminating:
			out[i] = e
		}
	}
	return out
}

// externallyAccessible reports whether the port takes traffic from outside
// the cluster in its family: a node port, an external IP or a
// load-balancer IP of it.
func (sp *servicePort) externallyAccessible() bool {
	return sp.nodePort != 0 || len(sp.externalIPs) > 0 || len(sp.lbIPs) > 0
}

// categorize splits a service port's endpoints as kube-proxy's
// CategorizeEndpoints does. cluster is what the Cluster policy uses: ready
// endpoints (only those topology-aware routing picks for this node, see
// topologyMode), or serving terminating ones, whatever their hints, when
// none is ready anywhere; nil when the port never uses the Cluster policy
// (internalTrafficPolicy Local and not reachable from outside). local is
// what a Local policy uses: this node's ready endpoints, else its serving
// terminating ones; nil when no policy of the port is Local. A virtual
// server whose policy is Local takes local, or cluster when local is empty
// (endpoints says how).
func categorize(sp *servicePort, eps []endpoint, node, zone string) (cluster, local []endpoint) {
	usesLocal := sp.internalLocal || sp.externalLocal && sp.externallyAccessible()
	usesCluster := !sp.internalLocal || sp.externallyAccessible()
	if !usesLocal && allReadyUnhinted(eps) {
		return eps, nil // the common case: nothing to filter
	}
	byNode, byZone := topologyMode(eps, node, zone)
	pick := func(localOnly bool) []endpoint {
		var ready, term []endpoint
		for _, e := range eps {
			if localOnly && !e.local {
				continue
			}
			if e.ready {
				if !localOnly && (byNode && !hasHint(e.nodeHints, node) || byZone && !hasHint(e.zoneHints, zone)) {
					continue
				}
				ready = append(ready, e)
			} else if e.serving && e.terminating {
				term = append(term, e)
			}
		}
		if len(ready) > 0 {
			return ready
		}
		return term
	}
	if usesCluster {
		cluster = pick(false)
	}
	if usesLocal {
		local = pick(true)
	}
	return cluster, local
}

// topologyMode is kube-proxy v1.37's topology-aware routing, decided from
// the hints on the ready endpoints alone (the EndpointSlice controller sets
// them from the service's trafficDistribution or topology-mode annotation):
// byNode (PreferSameNode) when every ready endpoint has a node hint and one
// names this node; else byZone (PreferSameZone, and topology-aware hints)
// when every ready endpoint has a zone hint and one names this node's zone
// (topology.kubernetes.io/zone; a node without the label has none); else
// neither, and every ready endpoint is used.
func topologyMode(eps []endpoint, node, zone string) (byNode, byZone bool) {
	anyReady, allNode, forNode, allZone, forZone := false, true, false, true, false
	for _, e := range eps {
		if !e.ready {
			continue
		}
		anyReady = true
		if e.nodeHints == "" {
			allNode = false
		} else if hasHint(e.nodeHints, node) {
			forNode = true
		}
		if e.zoneHints == "" {
			allZone = false
		} else if hasHint(e.zoneHints, zone) {
			forZone = true
		}
	}
	switch {
	case !anyReady:
		return false, false
	case allNode && forNode:
		return true, false
	default:
		return false, allZone && forZone
	}
}

// endpoints are the endpoints of a virtual server whose traffic policy is
// Local (onlyLocal) or Cluster. With Local and no local endpoint, a port
// reachable from outside falls back to its cluster endpoints, so that this
// node's pods still reach the service (kubernetes PR #97081); a port only
// reachable inside the cluster has none then, and its traffic is dropped.
func endpoints(cluster, local []endpoint, onlyLocal bool) []endpoint {
	if onlyLocal && len(local) > 0 {
		return local
	}
	return cluster
}

func allReadyUnhinted(eps []endpoint) bool {
	for _, e := range eps {
		if !e.ready || e.zoneHints != "" || e.nodeHints != "" {
			return false
		}
	}
	return true
}

func entryIPPort(a netip.Addr, p dataplane.Protocol, port uint16) string {
	return a.String() + "," + p.SetProto() + ":" + strconv.Itoa(int(port))
}
