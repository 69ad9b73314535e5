package testbed

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/kpsim/kpsim/dataplane"
	"github.com/kpsim/kpsim/kernel/netns"
)

// The run's topology, all inside namespaces the isolated process made:
//
//	client ns            node ns (the process's own; the proxier)         pods ns
//	eth0 ClientAddr  <-> eth0 node addresses       kpsim-pods (no addr) <-> eth0 + every probe endpoint address
//	default via GW                                 route ep/32 dev kpsim-pods    default via GW
//
// A ClusterIP or NodePort connection from the client leaves by its default
// route, arrives in the node namespace where IPVS (bound to kube-ipvs0)
// catches it and NATs it to an endpoint address, which the node routes to the
// pods namespace. One pods namespace holds every probe endpoint's address
// (servers bind to their own address): thousands of endpoints cost addresses,
// not namespaces. Nothing links any of these namespaces to the host.
//
// The client and pods reach the node through a gateway address that exists
// nowhere (169.254.1.1, fe80::1 for IPv6) with a permanent neighbour entry
// naming the node's veth, as Calico does: no ARP on the way in, so the
// proxier's strictARP sysctls cannot cut the path, and the node's node
// addresses stay the only addresses NodePorts bind to.
//
// Each namespace's eth0 also keeps an anchor address (169.254.1.2/32,
// scope link) for its whole life: the kernel flushes a link's IPv4 routes
// when its last IPv4 address goes, and the pods namespace loses and regains
// endpoint addresses as endpoints come and go.
var (
	gatewayV4 = netip.MustParseAddr("169.254.1.1")
	gatewayV6 = netip.MustParseAddr("fe80::1")
	anchorV4  = netip.MustParsePrefix("169.254.1.2/32")
)

// Link names. The node's link to the client is eth0 so that, as on a real
// node, the node addresses are on eth0 (the in-memory kernel uses the same name).
const (
	nodeClientLink = "eth0"
	nodePodsLink   = "kpsim-pods"
	podLink        = "eth0"
)

// TopologyConfig places the node, the client and the pods.
type TopologyConfig struct {
	// NodeAddresses are bound on the node's eth0: where NodePort probes go.
	// Empty means dataplane.DefaultNodeAddresses, as on the in-memory
	// kernel, so that sim and kernel runs of a scenario probe the same
	// addresses.
	NodeAddresses []netip.Prefix
	// Clients are the client pod's addresses, one per family: where probes
	// come from (scenarios.Cluster.ProbeClients). Empty means what a
	// scenario's default pod CIDRs give, 10.244.255.254 and
	// fd00:10:244:0:ffff:ffff:ffff:fffe.
	Clients []netip.Addr
}

func (c TopologyConfig) withDefaults() TopologyConfig {
	if len(c.NodeAddresses) == 0 {
		c.NodeAddresses = []netip.Prefix{dataplane.DefaultNodeAddresses[dataplane.IPv4], dataplane.DefaultNodeAddresses[dataplane.IPv6]}
	}
	if len(c.Clients) == 0 {
		c.Clients = []netip.Addr{netip.MustParseAddr("10.244.255.254"), netip.MustParseAddr("fd00:10:244:0:ffff:ffff:ffff:fffe")}
	}
	return c
}

// Topology is the client and pods namespaces around the node namespace.
type Topology struct {
	Client, Pods *netns.Namespace
	cfg          TopologyConfig
	madeNetnsDir bool

	mu       sync.Mutex
	podAddrs map[netip.Addr]int // reference counts: two endpoints may share an address
}

