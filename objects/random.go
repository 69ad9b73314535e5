package objects

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/kpsim/kpsim/internal/k8sapi"
)

// Random draws random but valid clusters, and random changes to them, for
// property tests and for the parity check against kube-proxy (upstream/):
// every service type and option kube-proxy's IPVS mode reads, single- and
// dual-stack (either family first), endpoints in every combination of
// conditions (unset ones included) on three nodes or none, topology hints
// for zones and nodes, the same address twice in a slice, objects
// kube-proxy ignores, node addresses used as external IPs, and, rarely, two
// services claiming one external or load-balancer address (a duplicate
// virtual server). Everything follows from the seed.
type Random struct {
	r      *rand.Rand
	fams   []v1.IPFamily // the cluster's families, the primary first
	svcIP  int           // counters for fresh names, addresses and ports
	podIP  int
	extIP  int
	lbIP   int
	port   int32
	object int
	// used are external and load-balancer addresses already handed out,
	// for the rare deliberate duplicate.
	used []string
}

// RandomNodes are the nodes of a random cluster; node-a and node-c share a zone.
var RandomNodes = []string{"node-a", "node-b", "node-c"}

var randomZones = []string{"zone-1", "zone-2", "zone-1"}

// NewRandom returns a generator whose every choice follows from seed.
func NewRandom(seed uint64) *Random {
	g := &Random{r: rand.New(rand.NewPCG(seed, 0x72616e646f6d)), port: 30000}
	switch x := g.r.Float64(); {
	case x < 0.4:
		g.fams = []v1.IPFamily{v1.IPv4Protocol}
	case x < 0.55:
		g.fams = []v1.IPFamily{v1.IPv6Protocol}
	case x < 0.85:
		g.fams = []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol}
	default:
		g.fams = []v1.IPFamily{v1.IPv6Protocol, v1.IPv4Protocol}
	}
	return g
}

func (g *Random) chance(p float64) bool { return g.r.Float64() < p }

func oneOf[T any](g *Random, xs ...T) T { return xs[g.r.IntN(len(xs))] }

// Cluster draws n services with their slices, and (mostly) the Node objects.
// The set is passed through Write and Read, so it is defaulted, validated
// and filtered exactly as an export file would be.
func (g *Random) Cluster(n int) (*Set, error) {
	s := &Set{}
	if !g.chance(0.15) {
		for i := range RandomNodes {
			s.Nodes = append(s.Nodes, g.node(i))
		}
	}
	for range n {
		svc, eps := g.service(fmt.Sprintf("ns-%d", g.r.IntN(4)))
		s.Services = append(s.Services, svc)
		s.EndpointSlices = append(s.EndpointSlices, eps...)
	}
	return reload(s)
}

