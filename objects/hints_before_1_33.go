//go:build kpsim_k8s_before_1_33

package objects

import discoveryv1 "k8s.io/api/discovery/v1"

// NodeHints returns nothing: before Kubernetes 1.33 endpoints carry no node hints.
func NodeHints(*discoveryv1.EndpointHints) []string { return nil }

// SetNodeHints does nothing: before Kubernetes 1.33 endpoints carry no node hints.
func SetNodeHints(*discoveryv1.EndpointHints, []string) {}
