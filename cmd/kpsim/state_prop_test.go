package main

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"
	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/kpsim/kpsim/proxier"
	"github.com/kpsim/kpsim/scenarios"
	"github.com/kpsim/kpsim/scenarios/objects"
)

// clusterGen makes random but valid clusters: every service type and option
// the proxier handles, endpoints in every condition on three nodes, and some
// external IPs shared between services so that virtual server conflicts occur.
type clusterGen struct {
	r        *rand.Rand
	ip       int   // next cluster IP
	nodePort int32 // next node port
	pod      int   // next pod IP
	lb       int   // next load-balancer IP
}

var genNodes = []string{"node-a", "node-b", "node-c"}

func (g *clusterGen) chance(p float64) bool { return g.r.Float64() < p }

func ptrTo[T any](v T) *T { return &v }

func (g *clusterGen) nodes() []*v1.Node {
	var out []*v1.Node
	for i, n := range genNodes {
		out = append(out, &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}, Status: v1.NodeStatus{Addresses: []v1.NodeAddress{
			{Type: v1.NodeInternalIP, Address: fmt.Sprintf("10.0.0.%d", 11+i)},
			{Type: v1.NodeInternalIP, Address: fmt.Sprintf("fd00::%d", 11+i)},
		}}})
	}
	return out
}

// spec returns a random spec around the given cluster IPs.
func (g *clusterGen) spec(clusterIPs []string) v1.ServiceSpec {
	sp := v1.ServiceSpec{ClusterIP: clusterIPs[0], ClusterIPs: clusterIPs, Type: v1.ServiceTypeClusterIP}
	switch x := g.r.Float64(); {
	case x < 0.2:
		sp.Type = v1.ServiceTypeNodePort
	case x < 0.4:
		sp.Type = v1.ServiceTypeLoadBalancer
	}
	protos := []v1.Protocol{v1.ProtocolTCP, v1.ProtocolTCP, v1.ProtocolTCP, v1.ProtocolUDP, v1.ProtocolSCTP}
	for i := range 1 + g.r.IntN(3) {
		p := v1.ServicePort{
			Name:       fmt.Sprintf("p%d", i),
			Port:       []int32{80, 443, 53, 8080}[g.r.IntN(4)] + int32(i)*1000,
			Protocol:   protos[g.r.IntN(len(protos))],
			TargetPort: intstr.FromInt32(int32(8000 + i)),
		}
		if sp.Type != v1.ServiceTypeClusterIP {
			g.nodePort++
			p.NodePort = g.nodePort
		}
		sp.Ports = append(sp.Ports, p)
	}
	if g.chance(0.15) {
		sp.ExternalIPs = []string{fmt.Sprintf("198.51.100.%d", 1+g.r.IntN(40))}
	}
	if g.chance(0.15) {
		sp.SessionAffinity = v1.ServiceAffinityClientIP
		sp.SessionAffinityConfig = &v1.SessionAffinityConfig{ClientIP: &v1.ClientIPConfig{TimeoutSeconds: ptrTo(int32(60 + g.r.IntN(10800)))}}
	}
	if g.chance(0.15) {
		sp.InternalTrafficPolicy = ptrTo(v1.ServiceInternalTrafficPolicyLocal)
	}
	if sp.Type != v1.ServiceTypeClusterIP && g.chance(0.3) {
		sp.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
		if sp.Type == v1.ServiceTypeLoadBalancer {
			g.nodePort++
			sp.HealthCheckNodePort = g.nodePort
		}
	}
	if sp.Type == v1.ServiceTypeLoadBalancer && g.chance(0.3) {
		ranges := []string{"192.0.2.0/24", "10.0.0.0/16", "0.0.0.0/0", "fd00::/64"}
		sp.LoadBalancerSourceRanges = []string{ranges[g.r.IntN(len(ranges))]}
	}
	return sp
}

func (g *clusterGen) status(sp v1.ServiceSpec) v1.ServiceStatus {
	var st v1.ServiceStatus
	if sp.Type != v1.ServiceTypeLoadBalancer {
		return st
	}
	g.lb++
	in := v1.LoadBalancerIngress{IP: fmt.Sprintf("203.0.%d.%d", 113+g.lb/250, 1+g.lb%250)}
	switch x := g.r.Float64(); {
	case x < 0.1:
		in = v1.LoadBalancerIngress{Hostname: fmt.Sprintf("lb-%d.example.com", g.lb)}
	case x < 0.2:
		in.IPMode = ptrTo(v1.LoadBalancerIPModeProxy)
	}
	st.LoadBalancer.Ingress = []v1.LoadBalancerIngress{in}
	return st
}

