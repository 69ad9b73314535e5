package kernel

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/kpsim/kpsim/proxier/dataplane"
)

// links is dataplane.Links over rtnetlink.
type links struct{ h *netlink.Handle }

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
	addrs, err := redump(func() ([]netlink.Addr, error) { return l.h.AddrList(lk, nlFamily(f)) })
	if err != nil {
		return nil, fmt.Errorf("list addresses %s: %w", link, err)
	}
	out := make([]netip.Addr, 0, len(addrs))
	for _, a := range addrs {
		if p, ok := toPrefix(a.IPNet); ok {
			out = append(out, p.Addr())
		}
	}
	return out, nil
}

func toPrefix(n *net.IPNet) (netip.Prefix, bool) {
	if n == nil {
		return netip.Prefix{}, false
	}
	a, ok := netip.AddrFromSlice(n.IP)
	if !ok {
		return netip.Prefix{}, false
	}
	ones, _ := n.Mask.Size()
	if a.Is4In6() {
		a = a.Unmap()
	}
	return netip.PrefixFrom(a, ones), true
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
		addrs, err := redump(func() ([]netlink.Addr, error) { return l.h.AddrList(lk, nlFamily(f)) })
		if err != nil {
			return nil, fmt.Errorf("list addresses %s: %w", attrs.Name, err)
		}
		for _, a := range addrs {
			if p, ok := toPrefix(a.IPNet); ok {
				out = append(out, dataplane.InterfaceAddr{Link: attrs.Name, Prefix: p})
			}
		}
	}
	return out, nil
}
