package kernel

import (
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/kpsim/kpsim/dataplane"
)

// conntrack is dataplane.Conntrack over ctnetlink: the table is dumped and
// the matching flows deleted one request each, what `conntrack -D` does.
type conntrack struct{ h *netlink.Handle }

var _ dataplane.Conntrack = conntrack{}

// flowMatch is the contract's filter as a netlink.CustomConntrackFilter.
// netlink.ConntrackFilter cannot match a reply source port, which kube-proxy
// uses to clear flows to one UDP endpoint.
type flowMatch struct {
	f     dataplane.ConntrackFilter
	proto uint8
}

func (m flowMatch) MatchConntrackFlow(flow *netlink.ConntrackFlow) bool {
	eq := func(want netip.Addr, got net.IP) bool {
		if !want.IsValid() {
			return true
		}
		a, ok := netip.AddrFromSlice(got)
		return ok && a.Unmap() == want.Unmap()
	}
	port := func(want, got uint16) bool { return want == 0 || want == got }
	return (m.proto == 0 || flow.Forward.Protocol == m.proto) &&
		eq(m.f.OrigDst, flow.Forward.DstIP) && port(m.f.OrigDstPort, flow.Forward.DstPort) &&
		eq(m.f.ReplySrc, flow.Reverse.SrcIP) && port(m.f.ReplySrcPort, flow.Reverse.SrcPort)
}

func (c conntrack) Flows(f dataplane.Family) ([]dataplane.ConntrackFlow, error) {
	family := netlink.InetFamily(unix.AF_INET)
	if f == dataplane.IPv6 {
		family = unix.AF_INET6
	}
	flows, err := redump(func() ([]*netlink.ConntrackFlow, error) {
		return c.h.ConntrackTableList(netlink.ConntrackTable, family)
	})
	if err != nil {
		return nil, fmt.Errorf("conntrack list %s: %w", f, err)
	}
	out := make([]dataplane.ConntrackFlow, 0, len(flows))
	for _, fl := range flows {
		proto := dataplane.Protocol("")
		for name, n := range ipProtos {
			if uint8(n) == fl.Forward.Protocol {
				proto = name
			}
		}
		ap := func(ip net.IP, port uint16) netip.AddrPort {
			a, _ := netip.AddrFromSlice(ip)
			return netip.AddrPortFrom(a.Unmap(), port)
		}
		out = append(out, dataplane.ConntrackFlow{Protocol: proto, Client: ap(fl.Forward.SrcIP, fl.Forward.SrcPort),
			OrigDst: ap(fl.Forward.DstIP, fl.Forward.DstPort), ReplySrc: ap(fl.Reverse.SrcIP, fl.Reverse.SrcPort)})
	}
	return out, nil
}

func (c conntrack) Delete(f dataplane.ConntrackFilter) (int, error) {
	var addr netip.Addr
	switch {
	case f.OrigDst.IsValid():
		addr = f.OrigDst
	case f.ReplySrc.IsValid():
		addr = f.ReplySrc
	default:
		return 0, fmt.Errorf("conntrack delete %+v: no address to match: %w", f, unix.EINVAL)
	}
	m := flowMatch{f: f}
	if f.Protocol != "" {
		p, ok := ipProtos[f.Protocol]
		if !ok {
			return 0, fmt.Errorf("conntrack delete: protocol %q: %w", f.Protocol, unix.EINVAL)
		}
		m.proto = uint8(p)
	}
	family := netlink.InetFamily(unix.AF_INET)
	if dataplane.FamilyOf(addr) == dataplane.IPv6 {
		family = unix.AF_INET6
	}
	// An interrupted dump still deletes what it saw; the next pass gets the rest.
	total := 0
	_, err := redump(func() (struct{}, error) {
		n, err := c.h.ConntrackDeleteFilters(netlink.ConntrackTable, family, m)
		total += int(n)
		return struct{}{}, err
	})
	if err != nil {
		return total, fmt.Errorf("conntrack delete %s: %w", describeFilter(f), err)
	}
	return total, nil
}

func describeFilter(f dataplane.ConntrackFilter) string {
	s := "proto=" + string(f.Protocol)
	if f.OrigDst.IsValid() {
		s += fmt.Sprintf(" orig-dst=%s:%d", f.OrigDst, f.OrigDstPort)
	}
	if f.ReplySrc.IsValid() {
		s += fmt.Sprintf(" reply-src=%s:%d", f.ReplySrc, f.ReplySrcPort)
	}
	return s
}