// Changes draws about n changes against base: services deleted (mostly with
// their slices), endpoints replaced, slices deleted, specs redrawn (type,
// ports, policies; the slices follow), services handed to another proxy,
// new services, and node changes (zone, addresses, deletion).
func (g *Random) Changes(base *Set, n int) (*Set, error) {
	out := &Set{}
	var dels []Deletion
	touched := map[string]bool{}
	slicesOf := map[string][]*discoveryv1.EndpointSlice{}
	for _, eps := range base.EndpointSlices {
		k := eps.Namespace + "/" + eps.Labels[LabelServiceName]
		slicesOf[k] = append(slicesOf[k], eps)
	}
	for range n {
		if len(base.Services) == 0 || g.chance(0.1) {
			svc, eps := g.service(fmt.Sprintf("ns-%d", g.r.IntN(4)))
			out.Services = append(out.Services, svc)
			out.EndpointSlices = append(out.EndpointSlices, eps...)
			continue
		}
		svc := base.Services[g.r.IntN(len(base.Services))]
		id := svc.Namespace + "/" + svc.Name
		if touched[id] {
			continue
		}
		touched[id] = true
		switch x := g.r.Float64(); {
		case x < 0.15:
			dels = append(dels, Deletion{Kind: "Service", Namespace: svc.Namespace, Name: svc.Name})
			if g.chance(0.8) {
				for _, eps := range slicesOf[id] {
					dels = append(dels, Deletion{Kind: "EndpointSlice", Namespace: eps.Namespace, Name: eps.Name})
				}
			}
		case x < 0.5:
			for _, eps := range slicesOf[id] {
				c := eps.DeepCopy()
				g.endpoints(c)
				out.EndpointSlices = append(out.EndpointSlices, c)
			}
		case x < 0.6:
			if s := slicesOf[id]; len(s) > 0 {
				eps := s[g.r.IntN(len(s))]
				dels = append(dels, Deletion{Kind: "EndpointSlice", Namespace: eps.Namespace, Name: eps.Name})
			}
		case x < 0.9:
			c := svc.DeepCopy()
			g.spec(c, svc.Spec.ClusterIPs, svc.Spec.IPFamilies)
			out.Services = append(out.Services, c)
			fresh := g.slices(c)
			out.EndpointSlices = append(out.EndpointSlices, fresh...)
			for _, eps := range slicesOf[id] {
				if !slices.ContainsFunc(fresh, func(f *discoveryv1.EndpointSlice) bool { return f.Name == eps.Name }) {
					dels = append(dels, Deletion{Kind: "EndpointSlice", Namespace: eps.Namespace, Name: eps.Name})
				}
			}
		default:
			c := svc.DeepCopy()
			c.Labels = map[string]string{LabelServiceProxyName: "other"}
			out.Services = append(out.Services, c)
		}
	}
	if len(base.Nodes) > 0 && g.chance(0.3) {
		i := g.r.IntN(len(base.Nodes))
		if g.chance(0.2) {
			dels = append(dels, Deletion{Kind: "Node", Name: base.Nodes[i].Name})
		} else {
			n := g.node(slices.Index(RandomNodes, base.Nodes[i].Name))
			out.Nodes = append(out.Nodes, n)
		}
	}
	changes, err := reload(out)
	if err != nil {
		return nil, err
	}
	changes.Deletions = dels
	return changes, nil
}

// reload passes a set through Write and Read.
func reload(s *Set) (*Set, error) {
	var b bytes.Buffer
	if err := Write(&b, s); err != nil {
		return nil, err
	}
	return Read("random.json", &b)
}

func (g *Random) node(i int) *v1.Node {
	n := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: RandomNodes[i], Labels: map[string]string{v1.LabelHostname: RandomNodes[i]}}}
	if !g.chance(0.15) {
		n.Labels[v1.LabelTopologyZone] = randomZones[i]
	}
	if g.chance(0.1) {
		n.Labels[v1.LabelTopologyZone] = "zone-3"
	}
	internal := []string{fmt.Sprintf("10.0.0.%d", 11+i), fmt.Sprintf("fd00::%d", 11+i)}
	if g.chance(0.2) {
		slices.Reverse(internal)
	}
	switch x := g.r.Float64(); {
	case x < 0.1: // an address change
		internal[0] = fmt.Sprintf("10.0.1.%d", 11+i)
	case x < 0.2: // no internal address: the external one is the node IP
		internal = nil
	}
	for _, a := range internal {
		n.Status.Addresses = append(n.Status.Addresses, v1.NodeAddress{Type: v1.NodeInternalIP, Address: a})
	}
	n.Status.Addresses = append(n.Status.Addresses,
		v1.NodeAddress{Type: v1.NodeExternalIP, Address: fmt.Sprintf("192.0.2.%d", 11+i)},
		v1.NodeAddress{Type: v1.NodeHostName, Address: RandomNodes[i]})
	return n
}

func (g *Random) name(prefix string) string {
	g.object++
	return fmt.Sprintf("%s-%d", prefix, g.object)
}

func (g *Random) clusterIP(f v1.IPFamily) string {
	g.svcIP++
	if f == v1.IPv6Protocol {
		return fmt.Sprintf("fd00:96::%x", g.svcIP)
	}
	return fmt.Sprintf("10.96.%d.%d", g.svcIP/250, 1+g.svcIP%250)
}

