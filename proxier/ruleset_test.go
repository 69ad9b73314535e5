package proxier

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kpsim/kpsim/dataplane"
)

var updateRulesets = flag.Bool("update-rulesets", false, "rewrite the conformance suite's kube-proxy rulesets from the proxier")

// rulesetDir is where the conformance suite reads kube-proxy's rulesets from.
const rulesetDir = "../dataplane/conformance/testdata"

// TestFullRuleset writes kube-proxy's whole ruleset, every rule it can
// write, into the conformance suite (which restores it on every kernel and
// reads it back) and fails when the files there are not what the proxier
// writes today: go test ./proxier -run TestFullRuleset -update-rulesets.
//
// The cluster fills every set: a local endpoint (hairpin), NodePorts of each
// protocol with and without externalTrafficPolicy Local, external IPs of
// both kinds, load balancers with source ranges that hold the node (a
// KUBE-LOAD-BALANCER-SOURCE-IP entry) and that do not (a KUBE-IPVS-OUT-FILTER
// rule), and a health check node port; the node's Node object gives its IP.
func TestFullRuleset(t *testing.T) {
	configs := []struct {
		name string
		cfg  Config
	}{
		{"default", Config{}},
		{"cluster-cidr", Config{ClusterCIDRs: []string{"10.244.0.0/16", "fd00:10:244::/56"}}},
	}
	for _, f := range []dataplane.Family{dataplane.IPv4, dataplane.IPv6} {
		for _, c := range configs {
			t.Run(string(f)+"-"+c.name, func(t *testing.T) {
				rules, sets := fullRuleset(t, f, c.cfg)
				base := filepath.Join(rulesetDir, "kube-proxy-"+string(f)+"-"+c.name)
				for _, file := range []struct {
					path string
					got  []byte
				}{{base + ".rules", rules}, {base + ".sets", sets}} {
					if *updateRulesets {
						require.NoError(t, os.WriteFile(file.path, file.got, 0o644))
					}
					want, err := os.ReadFile(file.path)
					require.NoError(t, err, "go test ./proxier -run TestFullRuleset -update-rulesets writes it")
					require.Equal(t, string(want), string(file.got), "the proxier's ruleset changed: go test ./proxier -run TestFullRuleset -update-rulesets")
				}
			})
		}
	}
}

// fullRuleset syncs a proxier of family f on a cluster that fills every set
// and returns the iptables-restore payload it writes, the jumps from the
// built-in chains included, and the sets it matches, one "NAME TYPE" a line.
func fullRuleset(t *testing.T, f dataplane.Family, cfg Config) (rules, sets []byte) {
	e := newEnv(t, cfg)
	p := e.synced(e.proxier(f, 0))
	ip := func(v4, v6 string) string {
		if f == dataplane.IPv4 {
			return v4
		}
		return v6
	}
	nodeIP := dataplane.DefaultNodeAddresses[f].Addr().String()
	p.OnNodeAdd(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: testNode},
		Status: v1.NodeStatus{Addresses: []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: nodeIP}}}})
	local := func(a string) ep { return ep{ip: a, local: true} }
	const ns = "default"
	for _, s := range []struct {
		svc   *v1.Service
		proto v1.Protocol
		ep    string
	}{
		{service(ns, "hairpin", ip("10.96.0.10", "fd00:96::10")), v1.ProtocolTCP, ip("10.0.0.2", "fd00:1::2")},
		{service(ns, "tcp-local", ip("10.96.0.11", "fd00:96::11"), withNodePort(30080), withETPLocal(0),
			withExternalIPs(ip("203.0.113.5", "2001:db8::5"))), v1.ProtocolTCP, ip("10.0.0.3", "fd00:1::3")},
		{service(ns, "udp", ip("10.96.0.12", "fd00:96::12"), withNodePort(30081), withProtocol(v1.ProtocolUDP),
			withExternalIPs(ip("203.0.113.6", "2001:db8::6"))), v1.ProtocolUDP, ""},
		{service(ns, "udp-local", ip("10.96.0.13", "fd00:96::13"), withNodePort(30082), withProtocol(v1.ProtocolUDP), withETPLocal(0)), v1.ProtocolUDP, ""},
		{service(ns, "sctp", ip("10.96.0.14", "fd00:96::14"), withNodePort(30083), withProtocol(v1.ProtocolSCTP)), v1.ProtocolSCTP, ""},
		{service(ns, "sctp-local", ip("10.96.0.15", "fd00:96::15"), withNodePort(30084), withProtocol(v1.ProtocolSCTP), withETPLocal(0)), v1.ProtocolSCTP, ""},
		{service(ns, "lb-from-node", ip("10.96.0.16", "fd00:96::16"), withLB(ip("198.51.100.1", "2001:db8:1::1")),
			withSourceRanges(ip("192.168.0.0/16", "fd00::/8"))), v1.ProtocolTCP, ""},
		{service(ns, "lb-local", ip("10.96.0.17", "fd00:96::17"), withLB(ip("198.51.100.2", "2001:db8:1::2")),
			withSourceRanges(ip("203.0.113.0/24", "2001:db8:2::/48")), withETPLocal(31003)), v1.ProtocolTCP, ""},
	} {
		p.OnServiceAdd(s.svc)
		if s.ep != "" {
			p.OnEndpointSliceAdd(slice(ns, s.svc.Name, s.svc.Name+"-1", 8080, s.proto, local(s.ep)))
		}
	}
	e.sync(p)
	for i, info := range setInfos {
		require.NotEmpty(t, p.entryRef[i], "set %s is empty: a rule that matches it would be missing", info.name)
	}
	require.NotEmpty(t, p.outFilter, "no KUBE-IPVS-OUT-FILTER rule")
	var b bytes.Buffer
	for i := range setInfos {
		spec := p.setSpec(setID(i))
		fmt.Fprintf(&b, "%s %s\n", spec.Name, spec.Type)
	}
	return p.iptablesPayload(true), b.Bytes()
}
