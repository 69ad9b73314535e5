package conformance

import (
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kpsim/kpsim/dataplane"
)

// natRules are kube-proxy IPVS-mode nat rules, written the way iptables-save
// prints them back so that each can be found in Save's output.
var natRules = []string{
	`-A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES`,
	`-A OUTPUT -m comment --comment "kubernetes service portals" -j KUBE-SERVICES`,
	`-A POSTROUTING -m comment --comment "kubernetes postrouting rules" -j KUBE-POSTROUTING`,
	`-A KUBE-MARK-MASQ -j MARK --set-xmark 0x4000/0x4000`,
	`-A KUBE-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN`,
	`-A KUBE-POSTROUTING -j MARK --set-xmark 0x4000/0x0`,
	`-A KUBE-POSTROUTING -m comment --comment "kubernetes service traffic requiring SNAT" -j MASQUERADE --random-fully`,
	`-A KUBE-SERVICES -m comment --comment "Kubernetes service cluster ip + port for masquerade purpose" -m set --match-set KUBE-CLUSTER-IP src,dst -j KUBE-MARK-MASQ`,
	`-A KUBE-SERVICES -m addrtype --dst-type LOCAL -j KUBE-NODE-PORT`,
	`-A KUBE-SERVICES -m set --match-set KUBE-CLUSTER-IP dst,dst -j ACCEPT`,
	`-A KUBE-NODE-PORT -p tcp -m comment --comment "Kubernetes nodeport TCP port for masquerade purpose" -m set --match-set KUBE-NODE-PORT-TCP dst -j KUBE-MARK-MASQ`,
}

var natChains = []string{"KUBE-SERVICES", "KUBE-POSTROUTING", "KUBE-NODE-PORT", "KUBE-MARK-MASQ"}

func natPayload(rules []string, chains ...string) []byte {
	var b strings.Builder
	b.WriteString("*nat\n")
	for _, c := range chains {
		b.WriteString(":" + c + " - [0:0]\n")
	}
	for _, r := range rules {
		b.WriteString(r + "\n")
	}
	b.WriteString("COMMIT\n")
	return []byte(b.String())
}

// kubeSets creates the sets natRules match.
func kubeSets(t *testing.T, ipset dataplane.IPSet, f dataplane.Family) {
	t.Helper()
	prefix := "KUBE-"
	if f == dataplane.IPv6 {
		prefix = "KUBE-6-"
	}
	require.NoError(t, ipset.CreateSet(dataplane.Set{Name: prefix + "CLUSTER-IP", Type: dataplane.HashIPPort, Family: f}))
	require.NoError(t, ipset.CreateSet(dataplane.Set{Name: prefix + "NODE-PORT-TCP", Type: dataplane.BitmapPort, PortTo: 65535}))
}

func forFamily(rules []string, f dataplane.Family) []string {
	if f == dataplane.IPv4 {
		return rules
	}
	out := make([]string, len(rules))
	for i, r := range rules {
		out[i] = strings.ReplaceAll(r, "--match-set KUBE-", "--match-set KUBE-6-")
	}
	return out
}

func requireRules(t *testing.T, ipt dataplane.IPTables, f dataplane.Family, table string, present, absent []string) {
	t.Helper()
	out, err := ipt.Save(f, table)
	require.NoError(t, err)
	got := lines(out)
	for _, r := range present {
		require.True(t, got[strings.Join(strings.Fields(r), " ")], "%s %s: missing rule %s\nsaved:\n%s", f, table, r, out)
	}
	for _, r := range absent {
		require.False(t, got[strings.Join(strings.Fields(r), " ")], "%s %s: unexpected rule %s\nsaved:\n%s", f, table, r, out)
	}
}

