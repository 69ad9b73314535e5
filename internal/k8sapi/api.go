//go:build !kpsim_k8s_before_1_33

// Package k8sapi holds what differs in the Kubernetes API kpsim builds
// against, and only that: a kpsim binary built with an older kube-proxy
// release as its proxier under test (the nested modules in upstream/,
// built with the kpsim_k8s_before_1_33 tag) has that release's older API.
// api_before_1_33.go is this file for it. (The release adapter,
// upstream/kube-proxy, has its own eras: the release's code moves too.)
package k8sapi

import (
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stesting "k8s.io/client-go/testing"
)

// Node hints (EndpointHints.ForNodes, the PreferSameNode traffic
// distribution) arrived in 1.33.

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

// ListOptions returns what a list or watch asked for: its resource
// version, and for a list its page. (Older client libraries, which kpsim
// builds against with an older kube-proxy release as its proxier, hand a
// reactor no list options: api_before_1_33.go.)
func ListOptions(action k8stesting.Action) metav1.ListOptions {
	switch a := action.(type) {
	case k8stesting.ListActionImpl:
		return a.ListOptions
	case k8stesting.WatchActionImpl:
		return a.ListOptions
	}
	return metav1.ListOptions{}
}
