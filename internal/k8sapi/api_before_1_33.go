//go:build kpsim_k8s_before_1_33

package k8sapi

import (
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stesting "k8s.io/client-go/testing"
)

// NodeHints returns nothing: before Kubernetes 1.33 endpoints carry no node hints.
func NodeHints(*discoveryv1.EndpointHints) []string { return nil }

// SetNodeHints does nothing: before Kubernetes 1.33 endpoints carry no node hints.
func SetNodeHints(*discoveryv1.EndpointHints, []string) {}

// ListOptions returns what a watch asked for: its resource version. A
// list's options (its page) do not reach a reactor before client-go 0.33,
// so lists come whole.
func ListOptions(action k8stesting.Action) metav1.ListOptions {
	if a, ok := action.(k8stesting.WatchAction); ok {
		return metav1.ListOptions{ResourceVersion: a.GetWatchRestrictions().ResourceVersion}
	}
	return metav1.ListOptions{}
}
