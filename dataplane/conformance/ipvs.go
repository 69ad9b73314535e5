package conformance

import (
	"net/netip"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kpsim/kpsim/dataplane"
)

func virtualServer(addr string, port uint16, proto dataplane.Protocol) dataplane.VirtualServer {
	a := netip.MustParseAddr(addr)
	mask := uint32(0xffffffff)
	if a.Is6() {
		mask = 128
	}
	return dataplane.VirtualServer{
		ServiceKey: dataplane.ServiceKey{Address: a, Port: port, Protocol: proto},
		Scheduler:  "rr",
		Netmask:    mask,
	}
}

func realServer(addr string, port uint16, weight int) dataplane.RealServer {
	return dataplane.RealServer{Address: netip.MustParseAddr(addr), Port: port, Weight: weight}
}

// findService returns the listed service with key k.
func findService(t *testing.T, ipvs dataplane.IPVS, k dataplane.ServiceKey) (dataplane.VirtualServer, bool) {
	t.Helper()
	list, err := ipvs.Services()
	require.NoError(t, err)
	for _, s := range list {
		if s.ServiceKey == k {
			return s, true
		}
	}
	return dataplane.VirtualServer{}, false
}

// destinationsByAddr lists destinations keyed by address and port. The one
// virtual server's read and the whole table's must agree.
func destinationsByAddr(t *testing.T, ipvs dataplane.IPVS, k dataplane.ServiceKey) map[netip.AddrPort]int {
	t.Helper()
	list, err := ipvs.Destinations(k)
	require.NoError(t, err)
	out := make(map[netip.AddrPort]int)
	for _, d := range list {
		out[d.AddrPort()] = d.Weight
	}
	vs, ok := findService(t, ipvs, k)
	require.True(t, ok, "%s not in the whole table", k)
	require.ElementsMatch(t, list, vs.Destinations, "%s: Destinations and Services disagree", k)
	return out
}

