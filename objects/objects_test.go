package objects

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

const example = "testdata/example"

func loadExample(t *testing.T) *Set {
	t.Helper()
	s, err := Load(example)
	require.NoError(t, err)
	return s
}

func names(s *Set) (svcs, slices []string) {
	for _, x := range s.Services {
		svcs = append(svcs, x.Namespace+"/"+x.Name)
	}
	for _, x := range s.EndpointSlices {
		slices = append(slices, x.Namespace+"/"+x.Name)
	}
	return svcs, slices
}

func TestLoadExample(t *testing.T) {
	s := loadExample(t)
	svcs, slices := names(s)
	require.Equal(t, []string{
		"default/kubernetes", "kube-system/kube-dns", "shop/cache", "shop/catalog", "shop/edge-hostname",
		"shop/edge-proxy", "shop/frontend", "shop/legacy", "shop/web", "telemetry/diameter", "telemetry/statsd",
	}, svcs)
	// ingress-gw's slice is kept: kube-proxy's slice informer does not look at
	// service-proxy-name, and the slice matters only through its ignored service.
	require.Len(t, slices, 14)
	require.Contains(t, slices, "mesh/ingress-gw-t5z8q")
	require.Equal(t, []Ignored{
		{"EndpointSlice", "shop/db-c9x2v", "labelled service.kubernetes.io/headless: belongs to a headless service"},
		{"EndpointSlice", "shop/manual-targets", "no kubernetes.io/service-name label: not tied to a service"},
		{"Service", "mesh/ingress-gw", `labelled service.kubernetes.io/service-proxy-name="mesh-proxy": handled by another proxy`},
		{"Service", "shop/db", "headless (clusterIP None): clients reach endpoints directly"},
		{"Service", "shop/payments", "type ExternalName: a DNS alias, nothing to proxy"},
	}, s.Ignored)
	require.Len(t, s.Nodes, 3)
	require.Empty(t, s.Notes)
}

// minimal is what a hand-written file looks like: none of the API server's defaults.
const minimal = `
apiVersion: v1
kind: Service
metadata: {name: a}
spec:
  clusterIP: 10.96.0.5
  ports: [{port: 80}]
---
apiVersion: v1
kind: Service
metadata: {name: b, namespace: x}
spec:
  type: LoadBalancer
  clusterIPs: [fd00::5, 10.96.0.6]
  sessionAffinity: ClientIP
  ports: [{name: p, port: 53, protocol: UDP, targetPort: dns}]
status:
  loadBalancer: {ingress: [{ip: 192.0.2.1}]}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: a-1, labels: {kubernetes.io/service-name: a}}
addressType: IPv4
ports: [{port: 8080}]
endpoints: [{addresses: [10.1.0.1]}]
---
apiVersion: v1
kind: Pod
metadata: {name: p, namespace: x}
`

