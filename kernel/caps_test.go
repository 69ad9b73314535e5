package kernel

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kpsim/kpsim/dataplane"
	"github.com/kpsim/kpsim/kernel/netns/netnstest"
)

func allCaps() Capabilities {
	c := Capabilities{
		Root: Check{OK: true}, NetNS: Check{OK: true}, IPVS: Check{OK: true}, Dummy: Check{OK: true},
		Veth: Check{OK: true}, IPSetTool: Check{OK: true}, Conntrack: Check{OK: true}, IPv6: Check{OK: true}, NFTables: Check{OK: true},
		Schedulers: map[string]Check{}, IPSetTypes: map[dataplane.SetType]Check{},
		IPTables: map[string]Check{"legacy": {OK: true}, "nft": {OK: true}},
	}
	for _, s := range dataplane.Schedulers {
		c.Schedulers[s] = Check{OK: true}
	}
	for _, t := range supportedSetTypes {
		c.IPSetTypes[t] = Check{OK: true}
	}
	return c
}

func TestMissing(t *testing.T) {
	noIPVS := allCaps()
	noIPVS.IPVS = Check{Detail: "module ip_vs not available"}
	noIPVS.Dummy = Check{Detail: "dummy link driver not available"}
	noRR := allCaps()
	noRR.Schedulers["rr"] = Check{Detail: "module ip_vs_rr: no such file"}
	noLegacy := allCaps()
	noLegacy.IPTables["legacy"] = Check{Detail: "not installed"}
	noIPTables := allCaps()
	noIPTables.IPTables = map[string]Check{}
	noBitmap := allCaps()
	noBitmap.IPSetTypes[dataplane.BitmapPort] = Check{Detail: "set type not supported"}
	noHashNet := allCaps()
	noHashNet.IPSetTypes[dataplane.HashNet] = Check{Detail: "set type not supported"}
	notRoot := allCaps()
	notRoot.Root = Check{Detail: "running as uid 1000"}
	notRoot.NetNS = Check{Detail: "unshare(CLONE_NEWNET): operation not permitted"}
	notRoot.IPVS = Check{Detail: "not checked: needs a private network namespace"}
	noTool := allCaps()
	noTool.IPSetTool = Check{Detail: "ipset not installed"}
	noV6 := allCaps()
	noV6.IPv6 = Check{Detail: "no /proc/sys/net/ipv6"}
	noNFT := allCaps()
	noNFT.NFTables = Check{Detail: "nft not installed"}
	hostNoNFT := noIPVS
	hostNoNFT.NFTables = noNFT.NFTables
	for _, tc := range []struct {
		name    string
		caps    Capabilities
		backend string
		needs   Needs
		want    []string
	}{
		{"sim needs nothing", Capabilities{}, "sim", Needs{}, nil},
		{"everything", allCaps(), "kernel", Needs{}, nil},
		{"host kernel", noIPVS, "kernel", Needs{}, []string{"IPVS (module ip_vs not available)", "dummy links (dummy link driver not available)"}},
		{"no rr", noRR, "kernel", Needs{}, []string{"IPVS scheduler rr (module ip_vs_rr: no such file)"}},
		{"one iptables variant is enough", noLegacy, "kernel", Needs{}, nil},
		{"no iptables", noIPTables, "kernel", Needs{}, []string{"iptables (legacy: no; nft: no)"}},
		{"kube-proxy set type", noBitmap, "kernel", Needs{}, []string{"ipset type bitmap:port (set type not supported)"}},
		{"set type kube-proxy does not use", noHashNet, "kernel", Needs{}, nil},
		{"not root: the rest was not checked", notRoot, "kernel", Needs{},
			[]string{"root (running as uid 1000)", "network namespaces (unshare(CLONE_NEWNET): operation not permitted)"}},
		{"unknown backend", allCaps(), "kvm", Needs{}, []string{`unknown backend "kvm" (want one of [sim kernel])`}},
		{"scheduler a scenario asks for", noRR, "kernel", Needs{Scheduler: "wrr"}, nil},
		{"ipset tool for exec", noTool, "kernel", Needs{}, []string{"ipset tool (ipset not installed)"}},
		{"no ipset tool for netlink", noTool, "kernel", Needs{IPSetStrategy: dataplane.IPSetNetlink}, nil},
		{"ipv6 only when asked", noV6, "kernel", Needs{}, nil},
		{"ipv6 asked", noV6, "kernel", Needs{IPv6: true}, []string{"IPv6 (no /proc/sys/net/ipv6)"}},
		{"nftables mode on the host kernel: no IPVS needed", noIPVS, "kernel", Needs{NFTables: true, NoIPVS: true}, nil},
		{"nftables mode needs no ipset or iptables", noIPTables, "kernel", Needs{NFTables: true, NoIPVS: true}, nil},
		{"nftables mode without nft", hostNoNFT, "kernel", Needs{NFTables: true, NoIPVS: true}, []string{"nftables (nft not installed)"}},
		{"ipvs mode does not need nft", noNFT, "kernel", Needs{}, nil},
		{"a switch needs both", hostNoNFT, "kernel", Needs{NFTables: true},
			[]string{"IPVS (module ip_vs not available)", "dummy links (dummy link driver not available)", "nftables (nft not installed)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, tc.caps.MissingFor(tc.backend, tc.needs))
			if tc.needs == (Needs{}) {
				require.Equal(t, tc.want, tc.caps.Missing(tc.backend))
			}
		})
	}
}

// TestDetectLeavesNoTrace runs Detect inside a namespace of the test's own
// and checks that namespace is as it was: Detect works in a scratch
// namespace of its own thread.
func TestDetectLeavesNoTrace(t *testing.T) {
	if !netnstest.Private(t) {
		return
	}
	snapshot := func() string {
		var b strings.Builder
		for _, args := range [][]string{{"ip", "-d", "link"}, {"ip", "addr"}, {"ipset", "list"}, {"iptables-legacy-save"}, {"iptables-nft-save"}} {
			out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
			if err != nil && len(out) == 0 {
				continue // a tool this machine lacks shows nothing either way
			}
			b.WriteString(strings.Join(args, " ") + "\n" + string(out))
		}
		if out, err := os.ReadFile("/proc/net/ip_vs"); err == nil {
			b.Write(out)
		}
		return b.String()
	}
	before := snapshot()
	c := Detect()
	require.Equal(t, before, snapshot())

	require.True(t, c.Root.OK)
	require.True(t, c.NetNS.OK)
	require.NotEmpty(t, c.Kernel)
	require.Equal(t, c.IPVS.OK, c.Schedulers["rr"].OK, "rr comes with IPVS: %v / %v", c.IPVS, c.Schedulers["rr"])
	for _, typ := range kubeProxySetTypes {
		require.True(t, c.IPSetTypes[typ].OK, "%s: %v (every kernel kpsim runs on has kube-proxy's set types)", typ, c.IPSetTypes[typ])
	}
	if !c.IPVS.OK {
		require.Contains(t, c.Missing("kernel"), "IPVS ("+c.IPVS.Detail+")")
	}
}
