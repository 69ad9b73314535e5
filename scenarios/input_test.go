package scenarios

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kpsim/kpsim/objects"
)

// TestExplicitZeroIsRefused: a zero the defaults would take for "not given"
// is refused, naming what is allowed, instead of running with the default;
// left out, the setting still gets it.
func TestExplicitZeroIsRefused(t *testing.T) {
	for _, tc := range []struct{ set, want string }{
		{"proxier.syncPeriod=0", "--set proxier.syncPeriod=0: proxier.syncPeriod: must be > 0 (default 30s)"},
		{"proxier.minSyncPeriod=0s", "--set proxier.minSyncPeriod=0s: proxier.minSyncPeriod: must be > 0 (default 1s)"},
		{"proxier.gracefulTerminationRetry=0s", "proxier.gracefulTerminationRetry: must be > 0 (default 1m0s)"},
		{"probes.interval=0s", "--set probes.interval=0s: probes.interval: must be at least 10ms (default 100ms)"},
	} {
		t.Run(tc.set, func(t *testing.T) {
			_, err := Parse("x.yaml", []byte(base), []string{tc.set})
			require.ErrorContains(t, err, tc.want)
			if strings.HasPrefix(tc.set, "proxier.") {
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

// TestExportGivenAsScenario: a kubectl export given where a scenario goes
// says what it is and how to run one on it, and that command works: a
// --set cluster.fromFile puts the export in place of the cluster the
// scenario generates, its path relative to the working directory.
func TestExportGivenAsScenario(t *testing.T) {
	export, err := os.ReadFile(filepath.Join("..", "objects", "testdata", "example", "cluster.json"))
	require.NoError(t, err)
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "export.json"), export, 0o644))
	t.Chdir(dir)

	_, err = Load("export.json", nil)
	require.EqualError(t, err, "export.json: is a kubectl export, not a scenario: run a scenario on it, "+
		"e.g. kpsim run -s smoke --set cluster.fromFile=export.json (see scenarios/README.md)")
	_, err = Parse("list.yaml", []byte("apiVersion: v1\nkind: List\nitems: []\n"), nil)
	require.ErrorContains(t, err, "list.yaml: is a kubectl export, not a scenario")

	s, err := Load("smoke", []string{"cluster.fromFile=export.json"})
	require.NoError(t, err)
	want, err := objects.Load("export.json")
	require.NoError(t, err)
	require.Len(t, s.ClusterObjects().Services, len(want.Services))
	require.Zero(t, s.Cluster.Services, "the scenario's generated services gave way")

	// Both given the same way are still a mistake.
	_, err = Parse("x.yaml", []byte(base+"  # x\n"), []string{"cluster.fromFile=export.json", "cluster.services=3"})
	require.ErrorContains(t, err, "cluster.services: not allowed with cluster.fromFile")
}
