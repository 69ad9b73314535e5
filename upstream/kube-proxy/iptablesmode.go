package kubeproxy

import (
	"context"
	"fmt"

	"k8s.io/kubernetes/pkg/proxy"
)

// localhostNodePorts is kube-proxy's default --iptables-localhost-nodeports
// (NodePorts answer on 127.0.0.1 in iptables mode).
var localhostNodePorts = true

// iptablesProxier is the release's iptables proxier for one family on k:
// it writes through the family's iptables utility (on the in-memory
// kernel, simIPTables), and Adopt replaces what its constructor wired to
// the node itself.
func (r Release) iptablesProxier(ctx context.Context, k Kernel, params Params) (proxy.Provider, error) {
	if r.NewIPTablesProxier == nil {
		return nil, fmt.Errorf("kube-proxy %s: this release is not run in iptables mode", params.Family)
	}
	p, err := r.NewIPTablesProxier(ctx, params)
	if err != nil {
		return nil, fmt.Errorf("kube-proxy %s: iptables.NewProxier: %w", params.Family, err)
	}
	if k.Adopt != nil {
		if err := k.Adopt(p, params.Family); err != nil {
			return nil, err
		}
	}
	return p, nil
}
