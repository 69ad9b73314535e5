package scenarios

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/kpsim/kpsim/dataplane"
	"github.com/kpsim/kpsim/objects"
	"github.com/kpsim/kpsim/results"
)

const (
	// managedBy is the EndpointSlice controller's value for the managed-by label.
	managedBy = "endpointslice-controller.k8s.io"
)

// ipAlloc hands out addresses of one CIDR in order, skipping those in use.
// Every address below next was handed out or skipped, so used holds only
// those taken out of order (reserved, or asked for by place): at 300,000
// endpoints a set of every address handed out was 19 MB held for the run.
type ipAlloc struct {
	prefix netip.Prefix
	next   netip.Addr
	used   map[netip.Addr]bool
}

// taken reports whether ip was handed out or reserved.
func (a *ipAlloc) taken(ip netip.Addr) bool { return ip.Less(a.next) || a.used[ip] }

func newIPAlloc(p netip.Prefix) *ipAlloc {
	return &ipAlloc{prefix: p, next: p.Addr().Next(), used: map[netip.Addr]bool{}}
}

func (a *ipAlloc) take() (netip.Addr, error) {
	for ; a.next.IsValid() && a.prefix.Contains(a.next); a.next = a.next.Next() {
		if a.used[a.next] {
			delete(a.used, a.next) // below next from now on
			continue
		}
		if a.next.Is4() && !a.prefix.Contains(a.next.Next()) {
			break // the IPv4 broadcast address
		}
		ip := a.next
		a.next = a.next.Next()
		return ip, nil
	}
	return netip.Addr{}, fmt.Errorf("CIDR %s has no free address left", a.prefix)
}

// generator builds the scenario's cluster and keeps allocating from the
// same pools when the timeline adds services or replaces endpoints, so that
// every object of a run is a function of the seed.
type generator struct {
	c         *Cluster
	fams      []dataplane.Family // cluster families, the primary first
	rng       *rand.Rand
	svcIPs    map[dataplane.Family]*ipAlloc
	podIPs    map[dataplane.Family]*ipAlloc
	extIPs    map[dataplane.Family]*ipAlloc
	nodePorts map[int32]bool
	portRange nodePortRange // cluster.nodePortRange, validated
	nextPort  int32
	nextSvc   int
	taken     map[string]bool // namespace/name of services loaded from a file
	nodes     []string        // nodes[0] is the proxier's node
}

func newGenerator(s *Scenario) *generator {
	c := &s.Cluster
	g := &generator{
		c:         c,
		rng:       rand.New(rand.NewPCG(uint64(s.Seed), 0x6b7073696d)),
		svcIPs:    map[dataplane.Family]*ipAlloc{},
		podIPs:    map[dataplane.Family]*ipAlloc{},
		extIPs:    map[dataplane.Family]*ipAlloc{},
		nodePorts: map[int32]bool{},
		taken:     map[string]bool{},
	}
	g.portRange, _ = parseNodePortRange(c.NodePortRange)
	g.nextPort = int32(g.portRange.lo)
	for _, f := range s.Proxier.Families {
		g.fams = append(g.fams, dataplane.Family(f))
	}
	for list, m := range map[*[]string]map[dataplane.Family]*ipAlloc{&c.ServiceCIDRs: g.svcIPs, &c.PodCIDRs: g.podIPs, &c.ExternalCIDRs: g.extIPs} {
		for _, cidr := range *list {
			if p, err := netip.ParsePrefix(cidr); err == nil {
				m[dataplane.FamilyOf(p.Addr())] = newIPAlloc(p.Masked())
			}
		}
	}
	g.nodes = append(g.nodes, c.Node.Name)
	for i := 1; i < c.Nodes; i++ {
		g.nodes = append(g.nodes, fmt.Sprintf("peer-node-%d", i))
	}
	return g
}