// external is an external or load-balancer address of family f: mostly
// fresh, sometimes one a node has, rarely one handed out already.
func (g *Random) external(f v1.IPFamily, lb bool) string {
	if len(g.used) > 0 && g.chance(0.02) {
		for _, a := range g.used {
			if ipFamily(netip.MustParseAddr(a)) == f {
				return a
			}
		}
	}
	if g.chance(0.04) {
		if f == v1.IPv6Protocol {
			return fmt.Sprintf("fd00::%d", 11+g.r.IntN(3))
		}
		return fmt.Sprintf("10.0.0.%d", 11+g.r.IntN(3))
	}
	var a string
	switch {
	case lb && f == v1.IPv6Protocol:
		g.lbIP++
		a = fmt.Sprintf("2001:db8:1b::%x", g.lbIP)
	case lb:
		g.lbIP++
		a = fmt.Sprintf("203.0.%d.%d", 113+g.lbIP/250, 1+g.lbIP%250)
	case f == v1.IPv6Protocol:
		g.extIP++
		a = fmt.Sprintf("2001:db8:e::%x", g.extIP)
	default:
		g.extIP++
		a = fmt.Sprintf("198.51.%d.%d", 100+g.extIP/250, 1+g.extIP%250)
	}
	g.used = append(g.used, a)
	return a
}

func (g *Random) nodePort() int32 {
	g.port++
	return g.port
}

// service draws a service and its slices; a few are of kinds kube-proxy ignores.
func (g *Random) service(ns string) (*v1.Service, []*discoveryv1.EndpointSlice) {
	svc := &v1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: g.name("svc")}}
	fams := []v1.IPFamily{g.fams[0]}
	if len(g.fams) > 1 {
		switch x := g.r.Float64(); {
		case x < 0.6:
			fams = g.fams
		case x < 0.8:
			fams = []v1.IPFamily{g.fams[1]}
		}
	}
	var ips []string
	for _, f := range fams {
		ips = append(ips, g.clusterIP(f))
	}
	g.spec(svc, ips, fams)
	switch x := g.r.Float64(); {
	case x < 0.02:
		svc.Spec = v1.ServiceSpec{Type: v1.ServiceTypeExternalName, ExternalName: "db.example.com"}
	case x < 0.04:
		svc.Spec.ClusterIP, svc.Spec.ClusterIPs = v1.ClusterIPNone, []string{v1.ClusterIPNone}
		svc.Spec.Type, svc.Spec.ExternalIPs = v1.ServiceTypeClusterIP, nil
		svc.Spec.ExternalTrafficPolicy, svc.Spec.HealthCheckNodePort = "", 0
		svc.Status = v1.ServiceStatus{}
		for i := range svc.Spec.Ports {
			svc.Spec.Ports[i].NodePort = 0
		}
		eps := g.slices(svc)
		for _, s := range eps {
			s.Labels[LabelHeadless] = ""
		}
		return svc, eps
	case x < 0.06:
		svc.Labels = map[string]string{LabelServiceProxyName: "other"}
	}
	return svc, g.slices(svc)
}

