//go:build kpsim_k8s_before_1_33

package kubeproxy

import (
	"context"
	"reflect"

	v1 "k8s.io/api/core/v1"
	utilipset "k8s.io/kubernetes/pkg/proxy/ipvs/ipset"
	utiliptables "k8s.io/kubernetes/pkg/util/iptables"
	utilexec "k8s.io/utils/exec"
)

// What kube-proxy 1.30 to 1.32 have where 1.33 on differs (release.go).

// labelledMetrics: the sync metrics carry no ip_family yet.
const labelledMetrics = false

func newIPSet() utilipset.Interface { return utilipset.New(utilexec.New()) }

func newIPTables(f v1.IPFamily) utiliptables.Interface {
	if f == v1.IPv6Protocol {
		return utiliptables.New(utilexec.New(), utiliptables.ProtocolIPv6)
	}
	return utiliptables.New(utilexec.New(), utiliptables.ProtocolIPv4)
}

// releaseCleanupNFTablesMode: kpsim runs releases before 1.33 in IPVS mode
// only.
func releaseCleanupNFTablesMode(context.Context) bool { return false }

// modeFields: kpsim runs releases before 1.33 in IPVS mode only.
func modeFields() map[reflect.Type]string { return nil }

// adoptIPTablesMode: kpsim runs releases before 1.33 in IPVS mode only.
func adoptIPTablesMode(any) (bool, error) { return false, nil }
