package proxier

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kpsim/kpsim/dataplane"
	"github.com/kpsim/kpsim/sim"
)

// Rule lines kube-proxy v1.37 writes, as iptables-save prints them back.
const (
	ruleClusterIPSrcDst = `-A KUBE-SERVICES -m comment --comment "Kubernetes service cluster ip + port for masquerade purpose" -m set --match-set KUBE-CLUSTER-IP src,dst -j KUBE-MARK-MASQ`
	ruleAcceptCluster   = `-A KUBE-SERVICES -m set --match-set KUBE-CLUSTER-IP dst,dst -j ACCEPT`
	ruleLoopBack        = `-A KUBE-POSTROUTING -m comment --comment "Kubernetes endpoints dst ip:port, source ip for solving hairpin purpose" -m set --match-set KUBE-LOOP-BACK dst,dst,src -j MASQUERADE`
	ruleNodePortTCP     = `-A KUBE-NODE-PORT -p tcp -m comment --comment "Kubernetes nodeport TCP port for masquerade purpose" -m set --match-set KUBE-NODE-PORT-TCP dst -j KUBE-MARK-MASQ`
	ruleNodePortUDP     = `-A KUBE-NODE-PORT -p udp -m comment --comment "Kubernetes nodeport UDP port for masquerade purpose" -m set --match-set KUBE-NODE-PORT-UDP dst -j KUBE-MARK-MASQ`
	ruleNodePortSCTP    = `-A KUBE-NODE-PORT -p sctp -m comment --comment "Kubernetes nodeport SCTP port for masquerade purpose with type \'hash ip:port\'" -m set --match-set KUBE-NODE-PORT-SCTP-HASH dst,dst -j KUBE-MARK-MASQ`
	ruleNodePortLocal   = `-A KUBE-NODE-PORT -p tcp -m comment --comment "Kubernetes nodeport TCP port with externalTrafficPolicy=local" -m set --match-set KUBE-NODE-PORT-LOCAL-TCP dst -j RETURN`
	ruleExternalMasq    = `-A KUBE-SERVICES -m comment --comment "Kubernetes service external ip + port for masquerade and filter purpose" -m set --match-set KUBE-EXTERNAL-IP dst,dst -j KUBE-MARK-MASQ`
	ruleExternalPhysdev = `-A KUBE-SERVICES -m comment --comment "Kubernetes service external ip + port for masquerade and filter purpose" -m set --match-set KUBE-EXTERNAL-IP dst,dst -m physdev ! --physdev-is-in -m addrtype ! --src-type LOCAL -j ACCEPT`
	ruleExternalLocal   = `-A KUBE-SERVICES -m comment --comment "Kubernetes service external ip + port with externalTrafficPolicy=local" -m set --match-set KUBE-EXTERNAL-IP-LOCAL dst,dst -m addrtype --dst-type LOCAL -j ACCEPT`
	ruleLB              = `-A KUBE-SERVICES -m comment --comment "Kubernetes service lb portal" -m set --match-set KUBE-LOAD-BALANCER dst,dst -j KUBE-LOAD-BALANCER`
	ruleLBAccept        = `-A KUBE-SERVICES -m set --match-set KUBE-LOAD-BALANCER dst,dst -j ACCEPT`
	ruleLBLocal         = `-A KUBE-LOAD-BALANCER -m comment --comment "Kubernetes service load balancer ip + port with externalTrafficPolicy=local" -m set --match-set KUBE-LOAD-BALANCER-LOCAL dst,dst -j RETURN`
	ruleLBFW            = `-A KUBE-PROXY-FIREWALL -m comment --comment "Kubernetes service load balancer ip + port for load balancer with sourceRange" -m set --match-set KUBE-LOAD-BALANCER-FW dst,dst -j KUBE-SOURCE-RANGES-FIREWALL`
	ruleLBSourceCIDR    = `-A KUBE-SOURCE-RANGES-FIREWALL -m comment --comment "Kubernetes service load balancer ip + port + source cidr for packet filter purpose" -m set --match-set KUBE-LOAD-BALANCER-SOURCE-CIDR dst,dst,src -j RETURN`
	ruleLBSourceIP      = `-A KUBE-SOURCE-RANGES-FIREWALL -m comment --comment "Kubernetes service load balancer ip + port + source IP for packet filter purpose" -m set --match-set KUBE-LOAD-BALANCER-SOURCE-IP dst,dst,src -j RETURN`
	ruleOutFilter       = `-A KUBE-IPVS-OUT-FILTER -s 198.51.100.1/32 -m ipvs --vproto 6 --vaddr 198.51.100.1 --vport 80 -j DROP`
	ruleHealthCheck     = `-A KUBE-NODE-PORT -m comment --comment "Kubernetes health check node port" -m set --match-set KUBE-HEALTH-CHECK-NODE-PORT dst -j ACCEPT`
	ruleIPVSReject      = `-A KUBE-IPVS-FILTER -m conntrack --ctstate NEW -m set --match-set KUBE-IPVS-IPS dst -j REJECT --reject-with icmp-port-unreachable`
	ruleMasquerade      = `-A KUBE-POSTROUTING -m comment --comment "kubernetes service traffic requiring SNAT" -j MASQUERADE --random-fully`
	ruleMarkMasq        = `-A KUBE-MARK-MASQ -j MARK --set-xmark 0x4000/0x4000`
	rulePostReturn      = `-A KUBE-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN`
	ruleForwardMark     = `-A KUBE-FORWARD -m comment --comment "kubernetes forwarding rules" -m mark --mark 0x4000/0x4000 -j ACCEPT`
)

// alwaysRules are written whatever the services.
var alwaysRules = []string{
	`-A KUBE-SERVICES -s 127.0.0.0/8 -j RETURN`,
	`-A KUBE-SERVICES -m addrtype --dst-type LOCAL -j KUBE-NODE-PORT`,
	`-A KUBE-LOAD-BALANCER -j KUBE-MARK-MASQ`,
	`-A KUBE-SOURCE-RANGES-FIREWALL -j DROP`,
	`-A KUBE-IPVS-FILTER -m set --match-set KUBE-LOAD-BALANCER dst,dst -j RETURN`,
	`-A KUBE-IPVS-FILTER -m set --match-set KUBE-CLUSTER-IP dst,dst -j RETURN`,
	`-A KUBE-IPVS-FILTER -m set --match-set KUBE-EXTERNAL-IP dst,dst -j RETURN`,
	`-A KUBE-IPVS-FILTER -m set --match-set KUBE-EXTERNAL-IP-LOCAL dst,dst -j RETURN`,
	`-A KUBE-IPVS-FILTER -m set --match-set KUBE-HEALTH-CHECK-NODE-PORT dst -j RETURN`,
	ruleIPVSReject, ruleHealthCheck, ruleMasquerade, ruleMarkMasq, rulePostReturn, ruleForwardMark,
	`-A KUBE-POSTROUTING -j MARK --set-xmark 0x4000/0x0`,
	`-A KUBE-FORWARD -m comment --comment "kubernetes forwarding conntrack rule" -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT`,
	`-A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES`,
	`-A OUTPUT -m comment --comment "kubernetes service portals" -j KUBE-SERVICES`,
	`-A POSTROUTING -m comment --comment "kubernetes postrouting rules" -j KUBE-POSTROUTING`,
	`-A INPUT -m comment --comment "kubernetes health check rules" -j KUBE-NODE-PORT`,
	`-A FORWARD -m comment --comment "kube-proxy firewall rules" -j KUBE-PROXY-FIREWALL`,
	`-A OUTPUT -m comment --comment "kubernetes ipvs access filter" -j KUBE-IPVS-OUT-FILTER`,
}

