package proxier

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"slices"
	"strings"

	"github.com/kpsim/kpsim/dataplane"
)

// CleanupIPVSMode removes what IPVS mode programmed, as kube-proxy does when
// it starts in nftables mode (v1.37: cmd/kube-proxy's platformCleanup runs
// pkg/proxy/iptables's CleanupLeftovers, then pkg/proxy/ipvs's), in its
// order and command by command, so that the in-memory kernel charges what
// each command takes. Best effort, as kube-proxy's: every command runs, and
// what failed is returned.
//
// First iptables mode's cleanup, in each family: it deletes the jumps of
// iptables mode (those IPVS mode shares with it go: the service portals and
// postrouting jumps in nat, the forwarding jump in filter), then restores,
// per table, the flush and deletion of iptables mode's chains that exist
// (in nat it fails as a whole while KUBE-MARK-MASQ is still referenced, as
// on a real node), and deletes the mangle table's canary chain. Then IPVS
// mode's: every IPVS virtual server (a flush), the kube-ipvs0 link with the
// addresses bound to it, in each family its jumps deleted, its chains
// flushed, then deleted, and last its ipsets, by their IPv4 names only:
// kube-proxy destroys the sets of its IPVS proxier's list, which names them
// as an IPv4 proxier does, so a dual-stack node keeps its KUBE-6-* sets.
// What IPVS mode set and no cleanup undoes (its sysctls) stays.
//
// Each iptables command is one iptables process (dataplane.IPTables.Command;
// one that finds nothing to do fails, and is not an error here, as
// kube-proxy ignores "not found").
func CleanupIPVSMode(dp dataplane.Dataplane) error {
	var errs []error
	keep := func(err error) {
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	families := []dataplane.Family{dataplane.IPv4, dataplane.IPv6}
	for _, f := range families {
		cleanupIPTablesMode(dp.IPTables, f, keep)
	}
	svcs, err := dp.IPVS.Services()
	keep(err)
	for _, s := range svcs {
		keep(dp.IPVS.DeleteService(s.ServiceKey))
	}
	keep(dp.Links.DeleteLink(dataplane.DummyLink))
	for _, f := range families {
		for _, j := range jumpRules {
			keep(deleteRule(dp.IPTables, f, j.table, j.from, j.args()))
		}
		for _, command := range []string{"-F", "-X"} {
			for _, t := range ipvsModeChains {
				for _, c := range t.chains {
					keep(dp.IPTables.Command(f, t.name, command, c))
				}
			}
		}
	}
	for _, s := range setInfos {
		keep(dp.IPSet.DestroySet(s.name))
	}
	return errors.Join(errs...)
}

// ipvsModeChains are IPVS mode's iptables chains, by table.
var ipvsModeChains = []struct {
	name   string
	chains []string
}{{tableNAT, natChains}, {tableFilter, filterChains}}

// iptablesModeJumps are iptables mode's jumps from the built-in chains
// (v1.37): table, from, and the rule's text.
var iptablesModeJumps = []struct{ table, from, rule string }{
	{tableFilter, "INPUT", `-m conntrack --ctstate NEW -m comment --comment "kubernetes externally-visible service portals" -j KUBE-EXTERNAL-SERVICES`},
	{tableFilter, "FORWARD", `-m conntrack --ctstate NEW -m comment --comment "kubernetes externally-visible service portals" -j KUBE-EXTERNAL-SERVICES`},
	{tableFilter, "INPUT", `-m comment --comment "kubernetes health check service ports" -j KUBE-NODEPORTS`},
	{tableFilter, "FORWARD", `-m conntrack --ctstate NEW -m comment --comment "kubernetes service portals" -j KUBE-SERVICES`},
	{tableFilter, "OUTPUT", `-m conntrack --ctstate NEW -m comment --comment "kubernetes service portals" -j KUBE-SERVICES`},
	{tableFilter, "FORWARD", `-m comment --comment "kubernetes forwarding rules" -j KUBE-FORWARD`},
	{tableFilter, "INPUT", `-m conntrack --ctstate NEW -m comment --comment "kubernetes load balancer firewall" -j KUBE-PROXY-FIREWALL`},
	{tableFilter, "OUTPUT", `-m conntrack --ctstate NEW -m comment --comment "kubernetes load balancer firewall" -j KUBE-PROXY-FIREWALL`},
	{tableFilter, "FORWARD", `-m conntrack --ctstate NEW -m comment --comment "kubernetes load balancer firewall" -j KUBE-PROXY-FIREWALL`},
	{tableNAT, "OUTPUT", `-m comment --comment "kubernetes service portals" -j KUBE-SERVICES`},
	{tableNAT, "PREROUTING", `-m comment --comment "kubernetes service portals" -j KUBE-SERVICES`},
	{tableNAT, "POSTROUTING", `-m comment --comment "kubernetes postrouting rules" -j KUBE-POSTROUTING`},
}

// iptablesModeChains are the chains iptables mode's cleanup flushes and
// deletes in one restore per table, where they exist, and the prefixes of
// its per-service chains (nat only).
var iptablesModeChains = []struct {
	name             string
	chains, prefixes []string
}{
	{tableNAT, []string{"KUBE-SERVICES", "KUBE-NODEPORTS", "KUBE-POSTROUTING", "KUBE-MARK-MASQ", "KUBE-PROXY-CANARY"},
		[]string{"KUBE-SVC-", "KUBE-SVL-", "KUBE-SEP-", "KUBE-FW-", "KUBE-EXT-"}},
	{tableFilter, []string{"KUBE-SERVICES", "KUBE-EXTERNAL-SERVICES", "KUBE-FORWARD", "KUBE-NODEPORTS", "KUBE-PROXY-FIREWALL", "KUBE-PROXY-CANARY"}, nil},
}

// iptablesModeChain says whether iptables mode has a chain of that name in
// that table.
func iptablesModeChain(table, name string) bool {
	for _, t := range iptablesModeChains {
		if t.name == table && slices.Contains(t.chains, name) {
			return true
		}
	}
	return false
}

// cleanupIPTablesMode is one family's part of iptables mode's cleanup; keep
// takes each command's error.
func cleanupIPTablesMode(ipt dataplane.IPTables, f dataplane.Family, keep func(error)) {
	for _, j := range iptablesModeJumps {
		keep(deleteRule(ipt, f, j.table, j.from, j.rule))
	}
	for _, t := range iptablesModeChains {
		tb, err := dataplane.ReadTable(ipt, f, t.name)
		if err != nil {
			keep(err)
			continue
		}
		var flush, remove []string
		for _, c := range slices.Sorted(maps.Keys(tb.Chains)) {
			if slices.Contains(t.chains, c) || slices.ContainsFunc(t.prefixes, func(p string) bool { return strings.HasPrefix(c, p) }) {
				flush = append(flush, ":"+c+" - [0:0]")
				remove = append(remove, "-X "+c)
			}
		}
		payload := "*" + t.name + "\n" + strings.Join(slices.Concat(flush, remove), "\n") + "\nCOMMIT\n"
		if err := ipt.Restore(f, []byte(payload)); err != nil {
			keep(fmt.Errorf("remove iptables mode's %s chains (%s): %w", t.name, f, err))
		}
	}
	keep(ipt.Command(f, "mangle", "-X", "KUBE-PROXY-CANARY"))
}

// deleteRule is `iptables -D from rule`, rule as text.
func deleteRule(ipt dataplane.IPTables, f dataplane.Family, table, from, rule string) error {
	args, err := dataplane.SplitRule(rule)
	if err != nil {
		return err
	}
	return ipt.Command(f, table, append([]string{"-D", from}, args...)...)
}

// IPVSModeLeftovers lists what IPVS mode programmed that is still on the
// node, one line per kind: virtual servers, the kube-ipvs0 link and its
// addresses, kube-proxy's ipsets (IPv4 and IPv6 names) and iptables
// chains of either family; nil when nothing is. A node switched to
// nftables mode is expected to keep some (see CleanupIPVSMode), one
// switched to iptables mode all (kube-proxy cleans nothing of IPVS mode's
// up as it starts there): a leftover is a finding to report. now is the
// mode the node runs in: a chain iptables mode writes under the same name
// (KUBE-SERVICES, KUBE-MARK-MASQ, ...) is its own there, not a leftover.
func IPVSModeLeftovers(dp dataplane.Dataplane, now Mode) ([]string, error) {
	var out []string
	svcs, err := dp.IPVS.Services()
	if err != nil {
		return nil, err
	}
	if len(svcs) > 0 {
		out = append(out, fmt.Sprintf("%d IPVS virtual servers", len(svcs)))
	}
	for _, f := range []dataplane.Family{dataplane.IPv4, dataplane.IPv6} {
		addrs, err := dp.Links.Addresses(dataplane.DummyLink, f)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			continue
		case err != nil:
			return nil, err
		}
		out = append(out, fmt.Sprintf("link %s with %d %s addresses", dataplane.DummyLink, len(addrs), f))
	}
	sets, err := dp.IPSet.Sets()
	if err != nil {
		return nil, err
	}
	var names []string
	for _, f := range []dataplane.Family{dataplane.IPv4, dataplane.IPv6} {
		for _, s := range sets {
			if slices.Contains(SetNames(f), s.Name) && !slices.Contains(names, s.Name) {
				names = append(names, s.Name)
			}
		}
	}
	if len(names) > 0 {
		out = append(out, fmt.Sprintf("%d ipsets (%s)", len(names), strings.Join(names, ", ")))
	}
	for _, f := range []dataplane.Family{dataplane.IPv4, dataplane.IPv6} {
		var chains []string
		for _, t := range ipvsModeChains {
			saved, err := dp.IPTables.Save(f, t.name)
			if err != nil {
				return nil, err
			}
			for _, l := range strings.Split(string(saved), "\n") {
				name, _, _ := strings.Cut(strings.TrimPrefix(l, ":"), " ")
				if strings.HasPrefix(l, ":") && slices.Contains(t.chains, name) && !(now == ModeIPTables && iptablesModeChain(t.name, name)) {
					chains = append(chains, t.name+"/"+name)
				}
			}
		}
		if len(chains) > 0 {
			out = append(out, fmt.Sprintf("%d %s iptables chains (%s)", len(chains), f, strings.Join(chains, ", ")))
		}
	}
	return out, nil
}