func TestDefaults(t *testing.T) {
	s, err := Read("minimal.yaml", strings.NewReader(minimal))
	require.NoError(t, err)
	require.Len(t, s.Services, 2)
	a, b := s.Services[0], s.Services[1]

	require.Equal(t, "default", a.Namespace)
	require.Equal(t, v1.ServiceTypeClusterIP, a.Spec.Type)
	require.Equal(t, v1.ServiceAffinityNone, a.Spec.SessionAffinity)
	require.Equal(t, []string{"10.96.0.5"}, a.Spec.ClusterIPs)
	require.Equal(t, []v1.IPFamily{v1.IPv4Protocol}, a.Spec.IPFamilies)
	require.Equal(t, v1.IPFamilyPolicySingleStack, *a.Spec.IPFamilyPolicy)
	require.Equal(t, v1.ServiceInternalTrafficPolicyCluster, *a.Spec.InternalTrafficPolicy)
	require.Equal(t, v1.ProtocolTCP, a.Spec.Ports[0].Protocol)
	require.Equal(t, int32(80), a.Spec.Ports[0].TargetPort.IntVal)
	require.Empty(t, a.Spec.ExternalTrafficPolicy)

	require.Equal(t, "fd00::5", b.Spec.ClusterIP)
	require.Equal(t, []v1.IPFamily{v1.IPv6Protocol, v1.IPv4Protocol}, b.Spec.IPFamilies)
	require.Equal(t, v1.IPFamilyPolicyRequireDualStack, *b.Spec.IPFamilyPolicy)
	require.Equal(t, v1.ServiceExternalTrafficPolicyCluster, b.Spec.ExternalTrafficPolicy)
	require.Equal(t, int32(DefaultAffinityTimeout), *b.Spec.SessionAffinityConfig.ClientIP.TimeoutSeconds)
	require.Equal(t, "dns", b.Spec.Ports[0].TargetPort.StrVal)
	require.Equal(t, v1.LoadBalancerIPModeVIP, *b.Status.LoadBalancer.Ingress[0].IPMode)
	require.True(t, *b.Spec.AllocateLoadBalancerNodePorts)

	require.Len(t, s.EndpointSlices, 1)
	eps := s.EndpointSlices[0]
	require.Equal(t, "default", eps.Namespace)
	require.Equal(t, v1.ProtocolTCP, *eps.Ports[0].Protocol)
	require.Equal(t, "", *eps.Ports[0].Name)
	require.Nil(t, eps.Endpoints[0].Conditions.Ready, "unset conditions keep their meaning")

	require.Equal(t, []Ignored{{"Pod", "x/p", "kind Pod (v1) is not read by kube-proxy"}}, s.Ignored)
}

// TestExternalTrafficPolicyOnClusterIP: the API server defaults and accepts
// externalTrafficPolicy on every externally reachable service, and a
// ClusterIP service with external IPs is one.
func TestExternalTrafficPolicyOnClusterIP(t *testing.T) {
	const doc = `{"apiVersion":"v1","kind":"Service","metadata":{"name":"%s"},"spec":{"clusterIP":"10.96.0.5","ports":[{"port":80}]%s}}`
	for _, tc := range []struct {
		name, spec string
		want       v1.ServiceExternalTrafficPolicy
		err        string
	}{
		{"externalIPs, Local", `,"externalIPs":["198.51.100.5"],"externalTrafficPolicy":"Local"`, v1.ServiceExternalTrafficPolicyLocal, ""},
		{"externalIPs, unset", `,"externalIPs":["198.51.100.5"]`, v1.ServiceExternalTrafficPolicyCluster, ""},
		{"no externalIPs, unset", ``, "", ""},
		{"no externalIPs, Local", `,"externalTrafficPolicy":"Local"`, "",
			"spec.externalTrafficPolicy: may only be set on an externally reachable service (NodePort, LoadBalancer, or with externalIPs)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Read("in.json", strings.NewReader(fmt.Sprintf(doc, "web", tc.spec)))
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, s.Services[0].Spec.ExternalTrafficPolicy)
		})
	}
}

