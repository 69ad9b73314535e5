package proxier

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kpsim/kpsim/dataplane"
)

// TestConfigValidateListsEveryField: every invalid field is reported, by
// its YAML name, so a scenario can place each at its line.
func TestConfigValidateListsEveryField(t *testing.T) {
	require.NoError(t, Config{}.Defaults().Validate())
	cfg := Config{
		Families:     []dataplane.Family{dataplane.IPv4, "IPv5", dataplane.IPv4},
		InitialSync:  "eventually",
		Scheduler:    "fifo",
		ClusterCIDRs: []string{"10.0.0.0/8", "10.1.0.0/16", "nope"},
		ExcludeCIDRs: []string{"10.0.0.0/33"},
	}.Defaults()
	cfg.MinSyncPeriod, cfg.SyncPeriod = 2*time.Minute, time.Minute
	err := cfg.Validate()
	var es ConfigErrors
	require.ErrorAs(t, err, &es)
	require.Equal(t, ConfigErrors{
		{"families", "want one or two IP families, got 3"},
		{"families[1]", `"IPv5" is not IPv4 or IPv6`},
		{"families[2]", "IPv4 listed twice"},
		{"initialSync", `"eventually" is not one of handlers, legacy`},
		{"minSyncPeriod", "2m0s is longer than syncPeriod 1m0s"},
		{"scheduler", `"fifo" is not one of rr, wrr, lc, wlc, lblc, lblcr, dh, sh, sed, nq, mh`},
		{"clusterCIDRs[1]", "a second IPv4 CIDR; give one per family"},
		{"clusterCIDRs[2]", `not a CIDR: "nope"`},
		{"excludeCIDRs[0]", `not a CIDR: "10.0.0.0/33"`},
	}, es)
}

// TestConfigJSON: durations are written as duration strings and read back.
func TestConfigJSON(t *testing.T) {
	cfg := Config{Families: []dataplane.Family{dataplane.IPv4}, MasqueradeAll: true}.Defaults()
	cfg.MinSyncPeriod = 250 * time.Millisecond
	b, err := json.Marshal(cfg)
	require.NoError(t, err)
	require.Contains(t, string(b), `"minSyncPeriod":"250ms"`)
	require.Contains(t, string(b), `"syncPeriod":"30s"`)
	require.Contains(t, string(b), `"gracefulTerminationRetry":"1m0s"`)
	require.Contains(t, string(b), `"masqueradeAll":true`)
	var back Config
	require.NoError(t, json.Unmarshal(b, &back))
	require.Equal(t, cfg, back)
	require.ErrorContains(t, json.Unmarshal([]byte(`{"syncPeriod":"soon"}`), &back), "syncPeriod")
}

// TestConfigImplementation: kpsim's proxier unless a kube-proxy release is
// named by its module version.
func TestConfigImplementation(t *testing.T) {
	require.Equal(t, ImplementationKpsim, Config{}.Defaults().Implementation)
	for _, tc := range []struct {
		impl string
		ok   bool
	}{
		{"kpsim", true},
		{"kube-proxy@v1.37.1", true},
		{"kube-proxy@v1.35.0-rc.1", true},
		{"kube-proxy", false},
		{"kube-proxy@1.37.1", false},
		{"kube-proxy@v1.37", false},
		{"iptables", false},
	} {
		err := Config{Implementation: tc.impl}.Defaults().Validate()
		if tc.ok {
			require.NoError(t, err, tc.impl)
			continue
		}
		var es ConfigErrors
		require.ErrorAs(t, err, &es, tc.impl)
		require.Equal(t, ConfigErrors{{"implementation", `"` + tc.impl + `" is not kpsim or kube-proxy@VERSION (a release, e.g. kube-proxy@v1.37.1)`}}, es)
	}
}

// TestConfigMode: IPVS mode unless nftables or iptables mode is asked
// for, which only a release with nftables mode GA (v1.33 on) runs; kpsim's
// proxier is IPVS.
func TestConfigMode(t *testing.T) {
	require.Equal(t, ModeIPVS, Config{}.Defaults().Mode)
	for _, tc := range []struct {
		impl string
		mode Mode
		msg  string
	}{
		{"kube-proxy@v1.37.1", ModeNFTables, ""},
		{"kube-proxy@v1.33.0", ModeNFTables, ""},
		{"kube-proxy@v1.30.3", ModeIPVS, ""},
		{"kube-proxy@v1.30.3", ModeNFTables, "kube-proxy@v1.30.3 has nftables mode only behind a feature gate (GA in v1.33): kpsim runs nftables mode from kube-proxy v1.33"},
		{"kpsim", ModeNFTables, "kpsim's own proxier is an IPVS proxier; nftables mode runs a kube-proxy release (implementation: kube-proxy@v1.37.1)"},
		{"kube-proxy@v1.37.1", ModeIPTables, ""},
		{"kube-proxy@v1.34.3", ModeIPTables, ""},
		{"kube-proxy@v1.30.3", ModeIPTables, "kpsim runs iptables mode from kube-proxy v1.33 (kube-proxy@v1.30.3 runs in IPVS mode)"},
		{"kpsim", ModeIPTables, "kpsim's own proxier is an IPVS proxier; iptables mode runs a kube-proxy release (implementation: kube-proxy@v1.37.1)"},
		{"kube-proxy@v1.37.1", "userspace", `"userspace" is not ipvs, nftables or iptables`},
	} {
		err := Config{Implementation: tc.impl, Mode: tc.mode}.Defaults().Validate()
		if tc.msg == "" {
			require.NoError(t, err, "%s %s", tc.impl, tc.mode)
			continue
		}
		require.Equal(t, ConfigErrors{{"mode", tc.msg}}, err, "%s %s", tc.impl, tc.mode)
	}
}
