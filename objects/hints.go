//go:build !kpsim_k8s_before_1_33

package objects

import discoveryv1 "k8s.io/api/discovery/v1"

// The Kubernetes API kpsim builds against: node hints (EndpointHints.ForNodes,
// the PreferSameNode traffic distribution) arrived in 1.33. A kpsim binary
// built with an older kube-proxy release as its proxier under test (the
// nested modules in upstream/, built with the kpsim_k8s_before_1_33 tag)
// has the older API, where endpoints carry no node hints; hints_before_1_33.go
// is this file for it.

// NodeHints returns the nodes an endpoint's hints name.
func NodeHints(h *discoveryv1.EndpointHints) []string {
	if h == nil {
		return nil
	}
	out := make([]string, 0, len(h.ForNodes))
	for _, n := range h.ForNodes {
		out = append(out, n.Name)
	}
	return out
}

// SetNodeHints replaces the nodes an endpoint's hints name.
func SetNodeHints(h *discoveryv1.EndpointHints, nodes []string) {
	h.ForNodes = nil
	for _, n := range nodes {
		h.ForNodes = append(h.ForNodes, discoveryv1.ForNode{Name: n})
	}
}
