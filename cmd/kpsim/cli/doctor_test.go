package cli

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kpsim/kpsim/dataplane"
	"github.com/kpsim/kpsim/kernel"
)

func TestScenarioNeeds(t *testing.T) {
	n, backend, err := scenarioNeeds("dual-stack")
	require.NoError(t, err)
	require.Equal(t, "sim", backend)
	require.True(t, n.IPv6, "dual-stack runs an IPv6 proxier")
	n, _, err = scenarioNeeds("smoke")
	require.NoError(t, err)
	require.False(t, n.IPv6)
	require.Equal(t, dataplane.DefaultIPSetStrategy, n.IPSetStrategy, "the scenarios package's defaults, not doctor's own")
	_, _, err = scenarioNeeds("no-such-scenario")
	require.ErrorContains(t, err, "not a shipped scenario")
}

func TestPrintDoctor(t *testing.T) {
	no := kernel.Check{Detail: "module ip_vs not available: no /proc/net/ip_vs"}
	caps := kernel.Capabilities{
		Kernel: "6.1.0", Root: kernel.Check{OK: true}, NetNS: kernel.Check{OK: true}, IPVS: no,
		IPSetTypes: map[dataplane.SetType]kernel.Check{dataplane.HashIP: {OK: true}},
		IPTables:   map[string]kernel.Check{"legacy": {OK: true, Detail: "iptables v1.8.9 (legacy)"}},
	}
	kernelNo := backendVerdict{Backend: "kernel", Missing: []string{"IPVS (" + no.Detail + ")"}}
	rep := doctorReport{
		Capabilities: caps,
		Backends:     []backendVerdict{{Backend: "sim", OK: true}, kernelNo},
		NFTablesMode: backendVerdict{Backend: "kernel", Missing: []string{"nftables (nft not installed)"}},
		Scenarios: []scenarioVerdict{
			{Name: "smoke", Backend: "sim", Backends: []backendVerdict{{Backend: "sim", OK: true}, kernelNo}},
			{Name: "dual", Backend: "kernel", Backends: []backendVerdict{{Backend: "sim", OK: true},
				{Backend: "kernel", Missing: append(kernelNo.Missing, "IPv6 (disabled)")}}},
			{Name: "broken", Error: "bad yaml"},
		},
	}
	var out bytes.Buffer
	printDoctor(&out, rep)
	for _, want := range []string{
		"kernel 6.1.0",
		"IPVS                 no (module ip_vs not available: no /proc/net/ip_vs)",
		"ipset hash:ip        yes",
		"iptables legacy      yes (iptables v1.8.9 (legacy))",
		"iptables ipvs match  no",
		"nftables (nft)       no",
		"sim                    yes (always)",
		"kernel                 no: missing IPVS (module ip_vs not available: no /proc/net/ip_vs)",
		"kernel, nftables mode  no: missing nftables (nft not installed)",
		"smoke   sim*: yes  kernel: no (as the backend)",
		"dual    sim: yes   kernel*: no: also missing IPv6 (disabled)",
		"broken  does not load: bad yaml",
	} {
		require.Contains(t, out.String(), want)
	}
	require.NotContains(t, out.String(), "IPVS schedulers", "no scheduler line without IPVS")
}

func TestDoctorUsage(t *testing.T) {
	var out, errOut bytes.Buffer
	require.Equal(t, 2, run([]string{"doctor", "--require", "kvm"}, &out, &errOut))
	require.True(t, strings.Contains(errOut.String(), "want sim or kernel"))
}