func TestLoadErrors(t *testing.T) {
	svc := func(spec string) string {
		return `{"apiVersion":"v1","kind":"List","items":[{"apiVersion":"v1","kind":"Service","metadata":{"name":"web","namespace":"default"},"spec":` + spec + `}]}`
	}
	slice := func(body string) string {
		return `{"apiVersion":"discovery.k8s.io/v1","kind":"EndpointSlice","metadata":{"name":"web-1","namespace":"default","labels":{"kubernetes.io/service-name":"web"}},` + body + `}`
	}
	for _, tc := range []struct {
		name, in, want string
	}{
		{"port out of range", svc(`{"clusterIP":"10.96.0.1","ports":[{"name":"a","port":80},{"name":"b","port":70000}]}`),
			"in.json: services default/web: spec.ports[1].port: 70000 is not a valid port (item 0 of the list)"},
		{"bad protocol", svc(`{"clusterIP":"10.96.0.1","ports":[{"port":80,"protocol":"ICMP"}]}`),
			`services default/web: spec.ports[0].protocol: "ICMP" is not TCP, UDP or SCTP`},
		{"bad cluster IP", svc(`{"clusterIP":"10.96.0.300","ports":[{"port":80}]}`),
			`services default/web: spec.clusterIPs[0]: "10.96.0.300" is not a valid IP address`},
		{"family mismatch", svc(`{"clusterIP":"10.96.0.1","ipFamilies":["IPv6"],"ports":[{"port":80}]}`),
			"services default/web: spec.ipFamilies[0]: IPv6, but spec.clusterIPs[0] is IPv4 (10.96.0.1)"},
		{"bad external IP", svc(`{"clusterIP":"10.96.0.1","externalIPs":["nope"],"ports":[{"port":80}]}`),
			`services default/web: spec.externalIPs[0]: "nope" is not a valid IP address`},
		{"bad source range", svc(`{"type":"LoadBalancer","clusterIP":"10.96.0.1","loadBalancerSourceRanges":["10.0.0.0/33"],"ports":[{"port":80}]}`),
			`services default/web: spec.loadBalancerSourceRanges[0]: "10.0.0.0/33" is not a CIDR`},
		{"node port on ClusterIP", svc(`{"clusterIP":"10.96.0.1","ports":[{"port":80,"nodePort":30000}]}`),
			"services default/web: spec.ports[0].nodePort: 30000 set on a ClusterIP service"},
		{"duplicate port", svc(`{"clusterIP":"10.96.0.1","ports":[{"name":"a","port":80},{"name":"b","port":80}]}`),
			"services default/web: spec.ports[1]: port 80/TCP duplicates spec.ports[0]"},
		{"affinity timeout", svc(`{"clusterIP":"10.96.0.1","sessionAffinity":"ClientIP","sessionAffinityConfig":{"clientIP":{"timeoutSeconds":90000}},"ports":[{"port":80}]}`),
			"services default/web: spec.sessionAffinityConfig.clientIP.timeoutSeconds: 90000 is not in 1-86400"},
		{"bad type", svc(`{"type":"Magic","clusterIP":"10.96.0.1","ports":[{"port":80}]}`),
			`services default/web: spec.type: "Magic" is not one of ClusterIP, NodePort, LoadBalancer, ExternalName`},
		{"bad ingress", `{"apiVersion":"v1","kind":"Service","metadata":{"name":"web"},"spec":{"type":"LoadBalancer","clusterIP":"10.96.0.1","ports":[{"port":80}]},"status":{"loadBalancer":{"ingress":[{"ip":"1.2.3"}]}}}`,
			`services default/web: status.loadBalancer.ingress[0].ip: "1.2.3" is not a valid IP address`},
		{"wrong JSON type", svc(`{"clusterIP":"10.96.0.1","ports":"80"}`), "services default/web: spec: json: cannot unmarshal string into Go struct field ServiceSpec.ports"},
		{"wrong JSON type in a slice", slice(`"addressType":"IPv4","endpoints":[{"addresses":"10.1.0.1"}]`),
			"endpointslices default/web-1: json: cannot unmarshal string into Go struct field"},
		{"slice address family", slice(`"addressType":"IPv4","endpoints":[{"addresses":["fd00::1"]}]`),
			"endpointslices default/web-1: endpoints[0].addresses[0]: fd00::1 in an IPv4 slice"},
		{"slice bad port", slice(`"addressType":"IPv4","ports":[{"port":0}]`),
			"endpointslices default/web-1: ports[0].port: 0 is not a valid port"},
		{"slice address type", slice(`"addressType":"IPv5"`),
			`endpointslices default/web-1: addressType: "IPv5" is not IPv4, IPv6 or FQDN`},
		{"duplicate", slice(`"addressType":"IPv4"`) + "\n" + slice(`"addressType":"IPv4"`),
			"in.json: endpointslices default/web-1: defined twice (first in in.json)"},
		{"no kind", `{"apiVersion":"v1","metadata":{"name":"x"}}`, `in.json: object "x" has no kind`},
		{"not JSON", "{{{", "in.json: invalid character '{'"},
		{"not YAML", "a: [", "in.json: document 1:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Read("in.json", strings.NewReader(tc.in))
			require.Error(t, err)
			require.Contains(t, err.Error(), tc.want)
		})
	}
}

