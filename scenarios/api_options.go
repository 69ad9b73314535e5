//go:build !kpsim_k8s_before_1_33

package scenarios

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stesting "k8s.io/client-go/testing"
)

// listOptions returns what a list or watch asked for: its resource
// version, and for a list its page. (Older client libraries, which kpsim
// builds against with an older kube-proxy release as its proxier, hand a
// reactor no list options: api_options_before_1_33.go.)
func listOptions(action k8stesting.Action) metav1.ListOptions {
	switch a := action.(type) {
	case k8stesting.ListActionImpl:
		return a.ListOptions
	case k8stesting.WatchActionImpl:
		return a.ListOptions
	}
	return metav1.ListOptions{}
}
