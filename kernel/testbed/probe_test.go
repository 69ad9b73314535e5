package testbed

import (
	"context"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kpsim/kpsim/dataplane"
	"github.com/kpsim/kpsim/kernel"
	"github.com/kpsim/kpsim/kernel/netns/netnstest"
)

// TestProbeThroughIPVS sends real traffic the way a kernel run does: from
// the client namespace to a ClusterIP and a NodePort, caught by IPVS in the
// node namespace and NATed to echo servers in the pods namespace. Then it
// takes the destination and the virtual server away and checks that new
// connections and the long-lived connection notice.
func TestProbeThroughIPVS(t *testing.T) {
	caps := kernel.Detect()
	var missing []string
	for what, c := range map[string]kernel.Check{"IPVS": caps.IPVS, "dummy links": caps.Dummy, "veth links": caps.Veth} {
		if !c.OK {
			missing = append(missing, what+" ("+c.Detail+")")
		}
	}
	if len(missing) > 0 {
		t.Skipf("needs %s", strings.Join(missing, ", "))
	}
	if !netnstest.Private(t) {
		return
	}
	topo, err := NewTopology(TopologyConfig{})
	require.NoError(t, err)
	defer func() { require.NoError(t, topo.Close()) }()
	k, err := kernel.New(kernel.Options{IPSetStrategy: dataplane.IPSetNetlink})
	require.NoError(t, err)
	defer k.Close()
	dp := k.Dataplane()

	ep := netip.MustParseAddrPort("10.244.1.5:8080")
	require.NoError(t, topo.AddPodAddress(ep.Addr()))
	servers := NewServers(topo.Pods)
	defer servers.Close()
	require.NoError(t, servers.Start(ep, dataplane.TCP))
	require.NoError(t, servers.Start(ep, dataplane.UDP))

	_, err = dp.Links.EnsureDummy("kube-ipvs0")
	require.NoError(t, err)
	clusterIP := netip.MustParseAddr("10.96.0.10")
	require.NoError(t, dp.Links.AddAddress("kube-ipvs0", netip.PrefixFrom(clusterIP, 32)))
	require.NoError(t, dp.Sysctls.SetSysctl("net/ipv4/vs/conntrack", "1"))
	node := topo.NodeAddresses()[0].Addr()
	keys := []dataplane.ServiceKey{
		{Address: clusterIP, Port: 80, Protocol: dataplane.TCP},
		{Address: clusterIP, Port: 53, Protocol: dataplane.UDP},
		{Address: node, Port: 30080, Protocol: dataplane.TCP},
	}
	for _, key := range keys {
		require.NoError(t, dp.IPVS.AddService(dataplane.VirtualServer{ServiceKey: key, Scheduler: "rr", Netmask: 0xffffffff}))
		require.NoError(t, dp.IPVS.AddDestination(key, dataplane.RealServer{Address: ep.Addr(), Port: ep.Port(), Weight: 1}))
	}

	p := NewProber(topo.Client, 500*time.Millisecond)
	defer p.Close()
	ctx := context.Background()
	for _, key := range keys {
		target := netip.AddrPortFrom(key.Address, key.Port)
		a, err := p.Probe(ctx, target, key.Protocol)
		require.NoError(t, err)
		require.Equal(t, OutcomeOK, a.Outcome, "%s/%s", target, key.Protocol)
		require.Equal(t, ep, a.Served)
	}
	// The long-lived connection to the ClusterIP is open and answering.
	tcp := netip.AddrPortFrom(clusterIP, 80)
	a, err := p.Probe(ctx, tcp, dataplane.TCP)
	require.NoError(t, err)
	require.Equal(t, OutcomeOK, a.Long)

	// No destination: new connections fail.
	require.NoError(t, dp.IPVS.DeleteDestination(keys[2], dataplane.RealServer{Address: ep.Addr(), Port: ep.Port()}))
	a, err = p.Probe(ctx, netip.AddrPortFrom(node, 30080), dataplane.TCP)
	require.NoError(t, err)
	require.NotEqual(t, OutcomeOK, a.Outcome)

	// The ClusterIP's virtual server and address gone: the established
	// connection breaks as well as new ones.
	require.NoError(t, dp.IPVS.DeleteService(keys[0]))
	require.NoError(t, dp.Links.DelAddress("kube-ipvs0", netip.PrefixFrom(clusterIP, 32)))
	a, err = p.Probe(ctx, tcp, dataplane.TCP)
	require.NoError(t, err)
	require.NotEqual(t, OutcomeOK, a.Outcome)
	require.Contains(t, []string{OutcomeReset, OutcomeTimeout}, a.Long)
}

