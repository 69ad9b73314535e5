//go:build !kpsim_k8s_before_1_33

package kubeproxy

import (
	"context"
	"fmt"
	"io/fs"
	"maps"
	"reflect"
	"slices"
	"sync"

	v1 "k8s.io/api/core/v1"
	k8smetrics "k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
	kubeproxyconfig "k8s.io/kubernetes/pkg/proxy/apis/config"
	"k8s.io/kubernetes/pkg/proxy/iptables"
	utilipset "k8s.io/kubernetes/pkg/proxy/ipvs/ipset"
	"k8s.io/kubernetes/pkg/proxy/metrics"
	"k8s.io/kubernetes/pkg/proxy/nftables"
	"k8s.io/kubernetes/pkg/proxy/util/nfacct"
	utiliptables "k8s.io/kubernetes/pkg/util/iptables"

	"github.com/kpsim/kpsim/internal/private"
	"github.com/kpsim/kpsim/proxier"
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

// releaseCleanupNFTablesMode is what the release's cmd/kube-proxy runs as
// it starts in iptables mode (platformCleanup): nftables mode's cleanup,
// which deletes its tables.
func releaseCleanupNFTablesMode(ctx context.Context) (failed bool) {
	return nftables.CleanupLeftovers(ctx)
}

// modeFields: the nftables proxier's knftables interface, the iptables
// proxier's nfacct client.
func modeFields() map[reflect.Type]string {
	return map[reflect.Type]string{reflect.TypeFor[nftables.Proxier](): fieldNFTables, reflect.TypeFor[iptables.Proxier](): fieldNFAcct}
}

// adoptIPTablesMode gives a release's iptables proxier the in-memory
// kernel's nfacct (simNFAcct) for its own client, which would make its
// counters in the host's network namespace. It reports whether p is one.
func adoptIPTablesMode(p any) (bool, error) {
	if _, ok := p.(*iptables.Proxier); !ok {
		return false, nil
	}
	return true, private.Wrap(p, fieldNFAcct, func(nfacct.Interface) nfacct.Interface { return &simNFAcct{} })
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
