package cli

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kpsim/kpsim/objects"
	"github.com/kpsim/kpsim/proxier"
)

// TestStateFollowsKubeProxy runs small exports through kpsim state, one
// kube-proxy v1.37 behaviour each, and checks the virtual servers and set
// entries it dumps.
func TestStateFollowsKubeProxy(t *testing.T) {
	const node = `
apiVersion: v1
kind: Node
metadata: {name: node-a}
status: {addresses: [{type: InternalIP, address: 10.0.0.11}]}
`
	svc := func(spec string) string {
		return "---\napiVersion: v1\nkind: Service\nmetadata: {name: web, namespace: default}\nspec: " + spec + "\n"
	}
	slice := func(endpoints string) string {
		return "---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {name: web-1, namespace: default, labels: {kubernetes.io/service-name: web}}\n" +
			"addressType: IPv4\nports: [{name: '', port: 8080}]\nendpoints:\n" + endpoints
	}
	for _, tc := range []struct {
		name    string
		objects string
		cfg     proxier.Config
		vs      []string // virtual servers, as vsLine prints them
		sets    map[string][]string
	}{
		{
			name: "a terminating copy of an address, then a ready one: the ready one serves",
			objects: node + svc("{clusterIP: 10.96.0.10, ports: [{port: 80, targetPort: 8080}]}") + slice(`
- {addresses: [10.244.1.5], conditions: {ready: false, serving: true, terminating: true}, nodeName: node-b}
- {addresses: [10.244.1.5], conditions: {ready: true, serving: true, terminating: false}, nodeName: node-a}
- {addresses: [10.244.1.6], conditions: {ready: true}, nodeName: node-b}
`),
			vs:   []string{"10.96.0.10:80/TCP rr -> 10.244.1.5:8080@1 10.244.1.6:8080@1"},
			sets: map[string][]string{"KUBE-LOOP-BACK": {"10.244.1.5,tcp:8080,10.244.1.5"}},
		},
		{
			name: "an unset serving condition counts as serving",
			objects: node + svc("{clusterIP: 10.96.0.10, ports: [{port: 80, targetPort: 8080}]}") + slice(`
- {addresses: [10.244.1.5], conditions: {ready: false, terminating: true}, nodeName: node-b}
`),
			vs: []string{"10.96.0.10:80/TCP rr -> 10.244.1.5:8080@1"},
		},
		{
			// kube-proxy's node IP without a Node object is 127.0.0.1: the range
			// holding it lets the node in, the one holding eth0's address does not.
			name: "no Node object: the node IP is loopback",
			objects: svc(`{type: LoadBalancer, clusterIP: 10.96.0.10, loadBalancerSourceRanges: [127.0.0.0/8], ports: [{port: 80, targetPort: 8080, nodePort: 30080}]}
status: {loadBalancer: {ingress: [{ip: 198.51.100.1}]}}`),
			vs: []string{"10.96.0.10:80/TCP rr ->", "192.168.0.10:30080/TCP rr ->", "198.51.100.1:80/TCP rr ->"},
			sets: map[string][]string{
				"KUBE-LOAD-BALANCER-SOURCE-CIDR": {"198.51.100.1,tcp:80,127.0.0.0/8"},
				"KUBE-LOAD-BALANCER-SOURCE-IP":   {"198.51.100.1,tcp:80,198.51.100.1"},
			},
		},
		{
			name: "zone hints: this node's zone only",
			objects: `
apiVersion: v1
kind: Node
metadata: {name: node-a, labels: {topology.kubernetes.io/zone: zone-1}}
status: {addresses: [{type: InternalIP, address: 10.0.0.11}]}
` + svc("{clusterIP: 10.96.0.10, trafficDistribution: PreferSameZone, ports: [{port: 80, targetPort: 8080}]}") + slice(`
- {addresses: [10.244.1.5], conditions: {ready: true}, nodeName: node-a, hints: {forZones: [{name: zone-1}]}}
- {addresses: [10.244.2.5], conditions: {ready: true}, nodeName: node-b, hints: {forZones: [{name: zone-2}]}}
- {addresses: [10.244.3.5], conditions: {ready: true}, nodeName: node-c, hints: {forZones: [{name: zone-1}]}}
`),
			vs: []string{"10.96.0.10:80/TCP rr -> 10.244.1.5:8080@1 10.244.3.5:8080@1"},
		},
		{
			name: "node hints: this node's endpoints only",
			objects: node + svc("{clusterIP: 10.96.0.10, trafficDistribution: PreferSameNode, ports: [{port: 80, targetPort: 8080}]}") + slice(`
- {addresses: [10.244.1.5], conditions: {ready: true}, nodeName: node-a, hints: {forNodes: [{name: node-a}], forZones: [{name: zone-1}]}}
- {addresses: [10.244.2.5], conditions: {ready: true}, nodeName: node-b, hints: {forNodes: [{name: node-b}], forZones: [{name: zone-1}]}}
`),
			vs: []string{"10.96.0.10:80/TCP rr -> 10.244.1.5:8080@1"},
		},
		{
			name: "mh: the source port is hashed too; a padded source range counts",
			cfg:  proxier.Config{Scheduler: "mh"},
			objects: node + svc(`{type: LoadBalancer, clusterIP: 10.96.0.10, loadBalancerSourceRanges: [" 10.0.0.0/24"], ports: [{port: 80, targetPort: 8080, nodePort: 30080}]}
status: {loadBalancer: {ingress: [{ip: 198.51.100.1}]}}`),
			vs: []string{"10.0.0.11:30080/TCP mh 0x10/0 ->", "10.96.0.10:80/TCP mh 0x10/0 ->", "198.51.100.1:80/TCP mh 0x10/0 ->"},
			sets: map[string][]string{
				"KUBE-LOAD-BALANCER-SOURCE-CIDR": {"198.51.100.1,tcp:80,10.0.0.0/24"},
				"KUBE-LOAD-BALANCER-SOURCE-IP":   {"198.51.100.1,tcp:80,198.51.100.1"},
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			set, err := objects.Read("case.yaml", strings.NewReader(tc.objects))
			require.NoError(t, err)
			st := stateOf(t, set, tc.cfg)
			lines := vsLines(st)
			var got []string
			for _, v := range st.VirtualServers {
				got = append(got, lines[v.Key()])
			}
			require.Equal(t, tc.vs, got)
			entries := setEntries(st)
			for name, want := range tc.sets {
				require.Equal(t, want, entries[name], "ipset %s", name)
			}
		})
	}
}
