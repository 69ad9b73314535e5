//go:build !kpsim_k8s_before_1_33

package kubeproxy

import (
	"context"
	"fmt"
	"io/fs"
	"maps"
	"net"
	"net/netip"
	"slices"
	"sync"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	v1 "k8s.io/api/core/v1"
	k8smetrics "k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
	kubeproxyconfig "k8s.io/kubernetes/pkg/proxy/apis/config"
	"k8s.io/kubernetes/pkg/proxy/conntrack"
	"k8s.io/kubernetes/pkg/proxy/iptables"
	utilipset "k8s.io/kubernetes/pkg/proxy/ipvs/ipset"
	"k8s.io/kubernetes/pkg/proxy/metrics"
	"k8s.io/kubernetes/pkg/proxy/nftables"
	"k8s.io/kubernetes/pkg/proxy/util/nfacct"
	utiliptables "k8s.io/kubernetes/pkg/util/iptables"

	"github.com/kpsim/kpsim/dataplane"
	"github.com/kpsim/kpsim/proxier"
	"github.com/kpsim/kpsim/proxier/observed"
)

// What kube-proxy 1.33 and later share (the signatures 1.30 has are in
// release_before_1_33.go).

// labelledMetrics: the sync metrics carry ip_family.
const labelledMetrics = true

// registerReleaseMetrics registers the release's metrics for mode.
// kube-proxy registers once per process, for its one mode; a kpsim run
// may switch to nftables or iptables mode, and a calibration runs several,
// so those modes' sync histograms, the partial one kpsim reads (observed:
// which syncs were partial), are registered after IPVS mode's too.
func registerReleaseMetrics(mode proxier.Mode) {
	metrics.RegisterMetrics(kubeproxyconfig.ProxyMode(mode))
	if mode != proxier.ModeIPVS {
		for _, m := range []k8smetrics.Registerable{metrics.SyncFullProxyRulesLatency, metrics.SyncPartialProxyRulesLatency} {
			_ = legacyregistry.Register(m) // already registered if this mode was the first
		}
	}
}

func newIPSet() utilipset.Interface { return utilipset.New() }

func newIPTables(f v1.IPFamily) utiliptables.Interface {
	if f == v1.IPv6Protocol {
		return utiliptables.New(utiliptables.ProtocolIPv6)
	}
	return utiliptables.New(utiliptables.ProtocolIPv4)
}

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

// releaseCleanupNFTablesMode is what the release's cmd/kube-proxy runs as
// it starts in iptables mode (platformCleanup): nftables mode's cleanup,
// which deletes its tables.
func releaseCleanupNFTablesMode(ctx context.Context) (failed bool) {
	return nftables.CleanupLeftovers(ctx)
}

// adoptIPTablesMode gives a release's iptables proxier the in-memory
// kernel's nfacct (simNFAcct) for its own client, which would make its
// counters in the host's network namespace. It reports whether p is one.
func adoptIPTablesMode(p any) (bool, error) {
	if _, ok := p.(*iptables.Proxier); !ok {
		return false, nil
	}
	return true, observed.WrapField(p, "nfacct", func(nfacct.Interface) nfacct.Interface { return &simNFAcct{} })
}

// simNFAcct stands for the kernel's nfacct on the in-memory kernel: a
// counter exists once made, and counts nothing (probes are not packets).
// With it the proxier writes the rules that count into its counters (the
// localhost NodePorts', the INVALID drop's), as on a node with nfacct.
type simNFAcct struct {
	mu    sync.Mutex
	names map[string]bool
}

func (n *simNFAcct) Ensure(name string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.names == nil {
		n.names = map[string]bool{}
	}
	n.names[name] = true
	return nil
}

func (n *simNFAcct) Add(name string) error {
	n.mu.Lock()
	exists := n.names[name]
	n.mu.Unlock()
	if exists {
		return fmt.Errorf("nfacct %s: %w", name, fs.ErrExist)
	}
	return n.Ensure(name)
}

func (n *simNFAcct) Get(name string) (*nfacct.Counter, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.names[name] {
		return nil, fmt.Errorf("nfacct %s: %w", name, fs.ErrNotExist)
	}
	return &nfacct.Counter{Name: name}, nil
}

func (n *simNFAcct) List() ([]*nfacct.Counter, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make([]*nfacct.Counter, 0, len(n.names))
	for _, name := range slices.Sorted(maps.Keys(n.names)) {
		out = append(out, &nfacct.Counter{Name: name})
	}
	return out, nil
}
