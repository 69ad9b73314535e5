package kernel

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/kpsim/kpsim/dataplane"
)

// links is dataplane.Links over rtnetlink. Addresses are listed through a
// socket of its own with strict checking on, so that the kernel sends one
// link's addresses when one link's are asked for: vishvananda/netlink's
// AddrList dumps every address of the namespace and filters them here, and
// with thousands of service addresses on kube-ipvs0 listing the node's own
// addresses, link by link, cost a dump of all of them per link.
type links struct {
	h    *netlink.Handle
	addr *dumpSocket
}

// newAddrSocket opens the address-listing socket in the current namespace.
func newAddrSocket() (*dumpSocket, error) {
	s, err := nl.GetNetlinkSocketAt(netns.None(), netns.None(), unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("open rtnetlink socket: %w", err)
	}
	if err := unix.SetsockoptInt(int(s.GetFd()), unix.SOL_NETLINK, unix.NETLINK_GET_STRICT_CHK, 1); err != nil {
		s.Close()
		return nil, fmt.Errorf("rtnetlink strict checking: %w", err)
	}
	return &dumpSocket{SocketHandle: &nl.SocketHandle{Socket: s}}, nil
}

// addrs lists one link's addresses of family f.
func (l links) addrs(index int, f dataplane.Family) ([]netip.Prefix, error) {
	return redump(func() ([]netip.Prefix, error) {
		req := nl.NewNetlinkRequest(unix.RTM_GETADDR, unix.NLM_F_DUMP)
		msg := nl.NewIfAddrmsg(nlFamily(f))
		msg.Index = uint32(index)
		req.AddData(msg)
		var out []netip.Prefix
		err := l.addr.dump(req, func(typ uint16, m []byte) error {
			if typ != unix.RTM_NEWADDR || len(m) < unix.SizeofIfAddrmsg {
				return nil
			}
			ifa := nl.DeserializeIfAddrmsg(m)
			if int(ifa.Index) != index || int(ifa.Family) != nlFamily(f) {
				return nil // a kernel that does not filter
			}
			var local, address []byte
			for a := range attrs(m[unix.SizeofIfAddrmsg:]) {
				switch a.typ {
				case unix.IFA_LOCAL:
					local = a.val
				case unix.IFA_ADDRESS:
					address = a.val
				}
			}
			// IPv4 sends the local address as IFA_LOCAL (IFA_ADDRESS is the
			// peer's on a point-to-point link), IPv6 as IFA_ADDRESS only.
			if local == nil {
				local = address
			}
			if a, ok := netip.AddrFromSlice(local); ok {
				out = append(out, netip.PrefixFrom(a.Unmap(), int(ifa.Prefixlen)))
			}
			return nil
		})
		return out, err
	})
}

var _ dataplane.Links = links{}

// errNoDummy explains EOPNOTSUPP from a dummy link create: the kernel was
// built without CONFIG_DUMMY (the host kernel of these machines) or cannot
// load the module.
var errNoDummy = errors.New("dummy link driver not available")

// addrGenModeNone is IN6_ADDR_GEN_MODE_NONE.
const addrGenModeNone = 1

func (l links) link(op, name string) (netlink.Link, error) {
	lk, err := l.h.LinkByName(name)
	if err != nil {
		var nf netlink.LinkNotFoundError
		if errors.As(err, &nf) {
			return nil, fmt.Errorf("%s %s: link not found: %w", op, name, unix.ENOENT)
		}
		return nil, fmt.Errorf("%s %s: %w", op, name, err)
	}
	return lk, nil
}

