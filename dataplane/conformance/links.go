package conformance

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kpsim/kpsim/dataplane"
)

func runLinks(t *testing.T, newDataplane func(t *testing.T) dataplane.Dataplane) {
	const dummy = dataplane.DummyLink
	tests := []struct {
		family dataplane.Family
		vip    netip.Prefix
	}{
		{dataplane.IPv4, mustPrefix("10.96.0.10/32")},
		{dataplane.IPv6, mustPrefix("fd00:10:96::a/128")},
	}
	for _, tc := range tests {
		t.Run(string(tc.family), func(t *testing.T) {
			links := newDataplane(t).Links
			_, err := links.Addresses(dummy, tc.family)
			requireNotExist(t, err)
			requireNotExist(t, links.AddAddress(dummy, tc.vip))

			created, err := links.EnsureDummy(dummy)
			require.NoError(t, err)
			require.True(t, created)
			created, err = links.EnsureDummy(dummy)
			require.NoError(t, err)
			require.False(t, created, "second EnsureDummy must find the link")

			require.NoError(t, links.AddAddress(dummy, tc.vip))
			requireExist(t, links.AddAddress(dummy, tc.vip))
			got, err := links.Addresses(dummy, tc.family)
			require.NoError(t, err)
			require.Equal(t, []netip.Addr{tc.vip.Addr()}, got)

			local, err := links.LocalAddresses(tc.family, dummy)
			require.NoError(t, err)
			require.False(t, slices.ContainsFunc(local, func(a dataplane.InterfaceAddr) bool { return a.Prefix.Addr() == tc.vip.Addr() }),
				"LocalAddresses must exclude %s, got %v", dummy, local)
			all, err := links.LocalAddresses(tc.family)
			require.NoError(t, err)
			require.Contains(t, all, dataplane.InterfaceAddr{Link: dummy, Prefix: tc.vip})
			for _, a := range all {
				require.Equal(t, tc.family, dataplane.FamilyOf(a.Prefix.Addr()), "LocalAddresses(%s) returned %s", tc.family, a.Prefix)
			}

			require.NoError(t, links.DelAddress(dummy, tc.vip))
			requireNotExist(t, links.DelAddress(dummy, tc.vip))
			got, err = links.Addresses(dummy, tc.family)
			require.NoError(t, err)
			require.Empty(t, got)

			require.NoError(t, links.DeleteLink(dummy))
			requireNotExist(t, links.DeleteLink(dummy))
		})
	}
}