func TestServiceTypes(t *testing.T) {
	const ns = "default"
	local := func(ip string) ep { return ep{ip: ip, local: true} }
	tests := []struct {
		name   string
		cfg    Config
		setup  func(t *testing.T, k *sim.Kernel)
		svc    *v1.Service
		slices []*discoveryv1.EndpointSlice
		vs     map[string][]string
		sets   map[string][]string
		addrs  []string
		rules  []string
		// noRules are substrings no rule may contain.
		noRules []string
	}{
		{
			name:   "clusterip",
			svc:    service(ns, "web", "10.96.0.10"),
			slices: []*discoveryv1.EndpointSlice{slice(ns, "web", "web-1", 8080, v1.ProtocolTCP, ep{ip: "10.0.0.1"}, local("10.0.0.2"))},
			vs:     map[string][]string{"10.96.0.10:80/TCP": {"10.0.0.1:8080 w1", "10.0.0.2:8080 w1"}},
			sets: map[string][]string{
				"KUBE-CLUSTER-IP": {"10.96.0.10,tcp:80"},
				"KUBE-IPVS-IPS":   {"10.96.0.10"},
				"KUBE-LOOP-BACK":  {"10.0.0.2,tcp:8080,10.0.0.2"},
			},
			addrs:   []string{"10.96.0.10"},
			rules:   []string{ruleClusterIPSrcDst, ruleAcceptCluster, ruleLoopBack},
			noRules: []string{"KUBE-NODE-PORT-TCP", "KUBE-LOAD-BALANCER dst,dst -j KUBE-LOAD-BALANCER", "KUBE-IPVS-OUT-FILTER -s"},
		},
		{
			name: "endpoint conditions: not ready, terminating and unset",
			svc:  service(ns, "web", "10.96.0.10"),
			slices: []*discoveryv1.EndpointSlice{slice(ns, "web", "web-1", 8080, v1.ProtocolTCP,
				ep{ip: "10.0.0.1"}, ep{ip: "10.0.0.2", notReady: true, local: true},
				ep{ip: "10.0.0.3", terminating: true, local: true}, ep{ip: "10.0.0.4", unset: true})},
			vs: map[string][]string{"10.96.0.10:80/TCP": {"10.0.0.1:8080 w1", "10.0.0.4:8080 w1"}},
			sets: map[string][]string{
				"KUBE-CLUSTER-IP": {"10.96.0.10,tcp:80"},
				"KUBE-IPVS-IPS":   {"10.96.0.10"},
				// Hairpin covers every local endpoint, ready or not.
				"KUBE-LOOP-BACK": {"10.0.0.2,tcp:8080,10.0.0.2", "10.0.0.3,tcp:8080,10.0.0.3"},
			},
			addrs: []string{"10.96.0.10"},
		},
		{
			// A pod IP reused while the old pod terminates: the running copy wins
			// wherever it is listed; of two running copies the later one.
			name: "the same address twice: the non-terminating copy, else the later",
			svc:  service(ns, "web", "10.96.0.10"),
			slices: []*discoveryv1.EndpointSlice{slice(ns, "web", "web-1", 8080, v1.ProtocolTCP,
				ep{ip: "10.0.0.1"},
				ep{ip: "10.0.0.3", terminating: true}, ep{ip: "10.0.0.3"},
				ep{ip: "10.0.0.4"}, ep{ip: "10.0.0.4", terminating: true},
				ep{ip: "10.0.0.5"}, ep{ip: "10.0.0.5", notReady: true})},
			vs:    map[string][]string{"10.96.0.10:80/TCP": {"10.0.0.1:8080 w1", "10.0.0.3:8080 w1", "10.0.0.4:8080 w1"}},
			sets:  map[string][]string{"KUBE-CLUSTER-IP": {"10.96.0.10,tcp:80"}, "KUBE-IPVS-IPS": {"10.96.0.10"}},
			addrs: []string{"10.96.0.10"},
		},
		{
			name: "a terminating endpoint without a serving condition serves",
			svc:  service(ns, "web", "10.96.0.10"),
			slices: []*discoveryv1.EndpointSlice{func() *discoveryv1.EndpointSlice {
				s := slice(ns, "web", "web-1", 8080, v1.ProtocolTCP, ep{ip: "10.0.0.3", terminating: true})
				s.Endpoints[0].Conditions.Serving = nil
				return s
			}()},
			vs:    map[string][]string{"10.96.0.10:80/TCP": {"10.0.0.3:8080 w1"}},
			sets:  map[string][]string{"KUBE-CLUSTER-IP": {"10.96.0.10,tcp:80"}, "KUBE-IPVS-IPS": {"10.96.0.10"}},
			addrs: []string{"10.96.0.10"},
		},
		{
			name:   "only terminating endpoints still serve",
			svc:    service(ns, "web", "10.96.0.10"),
			slices: []*discoveryv1.EndpointSlice{slice(ns, "web", "web-1", 8080, v1.ProtocolTCP, ep{ip: "10.0.0.3", terminating: true})},
			vs:     map[string][]string{"10.96.0.10:80/TCP": {"10.0.0.3:8080 w1"}},
			sets:   map[string][]string{"KUBE-CLUSTER-IP": {"10.96.0.10,tcp:80"}, "KUBE-IPVS-IPS": {"10.96.0.10"}},
			addrs:  []string{"10.96.0.10"},
		},
		{
			name:    "no endpoints",
			svc:     service(ns, "web", "10.96.0.10"),
			vs:      map[string][]string{"10.96.0.10:80/TCP": {}},
			sets:    map[string][]string{"KUBE-CLUSTER-IP": {"10.96.0.10,tcp:80"}, "KUBE-IPVS-IPS": {"10.96.0.10"}},
			addrs:   []string{"10.96.0.10"},
			rules:   []string{ruleClusterIPSrcDst},
			noRules: []string{"KUBE-LOOP-BACK dst,dst,src"},
		},
		{
			name:   "nodeport tcp on every local address",
			svc:    service(ns, "web", "10.96.0.10", withNodePort(30080)),
			slices: []*discoveryv1.EndpointSlice{slice(ns, "web", "web-1", 8080, v1.ProtocolTCP, eps("10.0.0.1")...)},
			vs: map[string][]string{
				"10.96.0.10:80/TCP":      {"10.0.0.1:8080 w1"},
				"192.168.0.10:30080/TCP": {"10.0.0.1:8080 w1"},
			},
			sets: map[string][]string{
				"KUBE-CLUSTER-IP":    {"10.96.0.10,tcp:80"},
				"KUBE-IPVS-IPS":      {"10.96.0.10"},
				"KUBE-NODE-PORT-TCP": {"30080"},
			},
			addrs: []string{"10.96.0.10"},
			rules: []string{ruleNodePortTCP},
		},
		{
			name: "nodeport addresses from CIDRs, secondary addresses included",
			cfg:  Config{NodePortAddresses: []string{"192.168.0.0/24"}},
			setup: func(t *testing.T, k *sim.Kernel) {
				require.NoError(t, k.AddLocalAddress("eth0", netip.MustParsePrefix("192.168.0.11/24")))
				require.NoError(t, k.AddLocalAddress("eth0", netip.MustParsePrefix("10.1.0.5/24")))
			},
			svc:    service(ns, "web", "10.96.0.10", withNodePort(30080)),
			slices: []*discoveryv1.EndpointSlice{slice(ns, "web", "web-1", 8080, v1.ProtocolTCP, eps("10.0.0.1")...)},
			vs: map[string][]string{
				"10.96.0.10:80/TCP":      {"10.0.0.1:8080 w1"},
				"192.168.0.10:30080/TCP": {"10.0.0.1:8080 w1"},
				"192.168.0.11:30080/TCP": {"10.0.0.1:8080 w1"},
			},
			sets: map[string][]string{
				"KUBE-CLUSTER-IP":    {"10.96.0.10,tcp:80"},
				"KUBE-IPVS-IPS":      {"10.96.0.10"},
				"KUBE-NODE-PORT-TCP": {"30080"},
			},
			addrs: []string{"10.96.0.10"},
		},
		{
			name:   "nodeport udp",
			svc:    service(ns, "dns", "10.96.0.53", withNodePort(30053), withProtocol(v1.ProtocolUDP)),
			slices: []*discoveryv1.EndpointSlice{slice(ns, "dns", "dns-1", 53, v1.ProtocolUDP, eps("10.0.0.1")...)},
			vs: map[string][]string{
				"10.96.0.53:80/UDP":      {"10.0.0.1:53 w1"},
				"192.168.0.10:30053/UDP": {"10.0.0.1:53 w1"},
			},
			sets: map[string][]string{
				"KUBE-CLUSTER-IP":    {"10.96.0.53,udp:80"},
				"KUBE-IPVS-IPS":      {"10.96.0.53"},
				"KUBE-NODE-PORT-UDP": {"30053"},
			},
			addrs: []string{"10.96.0.53"},
			rules: []string{ruleNodePortUDP},
		},
		{
			name:   "nodeport sctp: one hash entry per node address",
			svc:    service(ns, "s", "10.96.0.7", withNodePort(30132), withProtocol(v1.ProtocolSCTP)),
			slices: []*discoveryv1.EndpointSlice{slice(ns, "s", "s-1", 9000, v1.ProtocolSCTP, eps("10.0.0.1")...)},
			vs: map[string][]string{
				"10.96.0.7:80/SCTP":       {"10.0.0.1:9000 w1"},
				"192.168.0.10:30132/SCTP": {"10.0.0.1:9000 w1"},
			},
			sets: map[string][]string{
				"KUBE-CLUSTER-IP":          {"10.96.0.7,sctp:80"},
				"KUBE-IPVS-IPS":            {"10.96.0.7"},
				"KUBE-NODE-PORT-SCTP-HASH": {"192.168.0.10,sctp:30132"},
			},
			addrs: []string{"10.96.0.7"},
			rules: []string{ruleNodePortSCTP},
		},
		{
			name:   "external IPs; a node address is served but not bound",
			svc:    service(ns, "web", "10.96.0.10", withExternalIPs("203.0.113.5", "192.168.0.10", "2001:db8::5")),
			slices: []*discoveryv1.EndpointSlice{slice(ns, "web", "web-1", 8080, v1.ProtocolTCP, eps("10.0.0.1")...)},
			vs: map[string][]string{
				"10.96.0.10:80/TCP":   {"10.0.0.1:8080 w1"},
				"203.0.113.5:80/TCP":  {"10.0.0.1:8080 w1"},
				"192.168.0.10:80/TCP": {"10.0.0.1:8080 w1"},
			},
			sets: map[string][]string{
				"KUBE-CLUSTER-IP":  {"10.96.0.10,tcp:80"},
				"KUBE-EXTERNAL-IP": {"192.168.0.10,tcp:80", "203.0.113.5,tcp:80"},
				"KUBE-IPVS-IPS":    {"10.96.0.10", "203.0.113.5"},
			},
			addrs: []string{"10.96.0.10", "203.0.113.5"},
			rules: []string{ruleExternalMasq, ruleExternalPhysdev},
		},
		{
			name: "external IPs with externalTrafficPolicy Local use local endpoints",
			svc:  service(ns, "web", "10.96.0.10", withExternalIPs("203.0.113.5"), withETPLocal(0)),
			slices: []*discoveryv1.EndpointSlice{slice(ns, "web", "web-1", 8080, v1.ProtocolTCP,
				ep{ip: "10.0.0.1"}, local("10.0.0.2"))},
			vs: map[string][]string{
				"10.96.0.10:80/TCP":  {"10.0.0.1:8080 w1", "10.0.0.2:8080 w1"},
				"203.0.113.5:80/TCP": {"10.0.0.2:8080 w1"},
			},
			sets: map[string][]string{
				"KUBE-CLUSTER-IP":        {"10.96.0.10,tcp:80"},
				"KUBE-EXTERNAL-IP-LOCAL": {"203.0.113.5,tcp:80"},
				"KUBE-IPVS-IPS":          {"10.96.0.10", "203.0.113.5"},
				"KUBE-LOOP-BACK":         {"10.0.0.2,tcp:8080,10.0.0.2"},
			},
			addrs:   []string{"10.96.0.10", "203.0.113.5"},
			rules:   []string{ruleExternalLocal},
			noRules: []string{"KUBE-EXTERNAL-IP dst,dst -j KUBE-MARK-MASQ"},
		},
		{
			name:   "load balancer",
			svc:    service(ns, "web", "10.96.0.10", withLB("198.51.100.1")),
			slices: []*discoveryv1.EndpointSlice{slice(ns, "web", "web-1", 8080, v1.ProtocolTCP, eps("10.0.0.1")...)},
			vs: map[string][]string{
				"10.96.0.10:80/TCP":      {"10.0.0.1:8080 w1"},
				"198.51.100.1:80/TCP":    {"10.0.0.1:8080 w1"},
				"192.168.0.10:30500/TCP": {"10.0.0.1:8080 w1"},
			},
			sets: map[string][]string{
				"KUBE-CLUSTER-IP":    {"10.96.0.10,tcp:80"},
				"KUBE-LOAD-BALANCER": {"198.51.100.1,tcp:80"},
				"KUBE-IPVS-IPS":      {"10.96.0.10", "198.51.100.1"},
				"KUBE-NODE-PORT-TCP": {"30500"},
			},
			addrs:   []string{"10.96.0.10", "198.51.100.1"},
			rules:   []string{ruleLB, ruleLBAccept},
			noRules: []string{"KUBE-LOAD-BALANCER-FW", "KUBE-IPVS-OUT-FILTER -s"},
		},
		{
			name: "load balancer ingress with ipMode Proxy or a hostname programs nothing",
			svc: service(ns, "web", "10.96.0.10", withLB(),
				withIngress(v1.LoadBalancerIngress{IP: "198.51.100.2", IPMode: ptr(v1.LoadBalancerIPModeProxy)}),
				withIngress(v1.LoadBalancerIngress{Hostname: "lb.example.com"})),
			slices: []*discoveryv1.EndpointSlice{slice(ns, "web", "web-1", 8080, v1.ProtocolTCP, eps("10.0.0.1")...)},
			vs: map[string][]string{
				"10.96.0.10:80/TCP":      {"10.0.0.1:8080 w1"},
				"192.168.0.10:30500/TCP": {"10.0.0.1:8080 w1"},
			},
			sets: map[string][]string{
				"KUBE-CLUSTER-IP":    {"10.96.0.10,tcp:80"},
				"KUBE-IPVS-IPS":      {"10.96.0.10"},
				"KUBE-NODE-PORT-TCP": {"30500"},
			},
			addrs:   []string{"10.96.0.10"},
			noRules: []string{ruleLB},
		},
		{
			name:   "source ranges without the node: drop node access to the VIP",
			svc:    service(ns, "web", "10.96.0.10", withLB("198.51.100.1"), withSourceRanges("203.0.113.0/24", "2001:db8::/32", "203.0.113.9/32")),
			slices: []*discoveryv1.EndpointSlice{slice(ns, "web", "web-1", 8080, v1.ProtocolTCP, eps("10.0.0.1")...)},
			vs: map[string][]string{
				"10.96.0.10:80/TCP":      {"10.0.0.1:8080 w1"},
				"198.51.100.1:80/TCP":    {"10.0.0.1:8080 w1"},
				"192.168.0.10:30500/TCP": {"10.0.0.1:8080 w1"},
			},
			sets: map[string][]string{
				"KUBE-CLUSTER-IP":                {"10.96.0.10,tcp:80"},
				"KUBE-LOAD-BALANCER":             {"198.51.100.1,tcp:80"},
				"KUBE-LOAD-BALANCER-FW":          {"198.51.100.1,tcp:80"},
				"KUBE-LOAD-BALANCER-SOURCE-CIDR": {"198.51.100.1,tcp:80,203.0.113.0/24", "198.51.100.1,tcp:80,203.0.113.9"},
				"KUBE-IPVS-IPS":                  {"10.96.0.10", "198.51.100.1"},
				"KUBE-NODE-PORT-TCP":             {"30500"},
			},
			addrs:   []string{"10.96.0.10", "198.51.100.1"},
			rules:   []string{ruleLBFW, ruleLBSourceCIDR, ruleOutFilter},
			noRules: []string{"KUBE-LOAD-BALANCER-SOURCE-IP"},
		},
		{
			// Without a Node object kube-proxy's node IP is 127.0.0.1.
			name:   "source ranges with the node IP: a source IP entry instead",
			svc:    service(ns, "web", "10.96.0.10", withLB("198.51.100.1"), withSourceRanges("127.0.0.0/8")),
			slices: []*discoveryv1.EndpointSlice{slice(ns, "web", "web-1", 8080, v1.ProtocolTCP, eps("10.0.0.1")...)},
			vs: map[string][]string{
				"10.96.0.10:80/TCP":      {"10.0.0.1:8080 w1"},
				"198.51.100.1:80/TCP":    {"10.0.0.1:8080 w1"},
				"192.168.0.10:30500/TCP": {"10.0.0.1:8080 w1"},
			},
			sets: map[string][]string{
				"KUBE-CLUSTER-IP":                {"10.96.0.10,tcp:80"},
				"KUBE-LOAD-BALANCER":             {"198.51.100.1,tcp:80"},
				"KUBE-LOAD-BALANCER-FW":          {"198.51.100.1,tcp:80"},
				"KUBE-LOAD-BALANCER-SOURCE-CIDR": {"198.51.100.1,tcp:80,127.0.0.0/8"},
				"KUBE-LOAD-BALANCER-SOURCE-IP":   {"198.51.100.1,tcp:80,198.51.100.1"},
				"KUBE-IPVS-IPS":                  {"10.96.0.10", "198.51.100.1"},
				"KUBE-NODE-PORT-TCP":             {"30500"},
			},
			addrs:   []string{"10.96.0.10", "198.51.100.1"},
			rules:   []string{ruleLBFW, ruleLBSourceCIDR, ruleLBSourceIP},
			noRules: []string{"KUBE-IPVS-OUT-FILTER -s"},
		},
		{
			// The API server accepts ranges with spaces around; kube-proxy trims them.
			name:   "a padded source range counts",
			svc:    service(ns, "web", "10.96.0.10", withLB("198.51.100.1"), withSourceRanges(" 203.0.113.0/24 ")),
			slices: []*discoveryv1.EndpointSlice{slice(ns, "web", "web-1", 8080, v1.ProtocolTCP, eps("10.0.0.1")...)},
			vs: map[string][]string{
				"10.96.0.10:80/TCP":      {"10.0.0.1:8080 w1"},
				"198.51.100.1:80/TCP":    {"10.0.0.1:8080 w1"},
				"192.168.0.10:30500/TCP": {"10.0.0.1:8080 w1"},
			},
			sets: map[string][]string{
				"KUBE-CLUSTER-IP":                {"10.96.0.10,tcp:80"},
				"KUBE-LOAD-BALANCER":             {"198.51.100.1,tcp:80"},
				"KUBE-LOAD-BALANCER-FW":          {"198.51.100.1,tcp:80"},
				"KUBE-LOAD-BALANCER-SOURCE-CIDR": {"198.51.100.1,tcp:80,203.0.113.0/24"},
				"KUBE-IPVS-IPS":                  {"10.96.0.10", "198.51.100.1"},
				"KUBE-NODE-PORT-TCP":             {"30500"},
			},
			addrs: []string{"10.96.0.10", "198.51.100.1"},
			rules: []string{ruleLBFW, ruleLBSourceCIDR, ruleOutFilter},
		},
		{
			name:   "source range 0.0.0.0/0 means no ranges",
			svc:    service(ns, "web", "10.96.0.10", withLB("198.51.100.1"), withSourceRanges("203.0.113.0/24", "0.0.0.0/0")),
			slices: []*discoveryv1.EndpointSlice{slice(ns, "web", "web-1", 8080, v1.ProtocolTCP, eps("10.0.0.1")...)},
			vs: map[string][]string{
				"10.96.0.10:80/TCP":      {"10.0.0.1:8080 w1"},
				"198.51.100.1:80/TCP":    {"10.0.0.1:8080 w1"},
				"192.168.0.10:30500/TCP": {"10.0.0.1:8080 w1"},
			},
			sets: map[string][]string{
				"KUBE-CLUSTER-IP":    {"10.96.0.10,tcp:80"},
				"KUBE-LOAD-BALANCER": {"198.51.100.1,tcp:80"},
				"KUBE-IPVS-IPS":      {"10.96.0.10", "198.51.100.1"},
				"KUBE-NODE-PORT-TCP": {"30500"},
			},
			addrs:   []string{"10.96.0.10", "198.51.100.1"},
			noRules: []string{"KUBE-LOAD-BALANCER-FW", "KUBE-IPVS-OUT-FILTER -s"},
		},
		{
			name: "load balancer with externalTrafficPolicy Local and a health check port",
			svc:  service(ns, "web", "10.96.0.10", withLB("198.51.100.1"), withETPLocal(32000)),
			slices: []*discoveryv1.EndpointSlice{slice(ns, "web", "web-1", 8080, v1.ProtocolTCP,
				ep{ip: "10.0.0.1"}, local("10.0.0.2"))},
			vs: map[string][]string{
				"10.96.0.10:80/TCP":      {"10.0.0.1:8080 w1", "10.0.0.2:8080 w1"},
				"198.51.100.1:80/TCP":    {"10.0.0.2:8080 w1"},
				"192.168.0.10:30500/TCP": {"10.0.0.2:8080 w1"},
			},
			sets: map[string][]string{
				"KUBE-CLUSTER-IP":             {"10.96.0.10,tcp:80"},
				"KUBE-LOAD-BALANCER":          {"198.51.100.1,tcp:80"},
				"KUBE-LOAD-BALANCER-LOCAL":    {"198.51.100.1,tcp:80"},
				"KUBE-IPVS-IPS":               {"10.96.0.10", "198.51.100.1"},
				"KUBE-NODE-PORT-TCP":          {"30500"},
				"KUBE-NODE-PORT-LOCAL-TCP":    {"30500"},
				"KUBE-HEALTH-CHECK-NODE-PORT": {"32000"},
				"KUBE-LOOP-BACK":              {"10.0.0.2,tcp:8080,10.0.0.2"},
			},
			addrs: []string{"10.96.0.10", "198.51.100.1"},
			rules: []string{ruleLBLocal, ruleNodePortLocal, ruleNodePortTCP, ruleHealthCheck},
		},
		{
			name:   "externalTrafficPolicy Local without a local endpoint falls back to all",
			svc:    service(ns, "web", "10.96.0.10", withNodePort(30080), withETPLocal(0)),
			slices: []*discoveryv1.EndpointSlice{slice(ns, "web", "web-1", 8080, v1.ProtocolTCP, eps("10.0.0.1")...)},
			vs: map[string][]string{
				"10.96.0.10:80/TCP":      {"10.0.0.1:8080 w1"},
				"192.168.0.10:30080/TCP": {"10.0.0.1:8080 w1"},
			},
			sets: map[string][]string{
				"KUBE-CLUSTER-IP":          {"10.96.0.10,tcp:80"},
				"KUBE-IPVS-IPS":            {"10.96.0.10"},
				"KUBE-NODE-PORT-TCP":       {"30080"},
				"KUBE-NODE-PORT-LOCAL-TCP": {"30080"},
			},
			addrs: []string{"10.96.0.10"},
		},
		{
			name: "internalTrafficPolicy Local",
			svc:  service(ns, "web", "10.96.0.10", withITPLocal()),
			slices: []*discoveryv1.EndpointSlice{slice(ns, "web", "web-1", 8080, v1.ProtocolTCP,
				ep{ip: "10.0.0.1"}, local("10.0.0.2"))},
			vs: map[string][]string{"10.96.0.10:80/TCP": {"10.0.0.2:8080 w1"}},
			sets: map[string][]string{
				"KUBE-CLUSTER-IP": {"10.96.0.10,tcp:80"},
				"KUBE-IPVS-IPS":   {"10.96.0.10"},
				"KUBE-LOOP-BACK":  {"10.0.0.2,tcp:8080,10.0.0.2"},
			},
			addrs: []string{"10.96.0.10"},
		},
		{
			name:   "internalTrafficPolicy Local without a local endpoint: no destination",
			svc:    service(ns, "web", "10.96.0.10", withITPLocal()),
			slices: []*discoveryv1.EndpointSlice{slice(ns, "web", "web-1", 8080, v1.ProtocolTCP, eps("10.0.0.1")...)},
			vs:     map[string][]string{"10.96.0.10:80/TCP": {}},
			sets:   map[string][]string{"KUBE-CLUSTER-IP": {"10.96.0.10,tcp:80"}, "KUBE-IPVS-IPS": {"10.96.0.10"}},
			addrs:  []string{"10.96.0.10"},
		},
		{
			// Reachable from outside, the port keeps its cluster endpoints for
			// both Local policies to fall back on.
			name:   "both policies Local on a node port, no local endpoint: every endpoint",
			svc:    service(ns, "web", "10.96.0.10", withITPLocal(), withNodePort(30080), withETPLocal(0)),
			slices: []*discoveryv1.EndpointSlice{slice(ns, "web", "web-1", 8080, v1.ProtocolTCP, eps("10.0.0.1")...)},
			vs: map[string][]string{
				"10.96.0.10:80/TCP":      {"10.0.0.1:8080 w1"},
				"192.168.0.10:30080/TCP": {"10.0.0.1:8080 w1"},
			},
			sets: map[string][]string{
				"KUBE-CLUSTER-IP":          {"10.96.0.10,tcp:80"},
				"KUBE-IPVS-IPS":            {"10.96.0.10"},
				"KUBE-NODE-PORT-TCP":       {"30080"},
				"KUBE-NODE-PORT-LOCAL-TCP": {"30080"},
			},
			addrs: []string{"10.96.0.10"},
		},
		{
			// Without node ports and without an ingress IP of its family a load
			// balancer takes no outside traffic here: nothing to fall back for.
			name: "internalTrafficPolicy Local on a load balancer without node ports or ingress: no destination",
			svc: service(ns, "web", "10.96.0.10", withITPLocal(), withType(v1.ServiceTypeLoadBalancer), withETPLocal(32000),
				withIngress(v1.LoadBalancerIngress{IP: "2001:db8::1"})),
			slices: []*discoveryv1.EndpointSlice{slice(ns, "web", "web-1", 8080, v1.ProtocolTCP, eps("10.0.0.1")...)},
			vs:     map[string][]string{"10.96.0.10:80/TCP": {}},
			sets: map[string][]string{
				"KUBE-CLUSTER-IP":             {"10.96.0.10,tcp:80"},
				"KUBE-IPVS-IPS":               {"10.96.0.10"},
				"KUBE-HEALTH-CHECK-NODE-PORT": {"32000"},
			},
			addrs: []string{"10.96.0.10"},
		},
		{
			name:    "headless service ignored",
			svc:     service(ns, "h", v1.ClusterIPNone),
			vs:      map[string][]string{},
			sets:    map[string][]string{},
			addrs:   []string{},
			noRules: []string{ruleClusterIPSrcDst},
		},
		{
			name:  "ExternalName service ignored",
			svc:   service(ns, "x", "10.96.0.11", withType(v1.ServiceTypeExternalName)),
			vs:    map[string][]string{},
			sets:  map[string][]string{},
			addrs: []string{},
		},
		{
			name: "service of another proxy ignored",
			svc: func() *v1.Service {
				s := service(ns, "o", "10.96.0.12")
				s.Labels = map[string]string{"service.kubernetes.io/service-proxy-name": "other"}
				return s
			}(),
			vs:    map[string][]string{},
			sets:  map[string][]string{},
			addrs: []string{},
		},
		{
			name: "slice without the service-name label ignored",
			svc:  service(ns, "web", "10.96.0.10"),
			slices: []*discoveryv1.EndpointSlice{func() *discoveryv1.EndpointSlice {
				s := slice(ns, "web", "web-1", 8080, v1.ProtocolTCP, eps("10.0.0.1")...)
				s.Labels = nil
				return s
			}()},
			vs:    map[string][]string{"10.96.0.10:80/TCP": {}},
			sets:  map[string][]string{"KUBE-CLUSTER-IP": {"10.96.0.10,tcp:80"}, "KUBE-IPVS-IPS": {"10.96.0.10"}},
			addrs: []string{"10.96.0.10"},
		},
		{
			// kube-proxy's slice informer selects on the headless label only.
			name: "slice labelled service-proxy-name counts, headless-labelled one does not",
			svc:  service(ns, "web", "10.96.0.10"),
			slices: []*discoveryv1.EndpointSlice{
				func() *discoveryv1.EndpointSlice {
					s := slice(ns, "web", "web-1", 8080, v1.ProtocolTCP, eps("10.0.0.1")...)
					s.Labels["service.kubernetes.io/service-proxy-name"] = "other"
					return s
				}(),
				func() *discoveryv1.EndpointSlice {
					s := slice(ns, "web", "web-2", 8080, v1.ProtocolTCP, eps("10.0.0.2")...)
					s.Labels["service.kubernetes.io/headless"] = ""
					return s
				}(),
			},
			vs:    map[string][]string{"10.96.0.10:80/TCP": {"10.0.0.1:8080 w1"}},
			sets:  map[string][]string{"KUBE-CLUSTER-IP": {"10.96.0.10,tcp:80"}, "KUBE-IPVS-IPS": {"10.96.0.10"}},
			addrs: []string{"10.96.0.10"},
		},
		{
			name: "several ports share the address",
			svc: service(ns, "dns", "10.96.0.53", withPorts(
				v1.ServicePort{Name: "dns", Port: 53, Protocol: v1.ProtocolUDP},
				v1.ServicePort{Name: "dns-tcp", Port: 53, Protocol: v1.ProtocolTCP})),
			vs:    map[string][]string{"10.96.0.53:53/UDP": {}, "10.96.0.53:53/TCP": {}},
			sets:  map[string][]string{"KUBE-CLUSTER-IP": {"10.96.0.53,tcp:53", "10.96.0.53,udp:53"}, "KUBE-IPVS-IPS": {"10.96.0.53"}},
			addrs: []string{"10.96.0.53"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, tc.cfg)
			if tc.setup != nil {
				tc.setup(t, e.k)
			}
			p := e.synced(e.proxier(dataplane.IPv4, 0))
			p.OnServiceAdd(tc.svc)
			for _, s := range tc.slices {
				p.OnEndpointSliceAdd(s)
			}
			rec := e.sync(p)
			require.True(t, rec.Full)

			require.Equal(t, tc.vs, ipvsState(t, e.k, dataplane.IPv4))
			require.Equal(t, tc.sets, setState(t, e.k, dataplane.IPv4))
			require.Equal(t, tc.addrs, boundAddrs(t, e.k, dataplane.IPv4))
			lines := append(ruleLines(t, e.k, dataplane.IPv4, "nat"), ruleLines(t, e.k, dataplane.IPv4, "filter")...)
			for _, r := range append(tc.rules, alwaysRules...) {
				require.Contains(t, lines, r)
			}
			for _, r := range tc.noRules {
				for _, l := range lines {
					require.NotContains(t, l, r)
				}
			}

			// The same state again is no work at all.
			again := e.sync(p)
			require.False(t, again.Full)
			require.Zero(t, writes(again.Ops), "%v", again.Ops)
			// And a full verification finds nothing to repair.
			full := p.SyncFull()
			require.Empty(t, full.Error)
			require.Zero(t, writes(full.Ops), "%v", full.Ops)
		})
	}
}

