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

// names lists n service names default/web-0 ... of no generated cluster.
func names(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("default/web-%d", i)
	}
	return out
}

// TestMissingNamesAreOneError: names that are no service of the cluster
// are one error, counted, with the first few: 3,900 names of another
// cluster printed 3,900 lines. One alone is named at its own line.
func TestMissingNamesAreOneError(t *testing.T) {
	first5 := "default/web-0, default/web-1, default/web-2, default/web-3, default/web-4"
	inFile := strings.Replace(base, "  services: 2\n", "  services:\n    - "+strings.Join(names(3900), "\n    - ")+"\n", 1)
	mixed := strings.Split(manyNames(4000, 0), "[")[1]
	mixed = strings.Replace(mixed, "svc-00007", "web-7", 1)
	mixed = strings.Replace(mixed, "svc-03999", "web-3999", 1)
	for _, tc := range []struct {
		name, yaml string
		sets       []string
		want       string
	}{
		{"probes in the file", inFile, nil,
			"x.yaml:9: probes.services: 3900 of the 3900 services named are not in the cluster: " + first5 + " and 3895 more"},
		{"a few among many", base, []string{"cluster.services=4000", "probes.services=[" + mixed},
			"probes.services: 3 of the 4000 services named are not in the cluster: ns-000/missing-svc, ns-000/web-7, ns-000/web-3999 (with --set cluster.services=4000)"},
		{"churn", strings.Replace(base, "share: 0.5", "services: ["+strings.Join(names(10), ", ")+"]", 1), nil,
			"x.yaml:14: timeline[4].churnEndpoints.services: 10 of the 10 services named are not in the cluster: " + first5 + " and 5 more"},
		{"one alone", strings.Replace(base, "  services: 2\n", "  services: [ns-000/svc-00001, default/web-0]\n", 1), nil,
			"x.yaml:8: probes.services[1]: no service default/web-0 in the cluster"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("x.yaml", []byte(tc.yaml), tc.sets)
			var es Errors
			require.ErrorAs(t, err, &es)
			require.Len(t, es, 1, "%.500s", err)
			require.Contains(t, err.Error(), tc.want)
			require.Less(t, len(err.Error()), 1000, "%.300s", err)
		})
	}
}

// TestErrorsNameTheirOverrides: a problem that an override of another
// field causes names the override, where only the file's line was given
// (--set cluster.services=0 blamed the shipped smoke scenario's probes).
// Overrides of fields the problem does not follow from are not named.
func TestErrorsNameTheirOverrides(t *testing.T) {
	smokeFile, smoke, err := Read("smoke")
	require.NoError(t, err)
	for _, tc := range []struct {
		name, file, yaml string
		sets             []string
		want             string
	}{
		{"a count an override empties", smokeFile, string(smoke), []string{"cluster.services=0"},
			"scenarios/smoke.yaml:31: probes.services: 4 services asked for, the cluster has 0 (with --set cluster.services=0)"},
		{"a name an override removes", "x.yaml", strings.Replace(base, "  services: 2\n", "  services: [ns-000/svc-00005]\n", 1),
			[]string{"proxier.syncPeriod=10s", "cluster.services=3"},
			"x.yaml:8: probes.services[0]: no service ns-000/svc-00005 in the cluster (with --set cluster.services=3)"},
		{"an unrelated override", "x.yaml", strings.Replace(base, "  services: 2\n", "  services: [ns-000/nope]\n", 1),
			[]string{"proxier.syncPeriod=10s"},
			"x.yaml:8: probes.services[0]: no service ns-000/nope in the cluster"},
		{"an override's own problem names the others", "x.yaml", base, []string{"probes.services=20", "cluster.services=5", "cluster.services=5"},
			"--set probes.services=20: probes.services: 20 services asked for, the cluster has 5 (with --set cluster.services=5)"},
		{"a pool an override outgrows", "x.yaml", strings.Replace(base, "  services: 10\n", "  services: 10\n  podCIDRs: [10.244.0.0/26]\n", 1),
			[]string{"cluster.services=40"},
			"x.yaml:6: cluster.podCIDRs: 10.244.0.0/26 holds 61 pod addresses (one kept for the probing pod), the cluster needs up to 85 " +
				"(40 services x 2 endpoints, and 5 that churnEndpoints adds): give a /25 or larger, or fewer endpoints (with --set cluster.services=40)"},
		{"a clock an override chooses", "x.yaml", base + "  - restartProxier: {slowInitialList: 2ms}\nsim: {timeScale: 1}\n",
			[]string{"sim.timeScale=0"},
			"x.yaml:15: timeline[5].restartProxier.slowInitialList: slows handlers in wall time, which a run on the modeled clock " +
				"(the sim at timeScale 0) does not see; use knownAtFirstSync to say what the first sync knows (with --set sim.timeScale=0)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse(tc.file, []byte(tc.yaml), tc.sets)
			require.EqualError(t, err, tc.want)
		})
	}
}

// TestProbeTargetsAreCountedBeforeTheRun: too many probe targets are
// refused while loading, counted by the rule the run probes them by: a
// target per address of each kind (a NodePort one per node address) from
// each client. The run used to fail with it after it had started.
func TestProbeTargetsAreCountedBeforeTheRun(t *testing.T) {
	for _, tc := range []struct {
		name string
		sets []string
		want int // targets
	}{
		{"at the limit", []string{"cluster.services=256", "probes.services=256", "probes.kinds=[clusterip]"}, 256},
		{"a NodePort per node address", []string{"cluster.services=100", "cluster.types={nodePort: 1}", "probes.services=100",
			"probes.kinds=[clusterip, nodeport]", "proxier.families=[IPv4, IPv6]"}, 300},
		{"from each client", []string{"cluster.services=129", "probes.services=129", "probes.from=[pod, node]"}, 258},
		{"names and a count", []string{"cluster.services=200", "probes.services={names: [ns-000/svc-00001], count: 127}", "probes.from=[pod, node]"}, 256},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Parse("x.yaml", []byte(base), tc.sets)
			if tc.want <= maxProbeTargets {
				require.NoError(t, err)
				require.Len(t, s.targets, tc.want, "the run probes what validation counted")
				return
			}
			require.ErrorContains(t, err, fmt.Sprintf("probes.services: %d probe targets, at most %d", tc.want, maxProbeTargets))
		})
	}
	// In the file, the error has its line.
	y := strings.Replace(strings.Replace(base, "services: 10", "services: 200", 1), "  services: 2\n", "  services: 200\n  from: [pod, node]\n", 1)
	_, err := Parse("x.yaml", []byte(y), nil)
	require.ErrorContains(t, err, "x.yaml:8: probes.services: 400 probe targets, at most 256: a probed service has one per address of each kind in probes.kinds [clusterip]")
}

// TestChurnTakesNamesOrACount: churnEndpoints.services takes names or a
// count; both together, which the run would take as the names alone, are
// refused at their line.
func TestChurnTakesNamesOrACount(t *testing.T) {
	for _, tc := range []struct{ services, want string }{
		{"[ns-000/svc-00001, ns-000/svc-00002]", ""},
		{"3", ""},
		{"{names: [ns-000/svc-00001]}", ""},
		{"{names: [ns-000/svc-00001], count: 2}", "x.yaml:14: timeline[4].churnEndpoints.services: give names or a count, not both"},
	} {
		t.Run(tc.services, func(t *testing.T) {
			_, err := Parse("x.yaml", []byte(strings.Replace(base, "share: 0.5", "services: "+tc.services, 1)), nil)
			if tc.want == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tc.want)
		})
	}
}