// reserve marks every address and node port of existing objects as taken.
func (g *generator) reserve(set *objects.Set) {
	mark := func(m map[dataplane.Family]*ipAlloc, s string) {
		if a, err := netip.ParseAddr(s); err == nil {
			if al := m[dataplane.FamilyOf(a)]; al != nil {
				al.used[a.Unmap()] = true
			}
		}
	}
	for _, svc := range set.Services {
		g.taken[key(svc.Namespace, svc.Name)] = true
		for _, ip := range svc.Spec.ClusterIPs {
			mark(g.svcIPs, ip)
		}
		for _, ip := range svc.Spec.ExternalIPs {
			mark(g.extIPs, ip)
		}
		for _, in := range svc.Status.LoadBalancer.Ingress {
			mark(g.extIPs, in.IP)
		}
		for _, p := range svc.Spec.Ports {
			g.nodePorts[p.NodePort] = true
		}
		g.nodePorts[svc.Spec.HealthCheckNodePort] = true
	}
	for _, eps := range set.EndpointSlices {
		for _, ep := range eps.Endpoints {
			for _, a := range ep.Addresses {
				mark(g.podIPs, a)
			}
		}
	}
}

func (g *generator) nodePort() (int32, error) {
	for ; g.nextPort <= int32(g.portRange.hi); g.nextPort++ {
		if !g.nodePorts[g.nextPort] {
			g.nodePorts[g.nextPort] = true
			return g.nextPort, nil
		}
	}
	return 0, fmt.Errorf("node port range %s (cluster.nodePortRange) exhausted", g.portRange)
}

func ptr[T any](v T) *T { return &v }

// service generates the next service and its EndpointSlices.
func (g *generator) service() (*v1.Service, []*discoveryv1.EndpointSlice, error) {
	c := g.c
	var svc *v1.Service
	for svc == nil || g.taken[key(svc.Namespace, svc.Name)] {
		i := g.nextSvc
		g.nextSvc++
		svc = &v1.Service{ObjectMeta: metav1.ObjectMeta{
			Name:      fmt.Sprintf("svc-%05d", i),
			Namespace: fmt.Sprintf("ns-%03d", i%max(c.Namespaces, 1)),
		}}
	}
	fams := g.fams[:1]
	if len(g.fams) > 1 && g.rng.Float64() < c.DualStack {
		fams = g.fams
	}
	sp := &svc.Spec
	sp.Type = v1.ServiceTypeClusterIP
	external := false
	switch r := g.rng.Float64(); {
	case r < c.Types.NodePort:
		sp.Type = v1.ServiceTypeNodePort
	case r < c.Types.NodePort+c.Types.LoadBalancer:
		sp.Type = v1.ServiceTypeLoadBalancer
		sp.AllocateLoadBalancerNodePorts = ptr(true)
	case r < c.Types.NodePort+c.Types.LoadBalancer+c.Types.ExternalIPs:
		external = true
	}
	policy := v1.IPFamilyPolicySingleStack
	if len(fams) > 1 {
		policy = v1.IPFamilyPolicyRequireDualStack
	}
	sp.IPFamilyPolicy = &policy
	sp.InternalTrafficPolicy = ptr(v1.ServiceInternalTrafficPolicyCluster)
	sp.SessionAffinity = v1.ServiceAffinityNone
	if g.rng.Float64() < c.SessionAffinity {
		sp.SessionAffinity = v1.ServiceAffinityClientIP
		sp.SessionAffinityConfig = &v1.SessionAffinityConfig{ClientIP: &v1.ClientIPConfig{TimeoutSeconds: ptr(int32(objects.DefaultAffinityTimeout))}}
	}
	for _, f := range fams {
		ip, err := g.svcIPs[f].take()
		if err != nil {
			return nil, nil, fmt.Errorf("cluster.serviceCIDRs: %w", err)
		}
		sp.ClusterIPs = append(sp.ClusterIPs, ip.String())
		sp.IPFamilies = append(sp.IPFamilies, v1.IPFamily(f))
		if external || sp.Type == v1.ServiceTypeLoadBalancer {
			ext, err := g.extIPs[f].take()
			if err != nil {
				return nil, nil, fmt.Errorf("cluster.externalCIDRs: %w", err)
			}
			if external {
				sp.ExternalIPs = append(sp.ExternalIPs, ext.String())
			} else {
				svc.Status.LoadBalancer.Ingress = append(svc.Status.LoadBalancer.Ingress,
					v1.LoadBalancerIngress{IP: ext.String(), IPMode: ptr(v1.LoadBalancerIPModeVIP)})
			}
		}
	}
	sp.ClusterIP = sp.ClusterIPs[0]
	nodePorts := sp.Type == v1.ServiceTypeNodePort || sp.Type == v1.ServiceTypeLoadBalancer
	if nodePorts {
		sp.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyCluster
		if g.rng.Float64() < c.ExternalTrafficPolicyLocal {
			sp.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
		}
	}
	for j := range c.PortsPerService.Draw(g.rng) {
		p := v1.ServicePort{
			Name:       fmt.Sprintf("p%d", j),
			Protocol:   v1.ProtocolTCP,
			Port:       int32(80 + j),
			TargetPort: intstr.FromInt32(int32(8080 + j)),
		}
		switch r := g.rng.Float64(); {
		case r < c.UDP:
			p.Protocol = v1.ProtocolUDP
		case r < c.UDP+c.SCTP:
			p.Protocol = v1.ProtocolSCTP
		}
		if nodePorts {
			np, err := g.nodePort()
			if err != nil {
				return nil, nil, fmt.Errorf("cluster.types: %w", err)
			}
			p.NodePort = np
		}
		sp.Ports = append(sp.Ports, p)
	}
	if sp.Type == v1.ServiceTypeLoadBalancer && sp.ExternalTrafficPolicy == v1.ServiceExternalTrafficPolicyLocal {
		hc, err := g.nodePort()
		if err != nil {
			return nil, nil, fmt.Errorf("cluster.types: %w", err)
		}
		sp.HealthCheckNodePort = hc
	}
	slices, err := g.slices(svc, c.EndpointsPerService.Draw(g.rng))
	return svc, slices, err
}