func TestLoadDirectoryAndMissing(t *testing.T) {
	dir := t.TempDir()
	_, err := Load(dir)
	require.ErrorContains(t, err, "no .json, .yaml or .yml files")
	_, err = Load(filepath.Join(dir, "nope.json"))
	require.ErrorContains(t, err, "nope.json")

	require.NoError(t, os.WriteFile(filepath.Join(dir, "a.yaml"), []byte(minimal), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "README.md"), []byte("not objects"), 0o644))
	s, err := Load(dir)
	require.NoError(t, err)
	require.Len(t, s.Services, 2)
}

func TestLoadConcatenatedJSON(t *testing.T) {
	in := `{"apiVersion":"v1","kind":"Service","metadata":{"name":"a"},"spec":{"clusterIP":"10.96.0.5","ports":[{"port":80}]}}
{"apiVersion":"v1","kind":"Service","metadata":{"name":"b"},"spec":{"clusterIP":"10.96.0.6","ports":[{"port":80}]}}`
	s, err := Read("two.json", strings.NewReader(in))
	require.NoError(t, err)
	svcs, _ := names(s)
	require.Equal(t, []string{"default/a", "default/b"}, svcs)
}

func roundTrip(t *testing.T, s *Set) *Set {
	t.Helper()
	var buf bytes.Buffer
	require.NoError(t, Write(&buf, s))
	back, err := Read("written.json", &buf)
	require.NoError(t, err)
	return back
}

func TestWriteRoundTrip(t *testing.T) {
	s := loadExample(t)
	back := roundTrip(t, s)
	require.Equal(t, s.Services, back.Services)
	require.Equal(t, s.EndpointSlices, back.EndpointSlices)
	require.Equal(t, s.Nodes, back.Nodes)
}

func TestScale(t *testing.T) {
	s := loadExample(t)
	const n = 4
	big, err := s.Scale(n)
	require.NoError(t, err)
	require.Len(t, big.Services, n*len(s.Services))
	require.Len(t, big.EndpointSlices, n*len(s.EndpointSlices))
	require.Equal(t, s.Nodes, big.Nodes)
	require.Equal(t, []string{"scale: 3 x external IP equal to a node address, given a fresh non-node address in copies"}, big.Notes)

	svcs, _ := names(big)
	require.Contains(t, svcs, "shop/web-2")
	require.Contains(t, svcs, "shop/web-4")

	ips := map[string]string{}
	nodePorts := map[int32]string{}
	for _, svc := range big.Services {
		id := svc.Namespace + "/" + svc.Name
		addrs := append(append([]string{}, svc.Spec.ClusterIPs...), svc.Spec.ExternalIPs...)
		for _, in := range svc.Status.LoadBalancer.Ingress {
			if in.IP != "" {
				addrs = append(addrs, in.IP)
			}
		}
		for _, a := range addrs {
			if prev, ok := ips[a]; ok {
				require.Equal(t, prev, id, "address %s used by two services", a)
			}
			ips[a] = id
		}
		for _, p := range append([]int32{svc.Spec.HealthCheckNodePort}, nodePortsOf(svc)...) {
			if p == 0 {
				continue
			}
			prev, ok := nodePorts[p]
			require.False(t, ok && prev != id, "node port %d used by %s and %s", p, prev, id)
			nodePorts[p] = id
		}
		for _, ip := range svc.Spec.ClusterIPs {
			a := netip.MustParseAddr(ip)
			if a.Is4() {
				require.True(t, netip.MustParsePrefix("10.96.0.0/16").Contains(a), "%s: cluster IP %s left the service range", id, ip)
			}
		}
	}
	// Each copy of a slice points at the copy of its service, with fresh pod IPs.
	eps := map[string]bool{}
	for _, sl := range big.EndpointSlices {
		if sl.Name == "web-5mxqr-3" {
			require.Equal(t, "web-3", sl.Labels[LabelServiceName])
			require.Equal(t, "web-3", sl.OwnerReferences[0].Name)
		}
		for _, ep := range sl.Endpoints {
			for _, a := range ep.Addresses {
				key := sl.Namespace + "/" + sl.Labels[LabelServiceName] + "/" + a
				eps[key] = true
			}
		}
	}
	require.True(t, eps["shop/web/10.244.1.10"])
	require.False(t, eps["shop/web-2/10.244.1.10"], "copies must not reuse pod IPs")

	// The scaled set is valid input again.
	back := roundTrip(t, big)
	require.Len(t, back.Services, len(big.Services))

	_, err = s.Scale(0)
	require.ErrorContains(t, err, "at least 1")
}

