package conformance

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kpsim/kpsim/dataplane"
)

func runSysctls(t *testing.T, newDataplane func(t *testing.T) dataplane.Dataplane) {
	// Keys that exist in every network namespace, whatever modules are loaded.
	for _, key := range []string{"net/ipv4/ip_forward", "net/ipv4/conf/all/arp_ignore", "net/ipv6/conf/all/forwarding"} {
		t.Run(key, func(t *testing.T) {
			s := newDataplane(t).Sysctls
			before, err := s.Sysctl(key)
			require.NoError(t, err)
			want := "1"
			if before == "1" {
				want = "0"
			}
			require.NoError(t, s.SetSysctl(key, want))
			got, err := s.Sysctl(key)
			require.NoError(t, err)
			require.Equal(t, want, got)
		})
	}
	t.Run("unknown key", func(t *testing.T) {
		s := newDataplane(t).Sysctls
		_, err := s.Sysctl("net/ipv4/no_such_key_kpsim")
		requireNotExist(t, err)
	})
}
