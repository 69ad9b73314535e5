package proxier

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"
	v1 "k8s.io/api/core/v1"

	"github.com/kpsim/kpsim/dataplane"
)

// TestFullSyncFollowsNodeAddresses: a node address that appears after the
// first sync gets its NodePort virtual servers on the next full sync, which
// re-reads the node, and one that goes loses them.
func TestFullSyncFollowsNodeAddresses(t *testing.T) {
	e := newEnv(t, Config{})
	p := e.synced(e.proxier(dataplane.IPv4, 0))
	p.OnServiceAdd(service("default", "web", "10.96.0.10", withNodePort(30080)))
	p.OnEndpointSliceAdd(slice("default", "web", "web-1", 8080, v1.ProtocolTCP, eps("10.0.0.1")...))
	e.sync(p)
	require.Contains(t, ipvsState(t, e.k, dataplane.IPv4), "192.168.0.10:30080/TCP")

	second := netip.MustParsePrefix("192.168.0.11/24")
	require.NoError(t, e.k.AddLocalAddress("eth0", second))
	require.Zero(t, writes(e.sync(p).Ops), "an incremental sync does not re-read the node")
	full := p.SyncFull()
	require.Empty(t, full.Error)
	require.Contains(t, ipvsState(t, e.k, dataplane.IPv4), "192.168.0.11:30080/TCP")

	require.NoError(t, e.k.DelAddress("eth0", second))
	require.Empty(t, p.SyncFull().Error)
	require.NotContains(t, ipvsState(t, e.k, dataplane.IPv4), "192.168.0.11:30080/TCP")
}

// TestFullSyncWithoutChangeRecomputesNothing: a periodic full sync re-reads
// the kernel and checks every service's wants against it, but wants nothing
// changed are not derived again: its work is the verification alone, one
// visit per virtual server.
func TestFullSyncWithoutChangeRecomputesNothing(t *testing.T) {
	k := emptyKernel(t)
	p := nullProxier(t, k)
	populateWith(p, 100, 3, 5)
	require.Empty(t, p.SyncFull().Error)
	first := k.Work()
	require.Empty(t, p.SyncFull().Error)
	again := k.Work()
	require.Equal(t, 1, again.Syncs)
	require.Equal(t, 100, first.Derived, "the first sync derives every service port's wants")
	require.Zero(t, again.Derived, "nothing changed: no wants derived again")
	require.Equal(t, len(p.claims), again.Ports, "one visit per virtual server")
}
