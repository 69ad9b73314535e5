package proxier

import (
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"

	"github.com/kpsim/kpsim/dataplane"
)

// CleanupIPVSMode removes what IPVS mode programmed, as kube-proxy does when
// it starts in another mode (v1.37: cmd/kube-proxy's platformCleanup calls
// pkg/proxy/ipvs's CleanupLeftovers when the mode is not iptables-based),
// in its order: every IPVS virtual server (a flush), the kube-ipvs0 link
// with the addresses bound to it, in each family the jump rules from the
// built-in chains into its chains and then its chains (flushed, then
// deleted), and last its ipsets, by their IPv4 names only: kube-proxy
// destroys the sets of its IPVS proxier's list, which names them as an IPv4
// proxier does, so a dual-stack node keeps its KUBE-6-* sets. What IPVS
// mode set and no cleanup undoes (its sysctls) stays. Best effort, as
// kube-proxy's: every step runs, and what failed is returned.
func CleanupIPVSMode(dp dataplane.Dataplane) error {
	var errs []error
	keep := func(err error) {
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	svcs, err := dp.IPVS.Services()
	keep(err)
	for _, s := range svcs {
		keep(dp.IPVS.DeleteService(s.ServiceKey))
	}
	keep(dp.Links.DeleteLink(dataplane.DummyLink))
	for _, f := range []dataplane.Family{dataplane.IPv4, dataplane.IPv6} {
		keep(cleanupIPTables(dp.IPTables, f))
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

// cleanupIPTables is one family's part of CleanupIPVSMode: one restore per
// table that deletes the jumps into IPVS mode's chains, flushes them all,
// then deletes them all (a chain another of them jumps to can only go once
// it is flushed).
func cleanupIPTables(ipt dataplane.IPTables, f dataplane.Family) error {
	var errs []error
	for _, t := range ipvsModeChains {
		saved, err := ipt.Save(f, t.name)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		lines := strings.Split(string(saved), "\n")
		var del, flush, remove []string
		for _, j := range jumpRules {
			if j.table == t.name && slices.Contains(lines, "-A "+j.from+" "+j.args()) {
				del = append(del, "-D "+j.from+" "+j.args())
			}
		}
		for _, c := range t.chains {
			if slices.ContainsFunc(lines, func(l string) bool { return strings.HasPrefix(l, ":"+c+" ") }) {
				flush = append(flush, "-F "+c)
				remove = append(remove, "-X "+c)
			}
		}
		if len(del)+len(flush) == 0 {
			continue
		}
		payload := "*" + t.name + "\n" + strings.Join(slices.Concat(del, flush, remove), "\n") + "\nCOMMIT\n"
		if err := ipt.Restore(f, []byte(payload)); err != nil {
			errs = append(errs, fmt.Errorf("remove IPVS mode's %s chains (%s): %w", t.name, f, err))
		}
	}
	return errors.Join(errs...)
}

// IPVSModeLeftovers lists what IPVS mode programmed that is still on the
// node, one line per kind: virtual servers, the kube-ipvs0 link and its
// addresses, kube-proxy's ipsets (IPv4 and IPv6 names) and iptables
// chains of either family; nil when nothing is. A node switched to
// nftables mode is expected to keep some (see CleanupIPVSMode): a
// leftover is a finding to report.
func IPVSModeLeftovers(dp dataplane.Dataplane) ([]string, error) {
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
				if strings.HasPrefix(l, ":") && slices.Contains(t.chains, name) {
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
