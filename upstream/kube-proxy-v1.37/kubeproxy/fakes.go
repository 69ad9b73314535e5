package kubeproxy

import (
	"net"
	"strings"

	"k8s.io/kubernetes/pkg/proxy/conntrack"
	"k8s.io/kubernetes/pkg/proxy/healthcheck"
	"k8s.io/kubernetes/pkg/proxy/ipvs"
	netlinktest "k8s.io/kubernetes/pkg/proxy/ipvs/testing"
	utiliptables "k8s.io/kubernetes/pkg/util/iptables"
	iptablestest "k8s.io/kubernetes/pkg/util/iptables/testing"

	"github.com/kpsim/kpsim/dataplane"
	"github.com/kpsim/kpsim/internal/private"
)

// useFakes replaces what ipvs.NewProxier wires to the real node and takes no
// parameter for: the netlink handle (it creates kube-ipvs0 and binds
// addresses in the caller's network namespace), the interface lister
// (NodePort addresses), conntrack (it deletes flows) and the service health
// server (it listens on health check node ports). Upstream's own tests set
// these fields from inside the package; from outside they are unexported,
// so they are set by name (package private), and a kube-proxy whose fields differ fails here
// rather than touching the host.
func useFakes(p *ipvs.Proxier, nl *netlinktest.FakeNetlinkHandle) error {
	for name, v := range map[string]any{
		"netlinkHandle":       nl,
		"networkInterfacer":   interfaces{nl},
		"conntrack":           conntrack.NewFake(),
		"serviceHealthServer": healthcheck.NewFakeServiceHealthServer(),
	} {
		if err := private.Set(p, name, v); err != nil {
			return err
		}
	}
	return nil
}

// interfaces lists the node's addresses as net.InterfaceAddrs does on a
// real node: every link's, kube-ipvs0's included (kube-proxy filters by
// nodePortAddresses and drops loopback itself).
type interfaces struct {
	nl *netlinktest.FakeNetlinkHandle
}

func (i interfaces) InterfaceAddrs() ([]net.Addr, error) {
	var out []net.Addr
	for _, link := range []string{"lo", "eth0", dataplane.DummyLink} {
		addrs, err := i.nl.ListBindAddress(link)
		if err != nil {
			continue // kube-ipvs0 before the first sync
		}
		for _, a := range addrs {
			ip := net.ParseIP(a)
			bits := 8 * len(ip)
			if ip.To4() != nil {
				ip, bits = ip.To4(), 32
			}
			out = append(out, &net.IPNet{IP: ip, Mask: net.CIDRMask(bits, bits)})
		}
	}
	return out, nil
}

// iptablesFake is upstream's iptables fake with rules added by EnsureRule
// kept as iptables-save prints them: the fake joins the arguments with
// spaces, so a multi-word comment would read as several words.
type iptablesFake struct{ *iptablestest.FakeIPTables }

func quoteArgs(args []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		if strings.ContainsAny(a, " \t") {
			a = `"` + a + `"`
		}
		out[i] = a
	}
	return out
}

func (f *iptablesFake) EnsureRule(pos utiliptables.RulePosition, table utiliptables.Table, chain utiliptables.Chain, args ...string) (bool, error) {
	return f.FakeIPTables.EnsureRule(pos, table, chain, quoteArgs(args)...)
}

func (f *iptablesFake) DeleteRule(table utiliptables.Table, chain utiliptables.Chain, args ...string) error {
	return f.FakeIPTables.DeleteRule(table, chain, quoteArgs(args)...)
}
