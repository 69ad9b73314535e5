//go:build kpsim_k8s_before_1_33

package scenarios

import (
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// trackerWatch opens the fake's own watch for a watch action: from now, as
// these client libraries' fake tracker knows no resource version.
func trackerWatch(cs *fake.Clientset, action k8stesting.Action) (watch.Interface, error) {
	return cs.Tracker().Watch(action.GetResource(), action.GetNamespace())
}