// TestServingEndpoints checks which endpoints of a slice get servers: those
// serving (an unset serving condition defers to ready, an unset ready counts
// as true), a terminating one still serving included, on the probed port only.
func TestServingEndpoints(t *testing.T) {
	s := sliceFixture()
	got := servingEndpoints(s, []probedPort{{"http", dataplane.TCP}})
	require.Equal(t, []serverKey{
		{netip.MustParseAddrPort("10.244.0.1:8080"), dataplane.TCP},
		{netip.MustParseAddrPort("10.244.0.3:8080"), dataplane.TCP},
	}, got)
	require.Empty(t, servingEndpoints(s, []probedPort{{"dns", dataplane.UDP}}))
}

func sliceFixture() *discoveryv1.EndpointSlice {
	tru, fal := true, false
	port, name, proto := int32(8080), "http", corev1.ProtocolTCP
	return &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: "ns", Name: "web-abc", Labels: map[string]string{discoveryv1.LabelServiceName: "web"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: &name, Port: &port, Protocol: &proto}},
		Endpoints: []discoveryv1.Endpoint{
			{Addresses: []string{"10.244.0.1"}}, // conditions unset: serving
			{Addresses: []string{"10.244.0.2"}, Conditions: discoveryv1.EndpointConditions{Ready: &fal}},                                   // not ready
			{Addresses: []string{"10.244.0.3"}, Conditions: discoveryv1.EndpointConditions{Ready: &fal, Serving: &tru, Terminating: &tru}}, // terminating, still serving
			{Addresses: []string{"10.244.0.4"}, Conditions: discoveryv1.EndpointConditions{Ready: &tru, Serving: &fal}},
		},
	}
}

// TestUDPProbesKeepTheirSourcePort: every UDP attempt leaves the client
// from UDPClientPort, as the sim's probes do, so a flow's conntrack entry is
// followed by the next attempt (and cleared, or not, alike on both kernels).
func TestUDPProbesKeepTheirSourcePort(t *testing.T) {
	if !netnstest.Private(t) {
		return
	}
	topo, err := NewTopology(TopologyConfig{})
	require.NoError(t, err)
	defer func() { require.NoError(t, topo.Close()) }()
	ep := netip.MustParseAddrPort("10.244.1.5:53")
	require.NoError(t, topo.AddPodAddress(ep.Addr()))
	// An echo server that notes who asked.
	var pc net.PacketConn
	require.NoError(t, topo.Pods.Do(func() error {
		var err error
		pc, err = net.ListenPacket("udp", ep.String())
		return err
	}))
	defer pc.Close()
	peers := make(chan netip.AddrPort, 4)
	go func() {
		buf := make([]byte, 512)
		for {
			_, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			peers <- from.(*net.UDPAddr).AddrPort()
			_, _ = pc.WriteTo([]byte(ep.String()+"\n"), from)
		}
	}()
	prober := NewProber(topo.Client, 2*time.Second)
	defer prober.Close()
	for range 2 {
		a, err := prober.Probe(context.Background(), ep, dataplane.UDP)
		require.NoError(t, err)
		require.Equal(t, OutcomeOK, a.Outcome)
		from := <-peers
		require.Equal(t, uint16(UDPClientPort), from.Port(), "source port of a UDP probe")
		require.Equal(t, netip.MustParseAddr("10.244.255.254"), from.Addr().Unmap())
	}
}