func (g *clusterGen) service(ns, name string) (*v1.Service, []*discoveryv1.EndpointSlice) {
	g.ip++
	ips := []string{fmt.Sprintf("10.96.%d.%d", g.ip/250, 1+g.ip%250)}
	if g.chance(0.15) {
		ips = append(ips, fmt.Sprintf("fd00:96::%x", g.ip))
	}
	svc := &v1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: g.spec(ips)}
	svc.Status = g.status(svc.Spec)
	return svc, g.slices(svc)
}

func (g *clusterGen) slices(svc *v1.Service) []*discoveryv1.EndpointSlice {
	var out []*discoveryv1.EndpointSlice
	for _, ip := range svc.Spec.ClusterIPs {
		at := discoveryv1.AddressTypeIPv4
		if netip.MustParseAddr(ip).Is6() {
			at = discoveryv1.AddressTypeIPv6
		}
		for i := range 1 + g.r.IntN(2) {
			eps := &discoveryv1.EndpointSlice{
				ObjectMeta: metav1.ObjectMeta{Namespace: svc.Namespace, Name: fmt.Sprintf("%s-%s-%d", svc.Name, at, i),
					Labels: map[string]string{discoveryv1.LabelServiceName: svc.Name}},
				AddressType: at,
			}
			for _, p := range svc.Spec.Ports {
				eps.Ports = append(eps.Ports, discoveryv1.EndpointPort{Name: ptrTo(p.Name), Port: ptrTo(p.TargetPort.IntVal), Protocol: ptrTo(p.Protocol)})
			}
			g.endpoints(eps)
			out = append(out, eps)
		}
	}
	return out
}

// endpoints (re)fills a slice with 0-4 endpoints in random conditions.
func (g *clusterGen) endpoints(eps *discoveryv1.EndpointSlice) {
	eps.Endpoints = nil
	for range g.r.IntN(5) {
		g.pod++
		addr := fmt.Sprintf("10.244.%d.%d", g.pod/250, 1+g.pod%250)
		if eps.AddressType == discoveryv1.AddressTypeIPv6 {
			addr = fmt.Sprintf("fd00:244::%x", g.pod)
		}
		ep := discoveryv1.Endpoint{Addresses: []string{addr}, NodeName: ptrTo(genNodes[g.r.IntN(len(genNodes))])}
		switch g.r.IntN(4) {
		case 0:
			ep.Conditions = discoveryv1.EndpointConditions{Ready: ptrTo(true), Serving: ptrTo(true), Terminating: ptrTo(false)}
		case 1:
			ep.Conditions = discoveryv1.EndpointConditions{Ready: ptrTo(false), Serving: ptrTo(true), Terminating: ptrTo(true)}
		case 2:
			ep.Conditions = discoveryv1.EndpointConditions{Ready: ptrTo(false), Serving: ptrTo(false), Terminating: ptrTo(false)}
		}
		eps.Endpoints = append(eps.Endpoints, ep)
	}
}

// reload passes a set through Write and Load, so that the objects are
// defaulted, validated and filtered exactly as a file would be.
func reload(t *testing.T, s *objects.Set) *objects.Set {
	t.Helper()
	var b bytes.Buffer
	require.NoError(t, objects.Write(&b, s))
	out, err := objects.Read("generated.json", &b)
	require.NoError(t, err)
	return out
}

