package sim

import (
	"io/fs"
	"net/netip"
	"slices"
	"strings"
	"syscall"

	"github.com/kpsim/kpsim/dataplane"
)

// maxLinkName is IFNAMSIZ (16) less the terminating NUL.
const maxLinkName = 15

// link is a network interface. Links in the sim are always up: nothing in
// kube-proxy's IPVS mode takes one down, and EnsureDummy's "set it up" is
// then a no-op.
type link struct {
	dummy bool
	// addrs is keyed by address: binding an address already bound with
	// another prefix length is EEXIST here. (IPv4 lets two prefix lengths
	// coexist; kube-proxy never binds one address twice.)
	addrs map[netip.Addr]netip.Prefix
}

func newLink(dummy bool) *link {
	return &link{dummy: dummy, addrs: make(map[netip.Addr]netip.Prefix)}
}

// notBound is the kernel's EADDRNOTAVAIL for an address not on the link; it
// also reads as ENOENT and fs.ErrNotExist, as the Links contract promises,
// so callers can treat "already gone" like any other missing object.
type notBound struct{}

func (notBound) Error() string { return syscall.EADDRNOTAVAIL.Error() }

func (notBound) Is(target error) bool {
	return target == fs.ErrNotExist || target == syscall.EADDRNOTAVAIL || target == syscall.ENOENT
}

func (k *Kernel) EnsureDummy(name string) (bool, error) {
	k.lock()
	defer k.unlock()
	if name == "" || len(name) > maxLinkName || strings.ContainsAny(name, "/ ") {
		return false, errorf(syscall.EINVAL, "link add %q: bad name", name)
	}
	if l, ok := k.links[name]; ok {
		// The lookup and the set-up: two requests, as kernel/links.go sends.
		k.charge(2 * k.costs.op[dataplane.OpAddressList])
		if !l.dummy {
			return false, errorf(syscall.EEXIST, "link add %s: exists and is not a dummy link", name)
		}
		return false, nil
	}
	if k.faulty(dataplane.OpLinkCreate) {
		if err := k.fault(dataplane.OpLinkCreate, name); err != nil {
			return false, errorf(err, "link add %s", name)
		}
	}
	k.count(dataplane.OpLinkCreate, 1)
	k.links[name] = newLink(true)
	return true, nil
}

// DeleteLink deletes a dummy link and its addresses. The node's own links
// cannot be deleted (EOPNOTSUPP: the kernel refuses to delete devices it
// has no rtnl ops for, and kpsim never means to).
func (k *Kernel) DeleteLink(name string) error {
	k.lock()
	defer k.unlock()
	k.charge(k.costs.op[dataplane.OpLinkCreate]) // one rtnetlink request, priced as a create
	l, ok := k.links[name]
	if !ok {
		return errorf(syscall.ENOENT, "link delete %s", name)
	}
	if !l.dummy {
		return errorf(syscall.EOPNOTSUPP, "link delete %s: not a dummy link", name)
	}
	delete(k.links, name)
	return nil
}

// Addresses lists a link's addresses of one family, sorted.
func (k *Kernel) Addresses(name string, f dataplane.Family) ([]netip.Addr, error) {
	k.lock()
	defer k.unlock()
	l := k.links[name]
	n := 0
	if l != nil {
		n = len(l.addrs)
	}
	k.read(dataplane.OpAddressList, n)
	if k.faulty(dataplane.OpAddressList) {
		if err := k.fault(dataplane.OpAddressList, name); err != nil {
			return nil, errorf(err, "address list %s", name)
		}
	}
	if l == nil {
		return nil, errorf(syscall.ENOENT, "address list %s: no such link", name)
	}
	out := make([]netip.Addr, 0, len(l.addrs))
	for a := range l.addrs {
		if dataplane.FamilyOf(a) == f {
			out = append(out, a)
		}
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out, nil
}

func (k *Kernel) AddAddress(name string, p netip.Prefix) error {
	k.lock()
	defer k.unlock()
	k.count(dataplane.OpAddressBind, 1)
	if k.faulty(dataplane.OpAddressBind) {
		if err := k.fault(dataplane.OpAddressBind, name+" "+p.String()); err != nil {
			return errorf(err, "address add %s %s", name, p)
		}
	}
	return k.bind(name, p)
}

// AddLocalAddress binds an address outside the proxier's view, the way a
// node gains a secondary address: tests use it for NodePort address choice.
// It is not counted or charged.
func (k *Kernel) AddLocalAddress(name string, p netip.Prefix) error {
	k.lock()
	defer k.unlock()
	if _, ok := k.links[name]; !ok && name != "" && len(name) <= maxLinkName {
		k.links[name] = newLink(false)
	}
	return k.bind(name, p)
}

func (k *Kernel) bind(name string, p netip.Prefix) error {
	if !p.IsValid() || p.Addr().Zone() != "" || p.Addr().Is4In6() {
		return errorf(syscall.EINVAL, "address add %s %s: invalid prefix", name, p)
	}
	l, ok := k.links[name]
	if !ok {
		return errorf(syscall.ENOENT, "address add %s %s: no such link", name, p)
	}
	if _, ok := l.addrs[p.Addr()]; ok {
		return errorf(syscall.EEXIST, "address add %s %s", name, p)
	}
	l.addrs[p.Addr()] = p
	return nil
}

func (k *Kernel) DelAddress(name string, p netip.Prefix) error {
	k.lock()
	defer k.unlock()
	k.count(dataplane.OpAddressUnbind, 1)
	if k.faulty(dataplane.OpAddressUnbind) {
		if err := k.fault(dataplane.OpAddressUnbind, name+" "+p.String()); err != nil {
			return errorf(err, "address del %s %s", name, p)
		}
	}
	l, ok := k.links[name]
	if !ok {
		return errorf(syscall.ENOENT, "address del %s %s: no such link", name, p)
	}
	if q, ok := l.addrs[p.Addr()]; !ok || q.Bits() != p.Bits() {
		return errorf(notBound{}, "address del %s %s", name, p)
	}
	delete(l.addrs, p.Addr())
	return nil
}

// LocalAddresses lists the family's addresses on every link except the
// excluded ones, ordered by link name then address.
func (k *Kernel) LocalAddresses(f dataplane.Family, exclude ...string) ([]dataplane.InterfaceAddr, error) {
	k.lock()
	defer k.unlock()
	var out []dataplane.InterfaceAddr
	for name, l := range k.links {
		if slices.Contains(exclude, name) {
			continue
		}
		for a, p := range l.addrs {
			if dataplane.FamilyOf(a) == f {
				out = append(out, dataplane.InterfaceAddr{Link: name, Prefix: p})
			}
		}
	}
	k.read(dataplane.OpAddressList, len(out))
	if k.faulty(dataplane.OpAddressList) {
		if err := k.fault(dataplane.OpAddressList, ""); err != nil {
			return nil, errorf(err, "address list")
		}
	}
	slices.SortFunc(out, func(a, b dataplane.InterfaceAddr) int {
		if c := strings.Compare(a.Link, b.Link); c != 0 {
			return c
		}
		return a.Prefix.Addr().Compare(b.Prefix.Addr())
	})
	return out, nil
}

// bound reports whether a is bound on any link: a service address on
// kube-ipvs0, or one of the node's own addresses.
func (k *Kernel) bound(a netip.Addr) bool {
	for _, l := range k.links {
		if _, ok := l.addrs[a]; ok {
			return true
		}
	}
	return false
}