// NewTopology builds the client and pods namespaces and links them to this
// process's namespace, which becomes the node. It needs an isolated process.
func NewTopology(cfg TopologyConfig) (t *Topology, err error) {
	if !netns.Isolated() {
		return nil, netns.ErrNotIsolated
	}
	t = &Topology{cfg: cfg.withDefaults(), podAddrs: map[netip.Addr]int{}, madeNetnsDir: !netns.DirExists()}
	defer func() {
		if err != nil {
			err = errors.Join(err, t.Close())
			t = nil
		}
	}()
	if err := netns.SetLinkUp("lo"); err != nil {
		return t, err
	}
	// The node forwards between the client and the pods.
	if err := writeSysctl("net/ipv4/ip_forward", "1"); err != nil {
		return t, err
	}
	if err := writeSysctl("net/ipv6/conf/all/forwarding", "1"); err != nil && !errors.Is(err, os.ErrNotExist) {
		return t, err
	}
	if t.Client, err = netns.New("client"); err != nil {
		return t, err
	}
	if t.Pods, err = netns.New("pods"); err != nil {
		return t, err
	}
	// The client link first: the node's first non-loopback link then holds the
	// node addresses, which the kernel picks as the masquerade source for
	// links without an address of their own.
	if err := t.link(nodeClientLink, t.Client); err != nil {
		return t, err
	}
	for _, p := range t.cfg.NodeAddresses {
		if err := addAddr(nodeClientLink, p); err != nil {
			return t, err
		}
	}
	for _, a := range t.cfg.Clients {
		if err := t.Client.Do(func() error { return addAddr(podLink, netip.PrefixFrom(a, a.BitLen())) }); err != nil {
			return t, err
		}
		if err := addHostRoute(nodeClientLink, a); err != nil {
			return t, err
		}
	}
	if err := t.link(nodePodsLink, t.Pods); err != nil {
		return t, err
	}
	return t, nil
}

// link creates a veth pair node:nodeName <-> ns:eth0, brings both up and
// points ns's default routes at the node through the gateway addresses.
func (t *Topology) link(nodeName string, ns *netns.Namespace) error {
	veth := &netlink.Veth{
		LinkAttrs:     netlink.LinkAttrs{Name: nodeName},
		PeerName:      podLink,
		PeerNamespace: netlink.NsFd(int(ns.Handle())),
	}
	if err := netlink.LinkAdd(veth); err != nil {
		return fmt.Errorf("create veth %s <-> %s/%s: %w", nodeName, ns.Name, podLink, err)
	}
	l, err := netlink.LinkByName(nodeName)
	if err != nil {
		return fmt.Errorf("find link %s: %w", nodeName, err)
	}
	if err := netlink.LinkSetUp(l); err != nil {
		return fmt.Errorf("set %s up: %w", nodeName, err)
	}
	mac := l.Attrs().HardwareAddr
	// IPv6 would otherwise hold new addresses tentative for a second.
	_ = writeSysctl("net/ipv6/conf/"+nodeName+"/accept_dad", "0")
	return ns.Do(func() error {
		_ = writeSysctl("net/ipv6/conf/"+podLink+"/accept_dad", "0")
		if err := netns.SetLinkUp(podLink); err != nil {
			return err
		}
		if err := addAddr(podLink, anchorV4); err != nil {
			return err
		}
		pl, err := netlink.LinkByName(podLink)
		if err != nil {
			return fmt.Errorf("%s: find link %s: %w", ns.Name, podLink, err)
		}
		for _, gw := range []netip.Addr{gatewayV4, gatewayV6} {
			if err := gatewayRoute(pl, gw, mac); err != nil {
				if gw.Is6() && ipv6Disabled() {
					continue
				}
				return fmt.Errorf("%s: %w", ns.Name, err)
			}
		}
		return nil
	})
}

// gatewayRoute makes gw a permanent neighbour at mac on l and the default route via it.
func gatewayRoute(l netlink.Link, gw netip.Addr, mac net.HardwareAddr) error {
	family := netlink.FAMILY_V4
	if gw.Is6() {
		family = netlink.FAMILY_V6
	}
	idx := l.Attrs().Index
	if err := netlink.NeighSet(&netlink.Neigh{LinkIndex: idx, Family: family, State: netlink.NUD_PERMANENT, IP: gw.AsSlice(), HardwareAddr: mac}); err != nil {
		return fmt.Errorf("neighbour %s lladdr %s: %w", gw, mac, err)
	}
	if gw.Is4() {
		if err := netlink.RouteAdd(&netlink.Route{LinkIndex: idx, Dst: hostNet(gw), Scope: netlink.SCOPE_LINK}); err != nil {
			return fmt.Errorf("route %s dev %s: %w", gw, l.Attrs().Name, err)
		}
	}
	if err := netlink.RouteAdd(&netlink.Route{LinkIndex: idx, Gw: gw.AsSlice(), Dst: defaultNet(gw)}); err != nil {
		return fmt.Errorf("default route via %s: %w", gw, err)
	}
	return nil
}

// AddPodAddress puts a an endpoint address in the pods namespace and routes it from the node.
func (t *Topology) AddPodAddress(a netip.Addr) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.podAddrs[a] > 0 {
		t.podAddrs[a]++
		return nil
	}
	if err := t.Pods.Do(func() error { return addAddr(podLink, netip.PrefixFrom(a, a.BitLen())) }); err != nil {
		return err
	}
	if err := addHostRoute(nodePodsLink, a); err != nil {
		return err
	}
	t.podAddrs[a] = 1
	return nil
}