// slices generates one EndpointSlice per family of svc with n ready endpoints.
func (g *generator) slices(svc *v1.Service, n int) ([]*discoveryv1.EndpointSlice, error) {
	var out []*discoveryv1.EndpointSlice
	for _, f := range svc.Spec.IPFamilies {
		eps := &discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{
				Name:      fmt.Sprintf("%s-%s", svc.Name, strings.ToLower(string(f))),
				Namespace: svc.Namespace,
				Labels: map[string]string{
					discoveryv1.LabelServiceName: svc.Name,
					discoveryv1.LabelManagedBy:   managedBy,
				},
			},
			AddressType: discoveryv1.AddressType(f),
		}
		for _, p := range svc.Spec.Ports {
			eps.Ports = append(eps.Ports, discoveryv1.EndpointPort{
				Name:     ptr(p.Name),
				Protocol: ptr(p.Protocol),
				Port:     ptr(p.TargetPort.IntVal),
			})
		}
		for k := 0; k < n; k++ {
			ep, err := g.endpoint(dataplane.Family(f))
			if err != nil {
				return nil, err
			}
			eps.Endpoints = append(eps.Endpoints, ep)
		}
		out = append(out, eps)
	}
	return out, nil
}

// endpoint generates a ready endpoint with a fresh pod address on a random node.
func (g *generator) endpoint(f dataplane.Family) (discoveryv1.Endpoint, error) {
	al := g.podIPs[f]
	if al == nil {
		return discoveryv1.Endpoint{}, fmt.Errorf("cluster.podCIDRs: no %s CIDR", f)
	}
	ip, err := al.take()
	if err != nil {
		return discoveryv1.Endpoint{}, fmt.Errorf("cluster.podCIDRs: %w", err)
	}
	return discoveryv1.Endpoint{
		Addresses:  []string{ip.String()},
		Conditions: discoveryv1.EndpointConditions{Ready: ptr(true), Serving: ptr(true), Terminating: ptr(false)},
		NodeName:   ptr(g.nodes[g.rng.IntN(len(g.nodes))]),
	}, nil
}

// kubeDNSEndpoints is how many endpoints kube-dns has: as many as most of
// the cluster's services, at least 2 (coredns runs two replicas by default).
func kubeDNSEndpoints(c *Cluster) int { return max(c.EndpointsPerService.Median(), 2) }