// spec draws everything of a service but its name and cluster IPs.
func (g *Random) spec(svc *v1.Service, ips []string, fams []v1.IPFamily) {
	sp := v1.ServiceSpec{ClusterIP: ips[0], ClusterIPs: ips, IPFamilies: fams, Type: v1.ServiceTypeClusterIP}
	policy := v1.IPFamilyPolicySingleStack
	if len(fams) > 1 {
		policy = oneOf(g, v1.IPFamilyPolicyPreferDualStack, v1.IPFamilyPolicyRequireDualStack)
	}
	sp.IPFamilyPolicy = &policy
	switch x := g.r.Float64(); {
	case x < 0.25:
		sp.Type = v1.ServiceTypeNodePort
	case x < 0.55:
		sp.Type = v1.ServiceTypeLoadBalancer
		sp.AllocateLoadBalancerNodePorts = ptrTo(!g.chance(0.15))
	}
	nodePorts := sp.Type == v1.ServiceTypeNodePort || sp.Type == v1.ServiceTypeLoadBalancer && *sp.AllocateLoadBalancerNodePorts
	nports := 1 + g.r.IntN(3)
	for i := range nports {
		p := v1.ServicePort{
			Port:       oneOf[int32](g, 80, 443, 53, 8080, 9000) + int32(i)*1000,
			Protocol:   oneOf(g, v1.ProtocolTCP, v1.ProtocolTCP, v1.ProtocolTCP, v1.ProtocolUDP, v1.ProtocolUDP, v1.ProtocolSCTP),
			TargetPort: intstr.FromInt32(int32(8000 + i)),
		}
		if nports > 1 || g.chance(0.7) {
			p.Name = fmt.Sprintf("p%d", i)
		}
		if nodePorts {
			p.NodePort = g.nodePort()
		}
		sp.Ports = append(sp.Ports, p)
	}
	if g.chance(0.15) {
		for range 1 + g.r.IntN(2) {
			sp.ExternalIPs = append(sp.ExternalIPs, g.external(oneOf(g, fams...), false))
		}
		if g.chance(0.1) { // an external IP of a family the service does not have
			sp.ExternalIPs = append(sp.ExternalIPs, g.external(oneOf(g, v1.IPv4Protocol, v1.IPv6Protocol), false))
		}
	}
	if g.chance(0.15) {
		sp.SessionAffinity = v1.ServiceAffinityClientIP
		sp.SessionAffinityConfig = &v1.SessionAffinityConfig{ClientIP: &v1.ClientIPConfig{TimeoutSeconds: ptrTo(int32(1 + g.r.IntN(86400)))}}
	}
	if g.chance(0.2) {
		sp.InternalTrafficPolicy = ptrTo(v1.ServiceInternalTrafficPolicyLocal)
	}
	if g.chance(0.2) {
		// Read by the EndpointSlice controller (it sets the hints), not by kube-proxy.
		sp.TrafficDistribution = ptrTo(oneOf(g, v1.ServiceTrafficDistributionPreferClose,
			trafficDistributionPreferSameZone, trafficDistributionPreferSameNode))
	}
	externallyAccessible := sp.Type != v1.ServiceTypeClusterIP || len(sp.ExternalIPs) > 0
	if externallyAccessible && g.chance(0.35) {
		sp.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
		if sp.Type == v1.ServiceTypeLoadBalancer {
			sp.HealthCheckNodePort = g.nodePort()
		}
	}
	var st v1.ServiceStatus
	if sp.Type == v1.ServiceTypeLoadBalancer {
		if g.chance(0.3) {
			for range 1 + g.r.IntN(3) {
				sp.LoadBalancerSourceRanges = append(sp.LoadBalancerSourceRanges, oneOf(g,
					"192.0.2.0/24", "10.0.0.0/16", "0.0.0.0/0", "127.0.0.0/8", " 198.51.100.0/24", "203.0.113.7/32",
					"10.0.0.5/8", "fd00::/64", "::/0", "2001:db8::/32", "::1/128"))
			}
		}
		for _, f := range fams {
			switch x := g.r.Float64(); {
			case x < 0.05:
			case x < 0.15:
				st.LoadBalancer.Ingress = append(st.LoadBalancer.Ingress, v1.LoadBalancerIngress{Hostname: g.name("lb") + ".example.com"})
			case x < 0.25:
				st.LoadBalancer.Ingress = append(st.LoadBalancer.Ingress, v1.LoadBalancerIngress{IP: g.external(f, true), IPMode: ptrTo(v1.LoadBalancerIPModeProxy)})
			default:
				for range 1 + g.r.IntN(2) {
					in := v1.LoadBalancerIngress{IP: g.external(f, true)}
					if g.chance(0.5) {
						in.IPMode = ptrTo(v1.LoadBalancerIPModeVIP)
					}
					st.LoadBalancer.Ingress = append(st.LoadBalancer.Ingress, in)
				}
			}
		}
	}
	svc.Spec, svc.Status = sp, st
}