func nodePortsOf(svc *v1.Service) []int32 {
	var out []int32
	for _, p := range svc.Spec.Ports {
		out = append(out, p.NodePort)
	}
	return out
}

func TestScaleDropsWhatDoesNotFit(t *testing.T) {
	s := loadExample(t)
	// 2,768 node ports exist; the example uses 7 per copy.
	big, err := s.Scale(500)
	require.NoError(t, err)
	require.Len(t, big.Services, 500*len(s.Services))
	var dropped bool
	for _, n := range big.Notes {
		dropped = dropped || strings.Contains(n, "node port dropped: range 30000-32767 exhausted")
	}
	require.True(t, dropped, "notes: %v", big.Notes)
}

func TestForNode(t *testing.T) {
	s := loadExample(t)
	for _, tc := range []struct {
		name     string
		want     string
		addrs    []string
		warnings int
	}{
		{"", "node-a", []string{"10.0.0.11", "fd00::11"}, 0},
		{"node-c", "node-c", []string{"10.0.0.13", "fd00::13"}, 0},
		{"node-z", "node-z", nil, 2},
	} {
		n := s.ForNode(tc.name)
		require.Equal(t, tc.want, n.Name)
		var got []string
		for _, a := range n.Addresses {
			got = append(got, a.String())
		}
		require.Equal(t, tc.addrs, got)
		require.Len(t, n.Warnings, tc.warnings, "%v", n.Warnings)
	}
	// Without Node objects the node hosting the most endpoints is the default.
	noNodes := &Set{Services: s.Services, EndpointSlices: s.EndpointSlices}
	require.Equal(t, "node-a", noNodes.ForNode("").Name)
}

func TestAnonymize(t *testing.T) {
	s := loadExample(t)
	a1 := Anonymize(s, 7)
	a2 := Anonymize(s, 7)
	a3 := Anonymize(s, 8)
	require.Equal(t, a1, a2, "same seed, same output")
	require.NotEqual(t, a1.Services[0].Name, a3.Services[0].Name)

	var buf bytes.Buffer
	require.NoError(t, Write(&buf, a1))
	out := buf.String()
	for _, leak := range []string{"shop", "frontend", "kube-dns", "node-a", "coredns", "10.96.10.20", "10.244.1.10",
		"203.0.113.10", "198.51.100.5", "fd00:244:1::60", "elb.example.com", "mesh-proxy", "prometheus", "kubectl"} {
		require.NotContains(t, out, leak)
	}

	back := roundTrip(t, a1)
	require.Equal(t, len(s.Services), len(back.Services))
	require.Equal(t, len(s.EndpointSlices), len(back.EndpointSlices))
	require.Equal(t, []string{"anonymize: 5 ignored objects not carried over"}, a1.Notes)

	// Structure is kept: per service type, ports, protocols, policies.
	shape := func(set *Set) map[string]int {
		m := map[string]int{}
		for _, svc := range set.Services {
			for _, p := range svc.Spec.Ports {
				k := string(svc.Spec.Type) + "/" + string(p.Protocol) + "/" + string(svc.Spec.ExternalTrafficPolicy) + "/" +
					string(*svc.Spec.InternalTrafficPolicy) + "/" + string(svc.Spec.SessionAffinity) + "/" + p.TargetPort.String()
				m[k]++
			}
		}
		for _, sl := range set.EndpointSlices {
			for _, ep := range sl.Endpoints {
				m[string(sl.AddressType)+"/"+condString(ep.Conditions)]++
			}
		}
		return m
	}
	require.Equal(t, shape(s), shape(a1))

	// The default node is chosen by endpoint counts, not names: the same node is played.
	key := &anonymizer{addrs: map[netip.Addr]netip.Addr{}}
	binary.BigEndian.PutUint64(key.key[:], 7)
	require.Equal(t, key.name("node", s.ForNode("").Name), a1.ForNode("").Name)

	// Prefix-preserving: the node address stays inside the source range it was in.
	frontend := findService(t, s, "shop", "frontend")
	var anonFrontend *v1.Service
	for _, svc := range a1.Services {
		if svc.Spec.HealthCheckNodePort == frontend.Spec.HealthCheckNodePort {
			anonFrontend = svc
		}
	}
	require.NotNil(t, anonFrontend)
	nodeA := a1.ForNode(Anonymize(&Set{Nodes: s.Nodes}, 7).Nodes[0].Name)
	rng := netip.MustParsePrefix(anonFrontend.Spec.LoadBalancerSourceRanges[1])
	require.Equal(t, 16, rng.Bits())
	require.True(t, rng.Contains(nodeA.Addresses[0]), "%s should contain %s", rng, nodeA.Addresses[0])
	require.False(t, netip.MustParsePrefix(anonFrontend.Spec.LoadBalancerSourceRanges[0]).Contains(nodeA.Addresses[0]))
	// and every slice still belongs to its service (the one whose service
	// kube-proxy ignores had none to begin with).
	orphans := func(set *Set) int {
		n := 0
		for _, sl := range set.EndpointSlices {
			found := false
			for _, svc := range set.Services {
				found = found || svc.Namespace == sl.Namespace && svc.Name == sl.Labels[LabelServiceName]
			}
			if !found {
				n++
			}
		}
		return n
	}
	require.Equal(t, 1, orphans(s))
	require.Equal(t, orphans(s), orphans(a1))
}

