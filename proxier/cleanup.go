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
// Each iptables command is an iptables process, which reads its table and
// writes it back when the command changes it: a Save, and a Restore when it
// does (a command that finds nothing to do fails, and is not an error here,
// as kube-proxy ignores "not found").
func CleanupIPVSMode(dp dataplane.Dataplane) error {
	var errs []error
	keep := func(err error) {
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	families := []dataplane.Family{dataplane.IPv4, dataplane.IPv6}
	for _, f := range families {
		cleanupIPTablesMode(iptCommands{dp.IPTables, f}, keep)
	}
	svcs, err := dp.IPVS.Services()
	keep(err)
	for _, s := range svcs {
		keep(dp.IPVS.DeleteService(s.ServiceKey))
	}
	keep(dp.Links.DeleteLink(dataplane.DummyLink))
	for _, f := range families {
		ipt := iptCommands{dp.IPTables, f}
		for _, j := range jumpRules {
			keep(ipt.deleteRule(j.table, j.from, j.args()))
		}
		for _, t := range ipvsModeChains {
			for _, c := range t.chains {
				keep(ipt.change(t.name, c, "-F "+c))
			}
		}
		for _, t := range ipvsModeChains {
			for _, c := range t.chains {
				keep(ipt.change(t.name, c, "-X "+c))
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
func cleanupIPTablesMode(ipt iptCommands, keep func(error)) {
	for _, j := range iptablesModeJumps {
		keep(ipt.deleteRule(j.table, j.from, j.rule))
	}
	for _, t := range iptablesModeChains {
		tb, err := ipt.table(t.name)
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
		if err := ipt.ipt.Restore(ipt.f, []byte(payload)); err != nil {
			keep(fmt.Errorf("remove iptables mode's %s chains (%s): %w", t.name, ipt.f, err))
		}
	}
	keep(ipt.change("mangle", "KUBE-PROXY-CANARY", "-X KUBE-PROXY-CANARY"))
}

// iptCommands are one family's iptables commands, as processes: each reads
// its table (Save) and writes it back (Restore) when it changes it. One
// that finds nothing to do returns fs.ErrNotExist.
type iptCommands struct {
	ipt dataplane.IPTables
	f   dataplane.Family
}

func (c iptCommands) table(name string) (*dataplane.Table, error) {
	return dataplane.ReadTable(c.ipt, c.f, name)
}

func (c iptCommands) write(table, command string) error {
	return c.ipt.Restore(c.f, []byte("*"+table+"\n"+command+"\nCOMMIT\n"))
}

// deleteRule is `iptables -D from rule`.
func (c iptCommands) deleteRule(table, from, rule string) error {
	tb, err := c.table(table)
	if err != nil {
		return err
	}
	canonical, err := dataplane.CanonicalRuleText(c.f, rule)
	if err != nil {
		return err
	}
	if !slices.Contains(tb.Rules[from], canonical) {
		return fs.ErrNotExist
	}
	return c.write(table, "-D "+from+" "+canonical)
}

// change is `iptables -F chain` or `-X chain` (command): it fails when the
// chain does not exist.
func (c iptCommands) change(table, chain, command string) error {
	tb, err := c.table(table)
	if err != nil {
		return err
	}
	if _, ok := tb.Chains[chain]; !ok {
		return fs.ErrNotExist
	}
	return c.write(table, command)
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