func ptr[T any](v T) *T { return &v }

func TestVirtualServerOptions(t *testing.T) {
	tests := []struct {
		name    string
		cfg     Config
		svc     *v1.Service
		want    dataplane.VirtualServer
		wantKey string
	}{
		{
			name:    "defaults: rr, no persistence",
			svc:     service("default", "web", "10.96.0.10"),
			wantKey: "10.96.0.10:80/TCP",
			want:    dataplane.VirtualServer{Scheduler: "rr", Netmask: 0xffffffff},
		},
		{
			name:    "session affinity ClientIP is persistence with the timeout",
			svc:     service("default", "web", "10.96.0.10", withAffinity(600)),
			wantKey: "10.96.0.10:80/TCP",
			want:    dataplane.VirtualServer{Scheduler: "rr", Flags: dataplane.FlagPersistent, Timeout: 600, Netmask: 0xffffffff},
		},
		{
			// kube-proxy's mh virtual servers hash the source port as well.
			name:    "mh with the source-port flag",
			cfg:     Config{Scheduler: "mh"},
			svc:     service("default", "web", "10.96.0.10", withAffinity(600)),
			wantKey: "10.96.0.10:80/TCP",
			want:    dataplane.VirtualServer{Scheduler: "mh", Flags: dataplane.FlagPersistent | dataplane.FlagSchedPort, Timeout: 600, Netmask: 0xffffffff},
		},
		{
			name:    "configured scheduler",
			cfg:     Config{Scheduler: "lc"},
			svc:     service("default", "web", "10.96.0.10"),
			wantKey: "10.96.0.10:80/TCP",
			want:    dataplane.VirtualServer{Scheduler: "lc", Netmask: 0xffffffff},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, tc.cfg)
			p := e.synced(e.proxier(dataplane.IPv4, 0))
			p.OnServiceAdd(tc.svc)
			e.sync(p)
			got := virtualServer(t, e.k, tc.wantKey)
			require.Equal(t, tc.want.Scheduler, got.Scheduler)
			require.Equal(t, tc.want.Flags, got.Flags&^dataplane.FlagHashed)
			require.Equal(t, tc.want.Timeout, got.Timeout)
			require.Equal(t, tc.want.Netmask, got.Netmask)
		})
	}
}