// slices draws a service's slices: zero to two per family, rarely one of a
// family the service does not have.
func (g *Random) slices(svc *v1.Service) []*discoveryv1.EndpointSlice {
	fams := slices.Clone(svc.Spec.IPFamilies)
	if g.chance(0.03) {
		fams = append(fams, oneOf(g, v1.IPv4Protocol, v1.IPv6Protocol))
	}
	var out []*discoveryv1.EndpointSlice
	for _, f := range fams {
		for range g.r.IntN(3) {
			eps := &discoveryv1.EndpointSlice{
				ObjectMeta: metav1.ObjectMeta{Namespace: svc.Namespace, Name: g.name(svc.Name),
					Labels: map[string]string{LabelServiceName: svc.Name}},
				AddressType: discoveryv1.AddressType(f),
			}
			for _, p := range svc.Spec.Ports {
				name := p.Name
				if g.chance(0.03) {
					name = "other"
				}
				eps.Ports = append(eps.Ports, discoveryv1.EndpointPort{Name: ptrTo(name), Port: ptrTo(p.TargetPort.IntVal), Protocol: ptrTo(p.Protocol)})
			}
			g.endpoints(eps)
			out = append(out, eps)
		}
	}
	return out
}

// endpoints (re)fills a slice with up to five endpoints: conditions drawn
// independently (each may be unset), a node or none, topology hints per the
// slice's mode, and sometimes an address twice (a pod IP reused while the old
// pod terminates).
func (g *Random) endpoints(eps *discoveryv1.EndpointSlice) {
	eps.Endpoints = nil
	cond := func() *bool {
		switch g.r.IntN(5) {
		case 0:
			return nil
		case 1:
			return ptrTo(false)
		}
		return ptrTo(true)
	}
	hints := g.r.IntN(8) // 0-3: none; 4: zones; 5: nodes; 6: both; 7: some endpoints only
	for range g.r.IntN(6) {
		g.podIP++
		addr := fmt.Sprintf("10.244.%d.%d", g.podIP/250, 1+g.podIP%250)
		if eps.AddressType == discoveryv1.AddressTypeIPv6 {
			addr = fmt.Sprintf("fd00:244::%x", g.podIP)
		}
		ep := discoveryv1.Endpoint{Addresses: []string{addr}}
		if !g.chance(0.1) {
			ep.NodeName = ptrTo(oneOf(g, RandomNodes...))
		}
		ep.Conditions = discoveryv1.EndpointConditions{Ready: cond(), Serving: cond(), Terminating: cond()}
		if c := &ep.Conditions; c.Terminating != nil && *c.Terminating && g.chance(0.7) {
			c.Ready = ptrTo(false) // the controller never calls a terminating endpoint ready
		}
		if h := hints; h >= 4 && (h != 7 || g.chance(0.5)) {
			ep.Hints = &discoveryv1.EndpointHints{}
			if h != 5 {
				for range 1 + g.r.IntN(2) {
					ep.Hints.ForZones = append(ep.Hints.ForZones, discoveryv1.ForZone{Name: oneOf(g, "zone-1", "zone-2", "zone-3")})
				}
			}
			if h != 4 {
				k8sapi.SetNodeHints(ep.Hints, append(k8sapi.NodeHints(ep.Hints), oneOf(g, RandomNodes...)))
			}
		}
		if g.chance(0.04) {
			// The old pod of this address, terminating, listed first.
			old := *ep.DeepCopy()
			old.Conditions = discoveryv1.EndpointConditions{Ready: ptrTo(false), Serving: ptrTo(g.chance(0.5)), Terminating: ptrTo(true)}
			old.NodeName = ptrTo(oneOf(g, RandomNodes...))
			eps.Endpoints = append(eps.Endpoints, old)
		}
		eps.Endpoints = append(eps.Endpoints, ep)
	}
}

func ptrTo[T any](v T) *T { return &v }

// The traffic distributions of Kubernetes 1.33 and later, spelled out: the
// API constants do not exist in the older releases kpsim also builds
// against (internal/k8sapi).
const (
	trafficDistributionPreferSameZone = "PreferSameZone"
	trafficDistributionPreferSameNode = "PreferSameNode"
)