func (l links) EnsureDummy(name string) (bool, error) {
	if lk, err := l.h.LinkByName(name); err == nil {
		if lk.Type() != "dummy" {
			return false, fmt.Errorf("ensure dummy %s: a %s link has that name: %w", name, lk.Type(), unix.EEXIST)
		}
		if err := l.h.LinkSetUp(lk); err != nil {
			return false, fmt.Errorf("ensure dummy %s: set up: %w", name, err)
		}
		return false, nil
	}
	la := netlink.NewLinkAttrs()
	la.Name = name
	d := &netlink.Dummy{LinkAttrs: la}
	if err := l.h.LinkAdd(d); err != nil {
		if errors.Is(err, unix.EOPNOTSUPP) {
			return false, fmt.Errorf("create dummy link %s: %w: %w", name, errNoDummy, err)
		}
		return false, fmt.Errorf("create dummy link %s: %w", name, err)
	}
	// No IPv6 link-local address: the link holds exactly the service
	// addresses the proxier binds (kube-proxy leaves kube-ipvs0 down, which
	// has the same effect; the contract has it up).
	if _, err := os.Stat("/proc/sys/net/ipv6"); err == nil {
		if err := l.h.LinkSetIP6AddrGenMode(d, addrGenModeNone); err != nil {
			return true, fmt.Errorf("dummy link %s: disable IPv6 address generation: %w", name, err)
		}
	}
	if err := l.h.LinkSetUp(d); err != nil {
		return true, fmt.Errorf("set dummy link %s up: %w", name, err)
	}
	return true, nil
}

func (l links) DeleteLink(name string) error {
	lk, err := l.link("delete link", name)
	if err != nil {
		return err
	}
	if err := l.h.LinkDel(lk); err != nil {
		return fmt.Errorf("delete link %s: %w", name, err)
	}
	return nil
}

func nlFamily(f dataplane.Family) int {
	if f == dataplane.IPv6 {
		return netlink.FAMILY_V6
	}
	return netlink.FAMILY_V4
}

func (l links) Addresses(link string, f dataplane.Family) ([]netip.Addr, error) {
	lk, err := l.link("list addresses", link)
	if err != nil {
		return nil, err
	}
	prefixes, err := l.addrs(lk.Attrs().Index, f)
	if err != nil {
		return nil, fmt.Errorf("list addresses %s: %w", link, err)
	}
	out := make([]netip.Addr, len(prefixes))
	for i, p := range prefixes {
		out[i] = p.Addr()
	}
	return out, nil
}

func toNetlinkAddr(p netip.Prefix) *netlink.Addr {
	return &netlink.Addr{IPNet: &net.IPNet{
		IP:   net.IP(p.Addr().Unmap().AsSlice()),
		Mask: net.CIDRMask(p.Bits(), p.Addr().Unmap().BitLen()),
	}}
}

func (l links) AddAddress(link string, p netip.Prefix) error {
	lk, err := l.link("bind address", link)
	if err != nil {
		return err
	}
	if !p.IsValid() {
		return fmt.Errorf("bind address %v to %s: %w", p, link, unix.EINVAL)
	}
	if err := l.h.AddrAdd(lk, toNetlinkAddr(p)); err != nil {
		return fmt.Errorf("bind address %s to %s: %w", p, link, err)
	}
	return nil
}

// DelAddress unbinds an address. The kernel answers EADDRNOTAVAIL for one that
// is not bound; the error also wraps ENOENT so callers can test fs.ErrNotExist.
func (l links) DelAddress(link string, p netip.Prefix) error {
	lk, err := l.link("unbind address", link)
	if err != nil {
		return err
	}
	if !p.IsValid() {
		return fmt.Errorf("unbind address %v from %s: %w", p, link, unix.EINVAL)
	}
	if err := l.h.AddrDel(lk, toNetlinkAddr(p)); err != nil {
		if errors.Is(err, unix.EADDRNOTAVAIL) {
			return fmt.Errorf("unbind address %s from %s: %w (%w)", p, link, unix.ENOENT, err)
		}
		return fmt.Errorf("unbind address %s from %s: %w", p, link, err)
	}
	return nil
}

func (l links) LocalAddresses(f dataplane.Family, exclude ...string) ([]dataplane.InterfaceAddr, error) {
	lks, err := redump(l.h.LinkList)
	if err != nil {
		return nil, fmt.Errorf("list links: %w", err)
	}
	var out []dataplane.InterfaceAddr
	for _, lk := range lks {
		attrs := lk.Attrs()
		if attrs.Flags&net.FlagUp == 0 || slices.Contains(exclude, attrs.Name) {
			continue
		}
		prefixes, err := l.addrs(attrs.Index, f)
		if err != nil {
			return nil, fmt.Errorf("list addresses %s: %w", attrs.Name, err)
		}
		for _, p := range prefixes {
			out = append(out, dataplane.InterfaceAddr{Link: attrs.Name, Prefix: p})
		}
	}
	return out, nil
}
