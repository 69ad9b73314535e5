//go:build kpsim_k8s_before_1_32

package kubeproxy

import (
	"k8s.io/kubernetes/pkg/proxy/conntrack"

	"github.com/kpsim/kpsim/dataplane"
)

// simConntrack is upstream's fake: 1.30 and 1.31's conntrack utility clears flows
// by address and port, which the in-memory kernel's table does not take
// from it (its stale flows stay).
func simConntrack(dataplane.Dataplane) conntrack.Interface { return conntrack.NewFake() }