// kubeDNS generates kube-system/kube-dns at the service CIDR's tenth address.
func (g *generator) kubeDNS() (*v1.Service, []*discoveryv1.EndpointSlice, error) {
	return g.wellKnown("kube-system", "kube-dns", 10, kubeDNSEndpoints(g.c), map[string]string{"k8s-app": "kube-dns"},
		v1.ServicePort{Name: "dns", Protocol: v1.ProtocolUDP, Port: 53, TargetPort: intstr.FromInt32(53)},
		v1.ServicePort{Name: "dns-tcp", Protocol: v1.ProtocolTCP, Port: 53, TargetPort: intstr.FromInt32(53)},
		v1.ServicePort{Name: "metrics", Protocol: v1.ProtocolTCP, Port: 9153, TargetPort: intstr.FromInt32(9153)})
}

// apiServer generates default/kubernetes at the service CIDR's first
// address, with three API servers behind it.
func (g *generator) apiServer() (*v1.Service, []*discoveryv1.EndpointSlice, error) {
	return g.wellKnown("default", "kubernetes", 1, 3, map[string]string{"component": "apiserver", "provider": "kubernetes"},
		v1.ServicePort{Name: "https", Protocol: v1.ProtocolTCP, Port: 443, TargetPort: intstr.FromInt32(6443)})
}

// wellKnown generates a ClusterIP service every cluster has, at the nth
// address of the first family's service CIDR, with eps endpoints.
func (g *generator) wellKnown(ns, name string, nth, eps int, labels map[string]string, ports ...v1.ServicePort) (*v1.Service, []*discoveryv1.EndpointSlice, error) {
	f := g.fams[0]
	al := g.svcIPs[f]
	ip := al.prefix.Addr()
	for i := 0; i < nth; i++ {
		ip = ip.Next()
	}
	if !al.prefix.Contains(ip) || al.taken(ip) {
		return nil, nil, fmt.Errorf("cluster.serviceCIDRs: no room for %s/%s at %s", ns, name, ip)
	}
	al.used[ip] = true
	svc := &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels},
		Spec: v1.ServiceSpec{
			Type:                  v1.ServiceTypeClusterIP,
			ClusterIP:             ip.String(),
			ClusterIPs:            []string{ip.String()},
			IPFamilies:            []v1.IPFamily{v1.IPFamily(f)},
			IPFamilyPolicy:        ptr(v1.IPFamilyPolicySingleStack),
			InternalTrafficPolicy: ptr(v1.ServiceInternalTrafficPolicyCluster),
			SessionAffinity:       v1.ServiceAffinityNone,
			Ports:                 ports,
		},
	}
	slices, err := g.slices(svc, eps)
	return svc, slices, err
}

// node returns the proxier's Node object.
func (g *generator) node() *v1.Node {
	n := &v1.Node{ObjectMeta: metav1.ObjectMeta{
		Name:   g.c.Node.Name,
		Labels: map[string]string{v1.LabelHostname: g.c.Node.Name},
	}}
	for _, a := range g.c.Node.Addresses {
		if p, err := netip.ParsePrefix(a); err == nil {
			n.Status.Addresses = append(n.Status.Addresses, v1.NodeAddress{Type: v1.NodeInternalIP, Address: p.Addr().String()})
		}
	}
	return n
}