func condString(c discoveryv1.EndpointConditions) string {
	b := func(p *bool) string {
		if p == nil {
			return "nil"
		}
		if *p {
			return "t"
		}
		return "f"
	}
	return b(c.Ready) + b(c.Serving) + b(c.Terminating)
}

func findService(t *testing.T, s *Set, ns, name string) *v1.Service {
	t.Helper()
	for _, svc := range s.Services {
		if svc.Namespace == ns && svc.Name == name {
			return svc
		}
	}
	t.Fatalf("no service %s/%s", ns, name)
	return nil
}

func TestApply(t *testing.T) {
	base := loadExample(t)
	changes, err := Load("testdata/example-changes.yaml")
	require.NoError(t, err)
	final, events := base.Apply(changes)
	var got []string
	for _, e := range events {
		got = append(got, string(e.Op)+" "+e.Kind+" "+e.ObjectID)
	}
	require.Equal(t, []string{
		"delete Service shop/catalog", // handed to another proxy: the informer sees a delete
		"update Service shop/frontend",
		"delete Service shop/legacy",
		"add Service telemetry/syslog",
		"delete EndpointSlice shop/legacy-q2n7c",
		"update EndpointSlice shop/web-9tq4z",
		"add EndpointSlice telemetry/syslog-abcde",
	}, got)
	for _, e := range events {
		switch e.Op {
		case Update:
			require.True(t, e.Service.Old != nil || e.Slice.Old != nil)
			require.True(t, e.Service.New != nil || e.Slice.New != nil)
		case Delete:
			require.True(t, e.Service.New == nil && e.Slice.New == nil)
		}
	}
	svcs, slices := names(final)
	require.NotContains(t, svcs, "shop/legacy")
	require.NotContains(t, svcs, "shop/catalog")
	require.Contains(t, svcs, "telemetry/syslog")
	require.NotContains(t, slices, "shop/legacy-q2n7c")
	require.Contains(t, final.Ignored, Ignored{"Service", "shop/catalog", `labelled service.kubernetes.io/service-proxy-name="mesh-proxy": handled by another proxy`})
	require.Equal(t, base.Nodes, final.Nodes)

	// Deleting what is not there is no event; a deletion needs a kind that can be deleted.
	_, events = base.Apply(&Set{Deletions: []Deletion{{Kind: "Service", Namespace: "shop", Name: "nope"}}})
	require.Empty(t, events)
	_, err = Read("d.yaml", strings.NewReader("apiVersion: v1\nkind: Pod\nmetadata: {name: p, annotations: {kpsim.io/delete: \"true\"}}\n"))
	require.ErrorContains(t, err, "only Services, EndpointSlices and Nodes can be deleted")
}
