package scenarios

import (
	"fmt"
	"strings"
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

// manyNames is a --set of n service names of a cluster of n services (as
// base names them), the one at missing replaced by one not in it.
func manyNames(n, missing int) string {
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("ns-%03d/svc-%05d", 0, i)
	}
	names[missing] = "ns-000/missing-svc"
	return "probes.services=[" + strings.Join(names, ", ") + "]"
}

// TestLongSetValuesAreCut: an error about a --set names the override with
// its value cut short, and an override with several errors is named once:
// a list of thousands of names with one missing printed the whole list
// with every error.
func TestLongSetValuesAreCut(t *testing.T) {
	set := manyNames(4000, 1234)
	_, err := Parse("x.yaml", []byte(base), []string{"cluster.services=4000", set})
	require.Error(t, err)
	msg := err.Error()
	require.Less(t, len(msg), 1000, "%.300s", msg)
	require.Contains(t, msg, "probes.services[1234]: no service ns-000/missing-svc in the cluster")
	require.Contains(t, msg, fmt.Sprintf("--set %s… (%d more characters)", set[:200], len(set)-200))

	// Two malformed names: the override is named once, each problem on its line.
	set = strings.Replace(manyNames(4000, 7), "svc-00009", "x/y", 1)
	set = strings.Replace(set, "svc-00011", "a/b/c", 1)
	_, err = Parse("x.yaml", []byte(base), []string{"cluster.services=4000", set, "timeline[4].churnEndpoints.rate=0"})
	require.Error(t, err)
	msg = err.Error()
	require.Less(t, len(msg), 1000, "%.300s", msg)
	require.Equal(t, 1, strings.Count(msg, "svc-00000"), msg)
	require.Contains(t, msg, "\n  probes.services[9]: must be namespace/name")
	require.Contains(t, msg, "\n  probes.services[11]: must be namespace/name")
	require.Contains(t, msg, "--set timeline[4].churnEndpoints.rate=0: timeline[4].churnEndpoints.rate: must be > 0")

	// A long string where a number goes is cut too.
	long := strings.Repeat("x", 5000)
	_, err = Parse("x.yaml", []byte(base), []string{"seed=" + long})
	require.Error(t, err)
	require.Less(t, len(err.Error()), 1000)
	require.Contains(t, err.Error(), "seed: must be a whole number, got the string")
}
