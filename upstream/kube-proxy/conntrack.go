//go:build !kpsim_k8s_before_1_32

package kubeproxy

import (
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"k8s.io/kubernetes/pkg/proxy/conntrack"

	"github.com/kpsim/kpsim/dataplane"
)

// simConntrack is the in-memory kernel's conntrack table as the release's
// conntrack utility (1.31 and later list the table and delete the flows
// they find stale). A flow is deleted by its service address, endpoint
// and protocol: the same flow of another client is as stale.
func simConntrack(dp dataplane.Dataplane) conntrack.Interface { return simFlows{dp} }

type simFlows struct{ dp dataplane.Dataplane }

// familyOf is the dataplane family of a netlink address family.
func familyOf(ipFamily uint8) dataplane.Family {
	if ipFamily == unix.AF_INET6 {
		return dataplane.IPv6
	}
	return dataplane.IPv4
}

var protoNumbers = map[dataplane.Protocol]uint8{dataplane.TCP: unix.IPPROTO_TCP, dataplane.UDP: unix.IPPROTO_UDP, dataplane.SCTP: unix.IPPROTO_SCTP}

func (s simFlows) ListEntries(ipFamily uint8) ([]*netlink.ConntrackFlow, error) {
	flows, err := s.dp.Conntrack.Flows(familyOf(ipFamily))
	if err != nil {
		return nil, err
	}
	out := make([]*netlink.ConntrackFlow, 0, len(flows))
	for _, f := range flows {
		ip := func(ap netip.AddrPort) net.IP { return net.IP(ap.Addr().AsSlice()) }
		out = append(out, &netlink.ConntrackFlow{
			FamilyType: ipFamily,
			Forward:    netlink.IPTuple{Protocol: protoNumbers[f.Protocol], SrcIP: ip(f.Client), SrcPort: f.Client.Port(), DstIP: ip(f.OrigDst), DstPort: f.OrigDst.Port()},
			Reverse:    netlink.IPTuple{Protocol: protoNumbers[f.Protocol], SrcIP: ip(f.ReplySrc), SrcPort: f.ReplySrc.Port(), DstIP: ip(f.Client), DstPort: f.Client.Port()},
		})
	}
	return out, nil
}

func (s simFlows) DeleteEntries(_ uint8, flows []*netlink.ConntrackFlow) (int, error) {
	n := 0
	for _, f := range flows {
		var proto dataplane.Protocol
		for p, num := range protoNumbers {
			if num == f.Forward.Protocol {
				proto = p
			}
		}
		d, err := s.dp.Conntrack.Delete(dataplane.ConntrackFilter{Protocol: proto, OrigDst: addr(f.Forward.DstIP), OrigDstPort: f.Forward.DstPort,
			ReplySrc: addr(f.Reverse.SrcIP), ReplySrcPort: f.Reverse.SrcPort})
		n += d
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// ClearEntries is 1.33 and 1.34's delete: the listed flows the filters match.
func (s simFlows) ClearEntries(ipFamily uint8, filters ...netlink.CustomConntrackFilter) (int, error) {
	flows, err := s.ListEntries(ipFamily)
	if err != nil {
		return 0, err
	}
	var stale []*netlink.ConntrackFlow
	for _, f := range flows {
		for _, m := range filters {
			if m.MatchConntrackFlow(f) {
				stale = append(stale, f)
				break
			}
		}
	}
	return s.DeleteEntries(ipFamily, stale)
}
