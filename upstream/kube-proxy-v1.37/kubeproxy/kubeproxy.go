// Package kubeproxy runs kube-proxy v1.37's own IPVS proxier (the
// k8s.io/kubernetes module, not a copy) for one node, gives it objects as
// kube-proxy's informers would, and dumps what it programmed in kpsim's
// state format (state.State), so that it can be diffed with what kpsim's
// proxier programs for the same objects.
//
// The proxier is built by its exported constructor, ipvs.NewProxier, one
// per family (as NewDualStackProxier does), on upstream's own fakes: IPVS,
// ipset, iptables, sysctl, netlink, conntrack and the service health
// server. Nothing here touches the host: see fakes.go for the dependencies
// NewProxier wires to the real node and how they are replaced.
package kubeproxy

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"reflect"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	sysctltest "k8s.io/component-helpers/node/util/sysctl/testing"
	"k8s.io/kubernetes/pkg/proxy"
	"k8s.io/kubernetes/pkg/proxy/ipvs"
	ipsettest "k8s.io/kubernetes/pkg/proxy/ipvs/ipset/testing"
	netlinktest "k8s.io/kubernetes/pkg/proxy/ipvs/testing"
	ipvstest "k8s.io/kubernetes/pkg/proxy/ipvs/util/testing"
	"k8s.io/kubernetes/pkg/proxy/metaproxier"
	proxyutil "k8s.io/kubernetes/pkg/proxy/util"
	iptablestest "k8s.io/kubernetes/pkg/util/iptables/testing"

	"github.com/kpsim/kpsim/dataplane"
	"github.com/kpsim/kpsim/dataplane/state"
	"github.com/kpsim/kpsim/objects"
	"github.com/kpsim/kpsim/proxier"
	release "github.com/kpsim/kpsim/upstream/kube-proxy"
)

// Node is one node's kube-proxy in IPVS mode: a proxier per family over
// one set of fakes, which outlive a restart as a node's kernel does.
type Node struct {
	cfg      proxier.Config
	families []dataplane.Family

	ipvs    *ipvstest.FakeIPVS
	ipset   *ipsettest.FakeIPSet
	ipt     map[dataplane.Family]*iptablesFake
	netlink map[dataplane.Family]*netlinktest.FakeNetlinkHandle

	provider proxy.Provider
	nodeIPs  map[v1.IPFamily]net.IP // as kube-proxy took them at start
	topology map[string]string      // the labels its NodeTopologyConfig holds
	restart  bool                   // kube-proxy would have exited: its node's IPs changed or it was deleted
}

// New sets up the node: its own addresses on eth0 (and lo's), every table
// empty. cfg is kpsim's proxier configuration, translated to kube-proxy's;
// NodeName and Families must be set.
func New(cfg proxier.Config, addrs []dataplane.InterfaceAddr) (*Node, error) {
	cfg = cfg.Defaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("kube-proxy config: %w", err)
	}
	n := &Node{
		cfg:      cfg,
		families: cfg.Families,
		ipvs:     ipvstest.NewFake(),
		ipset:    ipsettest.NewFake(ipvs.MinIPSetCheckVersion),
		ipt:      map[dataplane.Family]*iptablesFake{},
		netlink:  map[dataplane.Family]*netlinktest.FakeNetlinkHandle{},
	}
	for _, f := range n.families {
		if f == dataplane.IPv6 {
			n.ipt[f] = &iptablesFake{iptablestest.NewIPv6Fake()}
		} else {
			n.ipt[f] = &iptablesFake{iptablestest.NewFake()}
		}
		nl := netlinktest.NewFakeNetlinkHandle(f == dataplane.IPv6)
		var eth0 []string
		for _, a := range addrs {
			if dataplane.FamilyOf(a.Prefix.Addr()) == f {
				eth0 = append(eth0, a.Prefix.Addr().String())
			}
		}
		lo := "127.0.0.1"
		if f == dataplane.IPv6 {
			lo = "::1"
		}
		if err := nl.SetLocalAddresses("eth0", eth0...); err != nil {
			return nil, err
		}
		if err := nl.SetLocalAddresses("lo", lo); err != nil {
			return nil, err
		}
		n.netlink[f] = nl
	}
	return n, nil
}

