//go:build kpsim_k8s_before_1_33 && !kpsim_k8s_before_1_31

package kubeproxy

import (
	kubeproxyconfig "k8s.io/kubernetes/pkg/proxy/apis/config"
	"k8s.io/kubernetes/pkg/proxy/metrics"

	"github.com/kpsim/kpsim/proxier"
)

// registerReleaseMetrics registers the release's metrics for its mode
// (1.31 and 1.32, which kpsim runs in IPVS mode only).
func registerReleaseMetrics(mode proxier.Mode) {
	metrics.RegisterMetrics(kubeproxyconfig.ProxyMode(mode))
}