// changes draws random changes against base: deletes of services (with or
// without their slices), slice deletes, endpoint changes, spec changes
// (type, ports, policies), services handed to another proxy, and new services.
func (g *clusterGen) changes(t *testing.T, base *objects.Set, n int) *objects.Set {
	out := &objects.Set{}
	var dels []objects.Deletion
	touched := map[string]bool{}
	slicesOf := map[string][]*discoveryv1.EndpointSlice{}
	for _, eps := range base.EndpointSlices {
		k := eps.Namespace + "/" + eps.Labels[discoveryv1.LabelServiceName]
		slicesOf[k] = append(slicesOf[k], eps)
	}
	for range n {
		svc := base.Services[g.r.IntN(len(base.Services))]
		id := svc.Namespace + "/" + svc.Name
		if touched[id] {
			continue
		}
		touched[id] = true
		switch x := g.r.Float64(); {
		case x < 0.2: // delete the service and, mostly, its slices
			dels = append(dels, objects.Deletion{Kind: "Service", Namespace: svc.Namespace, Name: svc.Name})
			if g.chance(0.8) {
				for _, eps := range slicesOf[id] {
					dels = append(dels, objects.Deletion{Kind: "EndpointSlice", Namespace: eps.Namespace, Name: eps.Name})
				}
			}
		case x < 0.45: // endpoints change
			for _, eps := range slicesOf[id] {
				c := eps.DeepCopy()
				g.endpoints(c)
				out.EndpointSlices = append(out.EndpointSlices, c)
			}
		case x < 0.55: // a slice goes
			if s := slicesOf[id]; len(s) > 0 {
				eps := s[g.r.IntN(len(s))]
				dels = append(dels, objects.Deletion{Kind: "EndpointSlice", Namespace: eps.Namespace, Name: eps.Name})
			}
		case x < 0.8: // the spec changes (type, ports, policies) and its slices follow
			c := svc.DeepCopy()
			c.Spec = g.spec(svc.Spec.ClusterIPs)
			c.Status = g.status(c.Spec)
			out.Services = append(out.Services, c)
			for _, eps := range g.slices(c) {
				out.EndpointSlices = append(out.EndpointSlices, eps)
			}
			for _, eps := range slicesOf[id] {
				if !containsSlice(out.EndpointSlices, eps.Name) {
					dels = append(dels, objects.Deletion{Kind: "EndpointSlice", Namespace: eps.Namespace, Name: eps.Name})
				}
			}
		case x < 0.85: // handed to another proxy: kube-proxy's informer sees a delete
			c := svc.DeepCopy()
			c.Labels = map[string]string{objects.LabelServiceProxyName: "other"}
			out.Services = append(out.Services, c)
		default: // a new service
			ns := fmt.Sprintf("ns-%d", g.r.IntN(5))
			s, slices := g.service(ns, fmt.Sprintf("new-%d", g.ip))
			out.Services = append(out.Services, s)
			out.EndpointSlices = append(out.EndpointSlices, slices...)
		}
	}
	changes := reload(t, out)
	changes.Deletions = dels
	return changes
}

func containsSlice(s []*discoveryv1.EndpointSlice, name string) bool {
	for _, x := range s {
		if x.Name == name {
			return true
		}
	}
	return false
}

// TestIncrementalEqualsScratch is the --then property: for random clusters
// and random changes, the state after an incremental sync equals the state a
// fresh proxier programs for the final objects.
func TestIncrementalEqualsScratch(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3, 4, 5, 6} {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			g := &clusterGen{r: rand.New(rand.NewPCG(seed, 0)), nodePort: 30000}
			base := &objects.Set{Nodes: g.nodes()}
			for i := range 300 {
				svc, slices := g.service(fmt.Sprintf("ns-%d", i%5), fmt.Sprintf("svc-%d", i))
				base.Services = append(base.Services, svc)
				base.EndpointSlices = append(base.EndpointSlices, slices...)
			}
			base = reload(t, base)
			cfg := proxier.Config{NodeName: genNodes[seed%3]}
			current := base
			// Two rounds of changes: the second lands on a proxier that already synced incrementally.
			r, err := scenarios.NewStateRun(current, cfg, "")
			require.NoError(t, err)
			_, err = r.First(current)
			require.NoError(t, err)
			for round := range 2 {
				changes := g.changes(t, current, 120)
				inc, err := r.Then(current, changes)
				require.NoError(t, err)
				current, _ = current.Apply(changes)
				scratchCfg := cfg
				scratchCfg.Families = r.Families
				scratch := stateOf(t, current, scratchCfg)
				diffs := resultsDiff(scratch, inc)
				require.Empty(t, diffs, "round %d: incremental (B) differs from scratch (A):\n%s", round, diffs)
				require.NotEmpty(t, inc.VirtualServers)
			}
		})
	}
}