// start builds kube-proxy's proxiers as its server does at startup (the
// node IPs from the Node object, or loopback; the topology labels from it)
// and gives them the set as the informers' initial lists, then syncs.
func (n *Node) start(set *objects.Set) error {
	var node *v1.Node
	for _, x := range set.Nodes {
		if x.Name == n.cfg.NodeName {
			node = x
		}
	}
	n.nodeIPs = release.NodeIPs(node)
	n.topology, n.restart = map[string]string{}, false
	kcfg := release.Configuration(n.cfg)
	var providers []proxy.Provider
	for _, f := range n.families {
		fam := v1.IPFamily(f)
		detector := proxyutil.NewNoOpLocalDetector()
		for _, c := range n.cfg.ClusterCIDRs {
			if p, err := netip.ParsePrefix(c); err == nil && dataplane.FamilyOf(p.Addr()) == f {
				detector = proxyutil.NewDetectLocalByCIDR(p.Masked().String())
			}
		}
		p, err := ipvs.NewProxier(context.Background(), kcfg, fam, n.ipt[f], n.ipvs, n.ipset, sysctltest.NewFake(),
			detector, n.cfg.NodeName, n.nodeIPs[fam], nil, nil, false)
		if err != nil {
			return fmt.Errorf("kube-proxy %s: ipvs.NewProxier: %w", f, err)
		}
		if err := useFakes(p, n.netlink[f]); err != nil {
			return err
		}
		providers = append(providers, p)
	}
	n.provider = providers[0]
	if len(providers) == 2 {
		n.provider = metaproxier.NewMetaProxier(providers[0], providers[1])
	}
	for _, e := range set.Events() {
		e.Deliver(handler{n})
	}
	n.provider.OnServiceSynced()
	n.provider.OnEndpointSlicesSynced() // the first syncProxyRules
	return nil
}

// First starts kube-proxy on the set and returns what it programmed.
func (n *Node) First(set *objects.Set) (*state.State, error) {
	if err := n.start(set); err != nil {
		return nil, err
	}
	return n.State()
}

// Then gives kube-proxy the events that turn base into base+changes and
// syncs, or, where kube-proxy would exit (its Node's IPs changed, or the
// Node was deleted), starts it again on the final objects over the same
// kernel state, as a restarted kube-proxy would.
func (n *Node) Then(base, changes *objects.Set) (*state.State, error) {
	final, events := base.Apply(changes)
	for _, e := range events {
		e.Deliver(handler{n})
	}
	if n.restart {
		if err := n.start(final); err != nil {
			return nil, err
		}
	} else {
		n.provider.OnEndpointSlicesSynced() // kube-proxy's exported path to an immediate syncProxyRules
	}
	return n.State()
}

// State dumps the fakes through kpsim's own state reader.
func (n *Node) State() (*state.State, error) {
	return state.Read(n.view(), n.families)
}

// handler passes informer events to kube-proxy the way its server wires
// them: Services and EndpointSlices to the proxier; this Node to the node
// manager (which exits kube-proxy when the node's IPs change or the node
// goes) and to NodeTopologyConfig (which passes the zone label on when it
// changes).
type handler struct{ n *Node }

func (h handler) OnServiceAdd(s *v1.Service)       { h.n.provider.OnServiceAdd(s) }
func (h handler) OnServiceUpdate(o, s *v1.Service) { h.n.provider.OnServiceUpdate(o, s) }
func (h handler) OnServiceDelete(s *v1.Service)    { h.n.provider.OnServiceDelete(s) }
func (h handler) OnEndpointSliceAdd(e *discoveryv1.EndpointSlice) {
	h.n.provider.OnEndpointSliceAdd(e)
}
func (h handler) OnEndpointSliceUpdate(o, e *discoveryv1.EndpointSlice) {
	h.n.provider.OnEndpointSliceUpdate(o, e)
}
func (h handler) OnEndpointSliceDelete(e *discoveryv1.EndpointSlice) {
	h.n.provider.OnEndpointSliceDelete(e)
}
func (h handler) OnNodeAdd(node *v1.Node)       { h.n.nodeChanged(node) }
func (h handler) OnNodeUpdate(_, node *v1.Node) { h.n.nodeChanged(node) }
func (h handler) OnNodeDelete(node *v1.Node) {
	if node.Name == h.n.cfg.NodeName {
		h.n.restart = true
	}
}

func (n *Node) nodeChanged(node *v1.Node) {
	if node.Name != n.cfg.NodeName {
		return // kube-proxy's node informer selects its own node only
	}
	for f, ip := range release.NodeIPs(node) {
		if !ip.Equal(n.nodeIPs[f]) {
			n.restart = true
		}
	}
	labels := map[string]string{}
	if z, ok := node.Labels[v1.LabelTopologyZone]; ok {
		labels[v1.LabelTopologyZone] = z
	}
	if !reflect.DeepEqual(labels, n.topology) {
		n.topology = labels
		n.provider.OnTopologyChange(labels)
	}
}
