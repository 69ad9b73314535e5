//go:build !kpsim_k8s_before_1_31

package kubeproxy

import proxyutil "k8s.io/kubernetes/pkg/proxy/util"

// LocalDetector is kube-proxy's local traffic detector for kpsim's
// configuration: by the family's cluster CIDR, if any (1.31 on; 1.30's is
// in pkg/proxy/util/iptables, adapter_before_1_31.go).
func (p Params) LocalDetector() proxyutil.LocalTrafficDetector {
	if cidr := p.ClusterCIDR(); cidr != "" {
		return proxyutil.NewDetectLocalByCIDR(cidr)
	}
	return proxyutil.NewNoOpLocalDetector()
}