func TestClusterIPMasquerade(t *testing.T) {
	const rule = `-m comment --comment "Kubernetes service cluster ip + port for masquerade purpose" -m set --match-set KUBE-CLUSTER-IP `
	const prefix = `-A KUBE-SERVICES ` + rule
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{"masqueradeAll", Config{MasqueradeAll: true, ClusterCIDRs: []string{"10.244.0.0/16"}}, prefix + "dst,dst -j KUBE-MARK-MASQ"},
		{"cluster CIDR", Config{ClusterCIDRs: []string{"10.244.0.0/16", "fd00:244::/56"}}, `-A KUBE-SERVICES ! -s 10.244.0.0/16 ` + rule + "dst,dst -j KUBE-MARK-MASQ"},
		{"neither", Config{}, prefix + "src,dst -j KUBE-MARK-MASQ"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, tc.cfg)
			p := e.synced(e.proxier(dataplane.IPv4, 0))
			p.OnServiceAdd(service("default", "web", "10.96.0.10"))
			e.sync(p)
			lines := ruleLines(t, e.k, dataplane.IPv4, "nat")
			require.Contains(t, lines, tc.want)
			n := 0
			for _, l := range lines {
				if strings.Contains(l, rule) {
					n++
				}
			}
			require.Equal(t, 1, n, "exactly one KUBE-CLUSTER-IP masquerade rule")
		})
	}
}

