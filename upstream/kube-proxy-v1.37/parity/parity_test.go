package parity

import (
	"io"
	"os"
	"testing"

	"github.com/stretchr/testify/require"
	"k8s.io/klog/v2"

	"github.com/kpsim/kpsim/results"
)

func TestMain(m *testing.M) {
	klog.LogToStderr(false)
	klog.SetOutput(io.Discard)
	os.Exit(m.Run())
}

func TestExplain(t *testing.T) {
	dup := map[string]bool{"198.51.100.5:80/TCP": true}
	for _, tc := range []struct {
		d    results.StateDiff
		want bool
	}{
		{results.StateDiff{Kind: "destination", Object: "198.51.100.5:80/TCP -> 10.0.0.1:8080", Change: "only in A"}, true},
		{results.StateDiff{Kind: "virtual-server", Object: "198.51.100.5:80/TCP", Change: "differs"}, true},
		{results.StateDiff{Kind: "destination", Object: "198.51.100.6:80/TCP -> 10.0.0.1:8080", Change: "only in A"}, false},
		{results.StateDiff{Kind: "rule", Object: "IPv4 filter KUBE-IPVS-OUT-FILTER", Change: "differs", Detail: "same 2 rules in another order"}, true},
		{results.StateDiff{Kind: "rule", Object: "IPv4 filter KUBE-IPVS-OUT-FILTER", Change: "only in A"}, false},
		{results.StateDiff{Kind: "rule", Object: "IPv4 nat KUBE-SERVICES", Change: "differs"}, false},
		{results.StateDiff{Kind: "ipset-entry", Object: "KUBE-LOOP-BACK 10.0.0.1,tcp:80,10.0.0.1", Change: "only in B"}, false},
	} {
		require.Equal(t, tc.want, explain(tc.d, dup) != "", "%s", tc.d)
	}
}