// build generates (or loads) the cluster and checks what depends on it:
// probe and churn services named in the scenario must exist, and the
// probe targets they make (chosen here, for the run) must not be too many.
func (s *Scenario) build(v *validator) error {
	g := newGenerator(s)
	set := &objects.Set{}
	c := &s.Cluster
	if c.FromFile != "" {
		path := c.FromFile
		if !filepath.IsAbs(path) && !s.fromFileSet {
			path = filepath.Join(filepath.Dir(s.file), path) // relative to the scenario file
		}
		loaded, err := objects.Load(path)
		if err != nil {
			v.errf("cluster.fromFile", "%v", err)
			return v.errs.orNil()
		}
		set = loaded
		g.reserve(set)
	} else {
		for _, wk := range []struct {
			on   bool
			path string
			gen  func() (*v1.Service, []*discoveryv1.EndpointSlice, error)
		}{{c.APIServer, "cluster.apiServer", g.apiServer}, {c.KubeDNS, "cluster.kubeDNS", g.kubeDNS}} {
			if !wk.on {
				continue
			}
			svc, eps, err := wk.gen()
			if err != nil {
				v.errf(wk.path, "%v", err)
				return v.errs.orNil()
			}
			set.Services = append(set.Services, svc)
			set.EndpointSlices = append(set.EndpointSlices, eps...)
		}
		for i := 0; i < c.Services; i++ {
			svc, eps, err := g.service()
			if err != nil {
				path, msg, _ := strings.Cut(err.Error(), ": ")
				v.errfFrom(clusterFrom, path, "%s (after %d of %s)", msg, i, nServices(c.Services))
				return v.errs.orNil()
			}
			set.Services = append(set.Services, svc)
			set.EndpointSlices = append(set.EndpointSlices, eps...)
		}
	}
	if !slices.ContainsFunc(set.Nodes, func(n *v1.Node) bool { return n.Name == c.Node.Name }) {
		set.Nodes = append(set.Nodes, g.node())
	}
	s.set, s.gen = set, g

	names := map[string]bool{}
	for _, svc := range set.Services {
		names[svc.Namespace+"/"+svc.Name] = true
	}
	if s.checkSelector(v, names, "probes.services", s.Probes.Services) {
		s.targets = s.probeTargets()
		if n := len(s.targets); n > maxProbeTargets {
			v.errfFrom(append([]string{"probes"}, clusterFrom...), "probes.services",
				"%d probe targets, at most %d: a probed service has one per address of each kind in probes.kinds [%s] "+
					"(a ClusterIP per family, a NodePort per node address) for each client in probes.from [%s]; probe fewer services or kinds",
				n, maxProbeTargets, strings.Join(s.Probes.Kinds, ", "), strings.Join(s.Probes.From, ", "))
		}
	}
	walkSteps(s.Timeline, "timeline", func(st *Step, path string) {
		if ch := st.ChurnEndpoints; ch != nil {
			s.checkSelector(v, names, path+".churnEndpoints.services", ch.Services)
		}
	})
	return nil
}

// clusterFrom are the fields the built cluster follows from: a problem
// found in it (a probed service it lacks) names their overrides.
var clusterFrom = []string{"seed", "cluster", "proxier.families"}

// maxListed is how many of a list's wrong items a message names.
const maxListed = 5

// checkSelector checks that the services sel names are in the cluster
// (names) and that it has as many as sel counts, and reports whether they
// are. Names that are not are one error, however many: a list of
// thousands of names of another cluster would be thousands of lines.
func (s *Scenario) checkSelector(v *validator, names map[string]bool, path string, sel Selector) bool {
	var missing []string
	first := -1
	for i, n := range sel.Names {
		if !names[n] {
			missing = append(missing, cut(n))
			if first < 0 {
				first = i
			}
		}
	}
	switch len(missing) {
	case 0:
	case 1:
		v.errfFrom(clusterFrom, fmt.Sprintf("%s[%d]", path, first), "no service %s in the cluster", missing[0])
	default:
		v.errfFrom(clusterFrom, path, "%d of the %d services named are not in the cluster: %s",
			len(missing), len(sel.Names), results.ListSome(missing, maxListed))
	}
	have := len(s.set.Services)
	if sel.Count > have {
		v.errfFrom(clusterFrom, path, "%s asked for, the cluster has %d", nServices(sel.Count), have)
	}
	return len(missing) == 0 && sel.Count <= have
}

// ClusterObjects returns the scenario's cluster as built by Parse: the
// objects a createCluster step creates. Callers must not modify it.
func (s *Scenario) ClusterObjects() *objects.Set { return s.set }

// ProbeClients are the addresses of the pod that probes from the node, one
// per pod CIDR: the CIDR's last address below its IPv4 broadcast address,
// which the generator hands out last. The sim's modeled probes and the
// kernel's real ones come from these same addresses, so that UDP flows (and
// their stale conntrack entries) are keyed alike on both backends.
func (c *Cluster) ProbeClients() []netip.Addr {
	var out []netip.Addr
	for _, cidr := range c.PodCIDRs {
		p, err := netip.ParsePrefix(cidr)
		if err != nil {
			continue // validation reports it
		}
		b := p.Masked().Addr().AsSlice()
		for i, host := len(b)-1, p.Addr().BitLen()-p.Bits(); i >= 0 && host > 0; i-- {
			n := min(host, 8)
			b[i] |= byte(1<<n - 1)
			host -= n
		}
		last, _ := netip.AddrFromSlice(b)
		out = append(out, last.Prev())
	}
	return out
}