func TestSysctls(t *testing.T) {
	tests := []struct {
		name      string
		strictARP bool
		want      map[string]string
	}{
		{"default", false, map[string]string{
			"net/ipv4/vs/conntrack": "1", "net/ipv4/vs/expire_nodest_conn": "1", "net/ipv4/vs/expire_quiescent_template": "1",
			"net/ipv4/ip_forward": "1", "net/ipv4/conf/all/arp_ignore": "0", "net/ipv4/conf/all/arp_announce": "0",
		}},
		{"strictARP", true, map[string]string{
			"net/ipv4/vs/conntrack": "1", "net/ipv4/conf/all/arp_ignore": "1", "net/ipv4/conf/all/arp_announce": "2",
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, Config{StrictARP: tc.strictARP})
			p := e.synced(e.proxier(dataplane.IPv4, 0))
			rec := e.sync(p)
			for k, v := range tc.want {
				got, err := e.k.Sysctl(k)
				require.NoError(t, err)
				require.Equal(t, v, got, k)
			}
			// bridge-nf-call-iptables is already 1 and forwarding already on
			// in the sim, as on a node that routes pods: written only when different.
			wantWrites := int64(3)
			if tc.strictARP {
				wantWrites = 5
			}
			require.Equal(t, wantWrites, rec.Ops[dataplane.OpSysctlWrite])
			// A restarted proxier finds them set and writes none.
			p2 := e.synced(e.proxier(dataplane.IPv4, 1))
			require.Zero(t, e.sync(p2).Ops[dataplane.OpSysctlWrite])
		})
	}
}