func runIPVS(t *testing.T, newDataplane func(t *testing.T) dataplane.Dataplane) {
	t.Run("services", func(t *testing.T) {
		tests := []struct {
			name string
			vs   dataplane.VirtualServer
		}{
			{"ipv4 tcp", virtualServer("10.96.0.10", 80, dataplane.TCP)},
			{"ipv4 udp", virtualServer("10.96.0.10", 53, dataplane.UDP)},
			{"ipv4 sctp", virtualServer("10.96.0.11", 9000, dataplane.SCTP)},
			{"ipv6 tcp", virtualServer("fd00:10:96::a", 443, dataplane.TCP)},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				ipvs := newDataplane(t).IPVS
				require.NoError(t, ipvs.AddService(tc.vs))
				got, ok := findService(t, ipvs, tc.vs.ServiceKey)
				require.True(t, ok, "added service %s not listed", tc.vs.ServiceKey)
				require.Equal(t, "rr", got.Scheduler)
				require.Zero(t, got.Flags&dataplane.FlagPersistent)

				requireExist(t, ipvs.AddService(tc.vs))

				upd := tc.vs
				upd.Scheduler = "wrr"
				upd.Flags = dataplane.FlagPersistent
				upd.Timeout = 10800
				require.NoError(t, ipvs.UpdateService(upd))
				got, ok = findService(t, ipvs, tc.vs.ServiceKey)
				require.True(t, ok)
				require.Equal(t, "wrr", got.Scheduler)
				require.NotZero(t, got.Flags&dataplane.FlagPersistent)
				require.Equal(t, uint32(10800), got.Timeout)
				one, err := ipvs.Service(tc.vs.ServiceKey)
				require.NoError(t, err)
				got.Destinations = nil
				require.Equal(t, got, one, "Service reads one virtual server as Services lists it")

				require.NoError(t, ipvs.DeleteService(tc.vs.ServiceKey))
				_, ok = findService(t, ipvs, tc.vs.ServiceKey)
				require.False(t, ok, "deleted service still listed")
				_, err = ipvs.Service(tc.vs.ServiceKey)
				requireNotExist(t, err)
				requireNotExist(t, ipvs.DeleteService(tc.vs.ServiceKey))
				requireNotExist(t, ipvs.UpdateService(tc.vs))
			})
		}
	})

	t.Run("same address different protocol", func(t *testing.T) {
		ipvs := newDataplane(t).IPVS
		tcp := virtualServer("10.96.0.10", 53, dataplane.TCP)
		udp := virtualServer("10.96.0.10", 53, dataplane.UDP)
		require.NoError(t, ipvs.AddService(tcp))
		require.NoError(t, ipvs.AddService(udp))
		require.NoError(t, ipvs.DeleteService(tcp.ServiceKey))
		_, ok := findService(t, ipvs, udp.ServiceKey)
		require.True(t, ok, "deleting the TCP service removed the UDP one")
	})

	t.Run("both families in one table", func(t *testing.T) {
		ipvs := newDataplane(t).IPVS
		v4 := virtualServer("10.96.0.10", 80, dataplane.TCP)
		v6 := virtualServer("fd00:10:96::a", 80, dataplane.TCP)
		require.NoError(t, ipvs.AddService(v4))
		require.NoError(t, ipvs.AddService(v6))
		_, ok4 := findService(t, ipvs, v4.ServiceKey)
		_, ok6 := findService(t, ipvs, v6.ServiceKey)
		require.True(t, ok4 && ok6, "one handle lists both families' services")
	})

	t.Run("destinations", func(t *testing.T) {
		tests := []struct {
			name     string
			vs       dataplane.VirtualServer
			a, b     dataplane.RealServer
			otherFam dataplane.RealServer
		}{
			{"ipv4", virtualServer("10.96.0.10", 80, dataplane.TCP),
				realServer("10.244.1.5", 8080, 1), realServer("10.244.2.7", 8080, 1), realServer("fd00:10:244::5", 8080, 1)},
			{"ipv6", virtualServer("fd00:10:96::a", 80, dataplane.TCP),
				realServer("fd00:10:244::5", 8080, 1), realServer("fd00:10:244::7", 8080, 1), realServer("10.244.1.5", 8080, 1)},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				ipvs := newDataplane(t).IPVS
				k := tc.vs.ServiceKey
				requireNotExist(t, ipvs.AddDestination(k, tc.a))
				require.NoError(t, ipvs.AddService(tc.vs))
				require.NoError(t, ipvs.AddDestination(k, tc.a))
				require.NoError(t, ipvs.AddDestination(k, tc.b))
				requireExist(t, ipvs.AddDestination(k, tc.a))
				requireErrno(t, ipvs.AddDestination(k, tc.otherFam), syscall.EINVAL, "destination of the other family")
				require.Equal(t, map[netip.AddrPort]int{tc.a.AddrPort(): 1, tc.b.AddrPort(): 1}, destinationsByAddr(t, ipvs, k))

				drained := tc.a
				drained.Weight = 0
				require.NoError(t, ipvs.UpdateDestination(k, drained))
				require.Equal(t, map[netip.AddrPort]int{tc.a.AddrPort(): 0, tc.b.AddrPort(): 1}, destinationsByAddr(t, ipvs, k))

				// Identity is address and port: a different weight still deletes it.
				require.NoError(t, ipvs.DeleteDestination(k, tc.a))
				require.Equal(t, map[netip.AddrPort]int{tc.b.AddrPort(): 1}, destinationsByAddr(t, ipvs, k))
				requireNotExist(t, ipvs.DeleteDestination(k, tc.a))
				requireNotExist(t, ipvs.UpdateDestination(k, tc.a))

				other := tc.b
				other.Port = 9090
				require.NoError(t, ipvs.AddDestination(k, other), "same address, other port is another destination")
				require.Len(t, destinationsByAddr(t, ipvs, k), 2)

				require.NoError(t, ipvs.DeleteService(k))
				_, err := ipvs.Destinations(k)
				requireNotExist(t, err)
				require.NoError(t, ipvs.AddService(tc.vs))
				require.Empty(t, destinationsByAddr(t, ipvs, k), "a re-created service must not inherit destinations")
			})
		}
	})

	// The kernel adds a destination at its list's head, and the rr scheduler
	// starts from the head: a service's first connection goes to the
	// endpoint added last. The sim's probe model takes them in this order,
	// so a UDP flow lands on the same endpoint on both kernels.
	t.Run("destinations list newest first", func(t *testing.T) {
		ipvs := newDataplane(t).IPVS
		vs := virtualServer("10.96.0.10", 53, dataplane.UDP)
		k := vs.ServiceKey
		require.NoError(t, ipvs.AddService(vs))
		a, b, c, d := realServer("10.244.0.1", 53, 1), realServer("10.244.0.2", 53, 1),
			realServer("10.244.0.3", 53, 1), realServer("10.244.0.4", 53, 1)
		for _, r := range []dataplane.RealServer{a, b, c} {
			require.NoError(t, ipvs.AddDestination(k, r))
		}
		order := func() []netip.AddrPort {
			list, err := ipvs.Destinations(k)
			require.NoError(t, err)
			vs, ok := findService(t, ipvs, k)
			require.True(t, ok)
			var out, whole []netip.AddrPort
			for _, r := range list {
				out = append(out, r.AddrPort())
			}
			for _, r := range vs.Destinations {
				whole = append(whole, r.AddrPort())
			}
			require.Equal(t, out, whole, "Destinations and Services list in different orders")
			return out
		}
		require.Equal(t, []netip.AddrPort{c.AddrPort(), b.AddrPort(), a.AddrPort()}, order())
		require.NoError(t, ipvs.DeleteDestination(k, b))
		require.NoError(t, ipvs.AddDestination(k, d))
		require.Equal(t, []netip.AddrPort{d.AddrPort(), c.AddrPort(), a.AddrPort()}, order())
	})
}