// RemovePodAddress undoes AddPodAddress once the last user of a is gone.
func (t *Topology) RemovePodAddress(a netip.Addr) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch t.podAddrs[a] {
	case 0:
		return nil
	case 1:
		delete(t.podAddrs, a)
	default:
		t.podAddrs[a]--
		return nil
	}
	l, err := netlink.LinkByName(nodePodsLink)
	if err != nil {
		return fmt.Errorf("find link %s: %w", nodePodsLink, err)
	}
	if err := netlink.RouteDel(&netlink.Route{LinkIndex: l.Attrs().Index, Dst: hostNet(a), Scope: netlink.SCOPE_LINK}); err != nil {
		return fmt.Errorf("delete route %s dev %s: %w", a, nodePodsLink, err)
	}
	return t.Pods.Do(func() error { return delAddr(podLink, netip.PrefixFrom(a, a.BitLen())) })
}

// NodeAddresses are the node's addresses on eth0.
func (t *Topology) NodeAddresses() []netip.Prefix { return t.cfg.NodeAddresses }

// Close deletes the client and pods namespaces; their veth pairs go with them.
func (t *Topology) Close() error {
	var errs []error
	for _, ns := range []*netns.Namespace{t.Client, t.Pods} {
		if ns != nil {
			errs = append(errs, ns.Delete())
		}
	}
	t.Client, t.Pods = nil, nil
	if t.madeNetnsDir {
		netns.RemoveDirIfEmpty()
	}
	return errors.Join(errs...)
}

func addAddr(link string, p netip.Prefix) error {
	l, err := netlink.LinkByName(link)
	if err != nil {
		return fmt.Errorf("find link %s: %w", link, err)
	}
	a := &netlink.Addr{IPNet: &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}}
	if p.Addr().Is6() {
		a.Flags = unix.IFA_F_NODAD
	}
	if p.Addr().IsLinkLocalUnicast() {
		// Never a source address for traffic leaving the link.
		a.Scope = unix.RT_SCOPE_LINK
	}
	if err := netlink.AddrAdd(l, a); err != nil {
		if p.Addr().Is6() && ipv6Disabled() {
			return nil
		}
		return fmt.Errorf("address add %s dev %s: %w", p, link, err)
	}
	return nil
}

func delAddr(link string, p netip.Prefix) error {
	l, err := netlink.LinkByName(link)
	if err != nil {
		return fmt.Errorf("find link %s: %w", link, err)
	}
	a := &netlink.Addr{IPNet: &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}}
	if err := netlink.AddrDel(l, a); err != nil {
		return fmt.Errorf("address del %s dev %s: %w", p, link, err)
	}
	return nil
}

func addHostRoute(link string, a netip.Addr) error {
	l, err := netlink.LinkByName(link)
	if err != nil {
		return fmt.Errorf("find link %s: %w", link, err)
	}
	if err := netlink.RouteReplace(&netlink.Route{LinkIndex: l.Attrs().Index, Dst: hostNet(a), Scope: netlink.SCOPE_LINK}); err != nil {
		if a.Is6() && ipv6Disabled() {
			return nil
		}
		return fmt.Errorf("route %s dev %s: %w", a, link, err)
	}
	return nil
}

func hostNet(a netip.Addr) *net.IPNet {
	return &net.IPNet{IP: a.AsSlice(), Mask: net.CIDRMask(a.BitLen(), a.BitLen())}
}

func defaultNet(a netip.Addr) *net.IPNet {
	return &net.IPNet{IP: make(net.IP, a.BitLen()/8), Mask: net.CIDRMask(0, a.BitLen())}
}

// writeSysctl writes /proc/sys/key in the calling thread's network namespace.
func writeSysctl(key, value string) error {
	if err := os.WriteFile("/proc/sys/"+key, []byte(value), 0o644); err != nil {
		return fmt.Errorf("sysctl %s=%s: %w", key, value, err)
	}
	return nil
}

// ipv6Disabled reports whether IPv6 is off in the calling thread's namespace
// (a kernel booted with ipv6.disable=1 has no /proc/sys/net/ipv6).
func ipv6Disabled() bool {
	b, err := os.ReadFile("/proc/sys/net/ipv6/conf/all/disable_ipv6")
	return err != nil || len(b) > 0 && b[0] == '1'
}