// TestNodePortAddresses: where NodePort virtual servers listen, as kube-proxy
// v1.37 lists node addresses: never loopback; without nodePortAddresses (or
// with a /0) every other address but IPv6 link-local ones; with them every
// address inside. A node port service port with no address at all has no
// node port entries, and kube-proxy skips its health check node port too.
func TestNodePortAddresses(t *testing.T) {
	svc := func(ip string) *v1.Service {
		return service("default", "lb", ip, withNodePort(30500), withType(v1.ServiceTypeLoadBalancer), withETPLocal(32000))
	}
	tests := []struct {
		name        string
		family      dataplane.Family
		nodePorts   []string
		svc         *v1.Service
		want        []string // node port virtual servers
		healthCheck bool
	}{
		{"IPv4 default", dataplane.IPv4, nil, svc("10.96.0.10"), []string{"169.254.10.1:30500/TCP", "192.168.0.10:30500/TCP"}, true},
		{"IPv4 /0", dataplane.IPv4, []string{"0.0.0.0/0"}, svc("10.96.0.10"), []string{"169.254.10.1:30500/TCP", "192.168.0.10:30500/TCP"}, true},
		{"IPv4 loopback only", dataplane.IPv4, []string{"127.0.0.0/8"}, svc("10.96.0.10"), nil, false},
		{"IPv6 default", dataplane.IPv6, nil, svc("fd00:96::10"), []string{"[fd00::10]:30500/TCP"}, true},
		{"IPv6 /0", dataplane.IPv6, []string{"::/0"}, svc("fd00:96::10"), []string{"[fd00::10]:30500/TCP"}, true},
		{"IPv6 link-local CIDR", dataplane.IPv6, []string{"fe80::/10", "::1/128"}, svc("fd00:96::10"), []string{"[fe80::5]:30500/TCP"}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, Config{Families: []dataplane.Family{tc.family}, NodePortAddresses: tc.nodePorts})
			require.NoError(t, e.k.AddLocalAddress("eth0", netip.MustParsePrefix("169.254.10.1/16")))
			require.NoError(t, e.k.AddLocalAddress("eth0", netip.MustParsePrefix("fe80::5/64")))
			p := e.synced(e.proxier(tc.family, 0))
			p.OnServiceAdd(tc.svc)
			e.sync(p)
			var got []string
			for k := range ipvsState(t, e.k, tc.family) {
				if strings.HasSuffix(k, ":30500/TCP") {
					got = append(got, k)
				}
			}
			slices.Sort(got)
			require.Equal(t, tc.want, got)
			sets := setState(t, e.k, tc.family)
			require.Equal(t, tc.healthCheck, len(sets[SetName("KUBE-HEALTH-CHECK-NODE-PORT", tc.family)]) > 0)
			require.Equal(t, tc.healthCheck, len(sets[SetName("KUBE-NODE-PORT-TCP", tc.family)]) > 0)
		})
	}
}

