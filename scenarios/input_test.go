package scenarios

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestExplicitZeroIsRefused: a zero the defaults would take for "not given"
// is refused, naming what is allowed, instead of running with the default;
// left out, the setting still gets it.
func TestExplicitZeroIsRefused(t *testing.T) {
	for _, tc := range []struct{ set, want string }{
		{"proxier.syncPeriod=0", "--set proxier.syncPeriod=0: proxier.syncPeriod: must be > 0 (leave it out for the default, 30s)"},
		{"proxier.minSyncPeriod=0s", "--set proxier.minSyncPeriod=0s: proxier.minSyncPeriod: must be > 0 (leave it out for the default, 1s)"},
		{"proxier.gracefulTerminationRetry=0s", "proxier.gracefulTerminationRetry: must be > 0 (leave it out for the default, 1m0s)"},
		{"probes.interval=0s", "--set probes.interval=0s: probes.interval: must be at least 10ms (leave it out for the default, 100ms)"},
	} {
		t.Run(tc.set, func(t *testing.T) {
			_, err := Parse("x.yaml", []byte(base), []string{tc.set})
			require.ErrorContains(t, err, tc.want)
			if p := tc.set[:len("proxier.")]; p == "proxier." {
				_, _, _, err := ProxierOverrides([]string{tc.set})
				require.ErrorContains(t, err, tc.want, "kpsim state --set")
			}
		})
	}
	// In a file the error has the line.
	_, err := Parse("x.yaml", []byte(base+"proxier:\n  syncPeriod: 0s\n"), nil)
	require.ErrorContains(t, err, "x.yaml:16: proxier.syncPeriod: must be > 0")
	// Zeros with a meaning stay accepted.
	s, err := Parse("x.yaml", []byte(base), []string{"stopAfterFailedSyncs=0", "sim.timeScale=0"})
	require.NoError(t, err)
	require.Zero(t, s.StopAfterFailedSyncs)
}