func runIPTables(t *testing.T, newDataplane func(t *testing.T) dataplane.Dataplane, have Capabilities) {
	// Sets that rules match need ipset too.
	needSets := func(t *testing.T) {
		have.need(t, "ipset:"+string(dataplane.HashIPPort), have.hasSet(dataplane.HashIPPort))
		have.need(t, "ipset:"+string(dataplane.BitmapPort), have.hasSet(dataplane.BitmapPort))
	}

	for _, f := range []dataplane.Family{dataplane.IPv4, dataplane.IPv6} {
		t.Run(string(f), func(t *testing.T) {
			t.Run("save forms", func(t *testing.T) { runSaveForms(t, newDataplane, have, f) })
			t.Run("kube-proxy's whole ruleset", func(t *testing.T) { runRulesets(t, newDataplane, have, f) })
			t.Run("kube-proxy ruleset round trip", func(t *testing.T) {
				needSets(t)
				dp := newDataplane(t)
				kubeSets(t, dp.IPSet, f)
				rules := forFamily(natRules, f)
				require.NoError(t, dp.IPTables.Restore(f, natPayload(rules, natChains...)))
				requireRules(t, dp.IPTables, f, "nat", rules, nil)
				out, err := dp.IPTables.Save(f, "nat")
				require.NoError(t, err)
				for _, c := range natChains {
					require.Contains(t, string(out), ":"+c+" ")
				}
				// Restoring the same payload again flushes the declared chains
				// but not the built-in ones, whose rules are appended again.
				require.NoError(t, dp.IPTables.Restore(f, natPayload(rules, natChains...)))
				again, err := dp.IPTables.Save(f, "nat")
				require.NoError(t, err)
				for _, r := range rules {
					want := 1
					if !strings.HasPrefix(r, "-A KUBE-") {
						want = 2
					}
					require.Equal(t, want, strings.Count(string(again), r+"\n"), "occurrences of %s\nsaved:\n%s", r, again)
				}
			})

			t.Run("noflush keeps undeclared chains", func(t *testing.T) {
				ipt := newDataplane(t).IPTables
				old := `-A KUBE-SERVICES -d ` + hostRoute(f, "10.96.0.10") + ` -j ACCEPT`
				cur := `-A KUBE-SERVICES -d ` + hostRoute(f, "10.96.0.11") + ` -j ACCEPT`
				kept := []string{`-A PREROUTING -j KUBE-SERVICES`, `-A OTHER-TOOL -j RETURN`}
				require.NoError(t, ipt.Restore(f, natPayload(append(kept, old), "KUBE-SERVICES", "OTHER-TOOL")))
				require.NoError(t, ipt.Restore(f, natPayload([]string{cur}, "KUBE-SERVICES")))
				requireRules(t, ipt, f, "nat", append(kept, cur), []string{old})
				// Other tables are untouched.
				requireRules(t, ipt, f, "filter", nil, []string{cur})
			})

			t.Run("atomic", func(t *testing.T) {
				ipt := newDataplane(t).IPTables
				good := `-A KUBE-SERVICES -j RETURN`
				require.Error(t, ipt.Restore(f, natPayload([]string{good, `-A KUBE-SERVICES -j KUBE-NO-SUCH-CHAIN`}, "KUBE-SERVICES")),
					"a jump to an undeclared chain")
				out, err := ipt.Save(f, "nat")
				require.NoError(t, err)
				require.NotContains(t, string(out), "KUBE-SERVICES", "a failed payload must leave no trace")
				require.Error(t, ipt.Restore(f, []byte("*nat\n:KUBE-SERVICES - [0:0]\n"+good+"\n")),
					"a payload without COMMIT")
				out, err = ipt.Save(f, "nat")
				require.NoError(t, err)
				require.NotContains(t, string(out), "KUBE-SERVICES")
			})

			t.Run("match-set of a missing set", func(t *testing.T) {
				ipt := newDataplane(t).IPTables
				require.Error(t, ipt.Restore(f, natPayload([]string{`-A KUBE-SERVICES -m set --match-set KUBE-NO-SUCH-SET dst,dst -j ACCEPT`}, "KUBE-SERVICES")))
			})

			t.Run("delete chain", func(t *testing.T) {
				ipt := newDataplane(t).IPTables
				require.NoError(t, ipt.Restore(f, natPayload([]string{`-A PREROUTING -j KUBE-OLD`}, "KUBE-OLD")))
				require.Error(t, ipt.Restore(f, []byte("*nat\n-X KUBE-OLD\nCOMMIT\n")), "deleting a referenced chain")
				requireRules(t, ipt, f, "nat", []string{`-A PREROUTING -j KUBE-OLD`}, nil)
				require.NoError(t, ipt.Restore(f, []byte("*nat\n-D PREROUTING -j KUBE-OLD\n-X KUBE-OLD\nCOMMIT\n")))
				out, err := ipt.Save(f, "nat")
				require.NoError(t, err)
				require.NotContains(t, string(out), "KUBE-OLD")
			})

			// One command at a time, as a kube-proxy release ensures its
			// chains and jumps (-N, -C then -A or -I) and cleans up (-D, -F,
			// -X): what is missing is fs.ErrNotExist, a chain made twice
			// fs.ErrExist, as utiliptables reads iptables' messages.
			t.Run("commands", func(t *testing.T) {
				ipt := newDataplane(t).IPTables
				jump := []string{"-m", "comment", "--comment", "kubernetes service portals", "-j", "KUBE-SERVICES"}
				cmd := func(args ...string) error { return ipt.Command(f, "nat", args...) }
				requireNotExist(t, cmd(append([]string{"-C", "PREROUTING"}, jump...)...), "a jump to a chain that does not exist")
				require.NoError(t, cmd("-N", "KUBE-SERVICES"))
				requireExist(t, cmd("-N", "KUBE-SERVICES"), "a chain made twice")
				requireNotExist(t, cmd(append([]string{"-C", "PREROUTING"}, jump...)...), "a jump not yet made")
				require.NoError(t, cmd(append([]string{"-I", "PREROUTING"}, jump...)...))
				require.NoError(t, cmd(append([]string{"-C", "PREROUTING"}, jump...)...))
				require.NoError(t, cmd("-A", "KUBE-SERVICES", "-d", hostRoute(f, "10.96.0.10"), "-j", "RETURN"))
				requireRules(t, ipt, f, "nat", []string{`-A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES`,
					`-A KUBE-SERVICES -d ` + hostRoute(f, "10.96.0.10") + ` -j RETURN`}, nil)
				require.Error(t, cmd("-X", "KUBE-SERVICES"), "deleting a chain with rules, jumped to")
				require.NoError(t, cmd(append([]string{"-D", "PREROUTING"}, jump...)...))
				requireNotExist(t, cmd(append([]string{"-D", "PREROUTING"}, jump...)...), "a rule deleted twice")
				require.NoError(t, cmd("-F", "KUBE-SERVICES"))
				require.NoError(t, cmd("-X", "KUBE-SERVICES"))
				requireNotExist(t, cmd("-F", "KUBE-SERVICES"), "flushing a chain that is gone")
				requireNotExist(t, cmd("-X", "KUBE-SERVICES"), "deleting a chain that is gone")
				out, err := ipt.Save(f, "nat")
				require.NoError(t, err)
				require.NotContains(t, string(out), "KUBE-SERVICES")
			})

			t.Run("set in use", func(t *testing.T) {
				needSets(t)
				dp := newDataplane(t)
				kubeSets(t, dp.IPSet, f)
				rules := forFamily(natRules, f)
				require.NoError(t, dp.IPTables.Restore(f, natPayload(rules, natChains...)))
				name := "KUBE-CLUSTER-IP"
				if f == dataplane.IPv6 {
					name = "KUBE-6-CLUSTER-IP"
				}
				requireErrno(t, dp.IPSet.DestroySet(name), syscall.EBUSY, "destroying a set iptables matches on")
				// Flushing the chains drops the references.
				require.NoError(t, dp.IPTables.Restore(f, natPayload(nil, natChains...)))
				require.NoError(t, dp.IPSet.DestroySet(name))
			})
		})
	}

	t.Run("families are separate", func(t *testing.T) {
		ipt := newDataplane(t).IPTables
		require.NoError(t, ipt.Restore(dataplane.IPv4, natPayload([]string{`-A KUBE-SERVICES -d 10.96.0.10/32 -j ACCEPT`}, "KUBE-SERVICES")))
		out, err := ipt.Save(dataplane.IPv6, "nat")
		require.NoError(t, err)
		require.NotContains(t, string(out), "KUBE-SERVICES")
	})
}

func hostRoute(f dataplane.Family, v4 string) string {
	if f == dataplane.IPv4 {
		return v4 + "/32"
	}
	return "fd00:10:96::" + strings.TrimPrefix(v4, "10.96.0.") + "/128"
}
