package conformance

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kpsim/kpsim/dataplane"
)

// runConntrack checks the filter and listing contract. Creating flows
// needs traffic, which the interfaces cannot make; listing and deleting
// real flows is covered by each dataplane's own tests.
func runConntrack(t *testing.T, newDataplane func(t *testing.T) dataplane.Dataplane) {
	tests := []struct {
		name   string
		filter dataplane.ConntrackFilter
	}{
		{"by service address", dataplane.ConntrackFilter{Protocol: dataplane.UDP, OrigDst: netip.MustParseAddr("10.96.0.10"), OrigDstPort: 53}},
		{"by endpoint", dataplane.ConntrackFilter{Protocol: dataplane.UDP, ReplySrc: netip.MustParseAddr("10.244.1.5")}},
		{"ipv6", dataplane.ConntrackFilter{Protocol: dataplane.UDP, OrigDst: netip.MustParseAddr("fd00:10:96::a")}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n, err := newDataplane(t).Conntrack.Delete(tc.filter)
			require.NoError(t, err)
			require.Zero(t, n, "a fresh dataplane has no flows to delete")
		})
	}
	t.Run("a fresh table lists no flows", func(t *testing.T) {
		dp := newDataplane(t)
		for _, f := range []dataplane.Family{dataplane.IPv4, dataplane.IPv6} {
			flows, err := dp.Conntrack.Flows(f)
			require.NoError(t, err)
			require.Empty(t, flows, f)
		}
	})
	t.Run("filter without an address", func(t *testing.T) {
		_, err := newDataplane(t).Conntrack.Delete(dataplane.ConntrackFilter{Protocol: dataplane.UDP})
		require.Error(t, err, "a filter without an address would flush the table")
	})
}
