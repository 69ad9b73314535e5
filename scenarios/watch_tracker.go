//go:build !kpsim_k8s_before_1_33

package scenarios

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// trackerWatch opens the fake's own watch for a watch action, from the
// resource version the informer asked for. (Older client libraries, which
// kpsim builds against with an older kube-proxy release as its proxier, watch
// from now only: watch_tracker_before_1_33.go.)
func trackerWatch(cs *fake.Clientset, action k8stesting.Action) (watch.Interface, error) {
	var opts metav1.ListOptions
	if wa, ok := action.(k8stesting.WatchActionImpl); ok {
		opts = wa.ListOptions
	}
	return cs.Tracker().Watch(action.GetResource(), action.GetNamespace(), opts)
}
