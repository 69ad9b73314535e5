package proxier

import (
	"testing"

	"github.com/stretchr/testify/require"
	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/kpsim/kpsim/dataplane"
)

// TestParseSlice: what a slice contributes per port, as the map it replaced
// kept it: two ports of one name and protocol pool their endpoints, a port
// with no endpoint of the family still counts (a slice that names it differs
// from one that does not), and a port the slice lacks has none.
func TestParseSlice(t *testing.T) {
	s := slice("default", "web", "web-1", 8080, v1.ProtocolTCP, eps("10.0.0.1", "10.0.0.2")...)
	other, udp := "metrics", v1.ProtocolUDP
	s.Ports = append(s.Ports,
		discoveryv1.EndpointPort{Name: s.Ports[0].Name, Port: ptr(int32(8081)), Protocol: ptr(v1.ProtocolTCP)},
		discoveryv1.EndpointPort{Name: &other, Port: ptr(int32(9090)), Protocol: &udp})
	got, ok := parseSlice(s, dataplane.IPv4, testNode)
	require.True(t, ok)
	var addrs []string
	for _, e := range got.get(portKey("http", dataplane.TCP)) {
		addrs = append(addrs, e.addr.String())
	}
	require.Equal(t, []string{"10.0.0.1:8080", "10.0.0.2:8080", "10.0.0.1:8081", "10.0.0.2:8081"}, addrs)
	require.Len(t, got.get(portKey("metrics", dataplane.UDP)), 2)
	require.Nil(t, got.get(portKey("http", dataplane.UDP)))

	again, _ := parseSlice(s, dataplane.IPv4, testNode)
	require.True(t, got.equal(again))
	require.False(t, got.equal(nil))
	require.True(t, sliceEndpoints(nil).equal(nil))

	// A port whose endpoints are all of the other family has an entry with none.
	v6 := slice("default", "web", "web-2", 8080, v1.ProtocolTCP, eps("fd00::1")...)
	v6.AddressType = discoveryv1.AddressTypeIPv4 // as an export may mislabel it
	none, ok := parseSlice(v6, dataplane.IPv4, testNode)
	require.True(t, ok)
	require.Len(t, none, 1)
	require.Nil(t, none.get(portKey("http", dataplane.TCP)))
	require.False(t, none.equal(sliceEndpoints{}), "naming a port is a difference")

	_, ok = parseSlice(s, dataplane.IPv6, testNode)
	require.False(t, ok, "an IPv4 slice is not the IPv6 proxier's")
}