// TestTopology: kube-proxy v1.37's topology-aware routing. The hints on
// the ready endpoints decide: node hints when all have one and one names
// this node, else zone hints when all have one and one names this node's
// zone; otherwise every endpoint. Local policies and the terminating
// fallback ignore hints.
func TestTopology(t *testing.T) {
	type hinted struct {
		ip           string
		zones, nodes []string
		notReady     bool
		terminating  bool
		local        bool
	}
	tests := []struct {
		name   string
		zone   string // this node's topology.kubernetes.io/zone; "" no label
		svc    *v1.Service
		eps    []hinted
		want   []string // destinations of the cluster IP
		update string   // then this node's zone becomes this
		then   []string
	}{
		{name: "zone hints for this zone", zone: "a", eps: []hinted{
			{ip: "10.0.0.1", zones: []string{"a"}}, {ip: "10.0.0.2", zones: []string{"b"}}, {ip: "10.0.0.3", zones: []string{"a", "b"}}},
			want: []string{"10.0.0.1:8080 w1", "10.0.0.3:8080 w1"}, update: "b", then: []string{"10.0.0.2:8080 w1", "10.0.0.3:8080 w1"}},
		{name: "a ready endpoint without hints: hints ignored", zone: "a", eps: []hinted{
			{ip: "10.0.0.1", zones: []string{"a"}}, {ip: "10.0.0.2", zones: []string{"b"}}, {ip: "10.0.0.3"}},
			want: []string{"10.0.0.1:8080 w1", "10.0.0.2:8080 w1", "10.0.0.3:8080 w1"}},
		{name: "a not-ready endpoint without hints does not count", zone: "a", eps: []hinted{
			{ip: "10.0.0.1", zones: []string{"a"}}, {ip: "10.0.0.2", zones: []string{"b"}}, {ip: "10.0.0.3", notReady: true}},
			want: []string{"10.0.0.1:8080 w1"}},
		{name: "no hint for this zone: hints ignored", zone: "c", eps: []hinted{
			{ip: "10.0.0.1", zones: []string{"a"}}, {ip: "10.0.0.2", zones: []string{"b"}}},
			want: []string{"10.0.0.1:8080 w1", "10.0.0.2:8080 w1"}, update: "b", then: []string{"10.0.0.2:8080 w1"}},
		{name: "a node without a zone label: hints ignored", eps: []hinted{
			{ip: "10.0.0.1", zones: []string{"a"}}, {ip: "10.0.0.2", zones: []string{"b"}}},
			want: []string{"10.0.0.1:8080 w1", "10.0.0.2:8080 w1"}},
		{name: "node hints for this node win over zone hints", zone: "a", eps: []hinted{
			{ip: "10.0.0.1", zones: []string{"a"}, nodes: []string{"node-2"}}, {ip: "10.0.0.2", zones: []string{"b"}, nodes: []string{testNode}}},
			want: []string{"10.0.0.2:8080 w1"}},
		{name: "node hints for other nodes only: zone hints decide", zone: "a", eps: []hinted{
			{ip: "10.0.0.1", zones: []string{"a"}, nodes: []string{"node-2"}}, {ip: "10.0.0.2", zones: []string{"b"}, nodes: []string{"node-3"}}},
			want: []string{"10.0.0.1:8080 w1"}},
		{name: "node hints on some endpoints only: zone hints decide", zone: "b", eps: []hinted{
			{ip: "10.0.0.1", zones: []string{"a"}, nodes: []string{testNode}}, {ip: "10.0.0.2", zones: []string{"b"}}},
			want: []string{"10.0.0.2:8080 w1"}},
		{name: "no ready endpoint: the terminating fallback ignores hints", zone: "a", eps: []hinted{
			{ip: "10.0.0.1", zones: []string{"b"}, terminating: true}},
			want: []string{"10.0.0.1:8080 w1"}},
		{name: "internalTrafficPolicy Local ignores hints", zone: "a", svc: service("default", "web", "10.96.0.10", withITPLocal()), eps: []hinted{
			{ip: "10.0.0.1", zones: []string{"a"}}, {ip: "10.0.0.2", zones: []string{"b"}, local: true}},
			want: []string{"10.0.0.2:8080 w1"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, Config{})
			p := e.synced(e.proxier(dataplane.IPv4, 0))
			node := func(zone string) *v1.Node {
				n := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: testNode, Labels: map[string]string{}}}
				if zone != "" {
					n.Labels[v1.LabelTopologyZone] = zone
				}
				return n
			}
			p.OnNodeAdd(node(tc.zone))
			svc := tc.svc
			if svc == nil {
				svc = service("default", "web", "10.96.0.10")
			}
			p.OnServiceAdd(svc)
			var list []ep
			for _, h := range tc.eps {
				list = append(list, ep{ip: h.ip, local: h.local, notReady: h.notReady, terminating: h.terminating})
			}
			s := slice("default", "web", "web-1", 8080, v1.ProtocolTCP, list...)
			for i, h := range tc.eps {
				if h.zones == nil && h.nodes == nil {
					continue
				}
				s.Endpoints[i].Hints = &discoveryv1.EndpointHints{}
				for _, z := range h.zones {
					s.Endpoints[i].Hints.ForZones = append(s.Endpoints[i].Hints.ForZones, discoveryv1.ForZone{Name: z})
				}
				for _, n := range h.nodes {
					s.Endpoints[i].Hints.ForNodes = append(s.Endpoints[i].Hints.ForNodes, discoveryv1.ForNode{Name: n})
				}
			}
			p.OnEndpointSliceAdd(s)
			e.sync(p)
			require.Equal(t, tc.want, ipvsState(t, e.k, dataplane.IPv4)["10.96.0.10:80/TCP"])
			if tc.update != "" {
				p.OnNodeUpdate(nil, node(tc.update))
				require.False(t, e.sync(p).Full, "a zone change is an incremental sync")
				require.Equal(t, tc.then, ipvsState(t, e.k, dataplane.IPv4)["10.96.0.10:80/TCP"])
			}
		})
	}
}
