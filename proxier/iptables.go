package proxier

import (
	"bytes"
	"fmt"
	"slices"
	"sort"

	"github.com/kpsim/kpsim/dataplane"
)

func tableChains(table string) []string {
	if table == tableNAT {
		return natChains
	}
	return filterChains
}

// ruleWriter collects one table's rules.
type ruleWriter struct{ b bytes.Buffer }

func (w *ruleWriter) add(chain string, args ...string) {
	w.b.WriteString("-A ")
	w.b.WriteString(chain)
	for _, a := range args {
		w.b.WriteByte(' ')
		w.b.WriteString(a)
	}
	w.b.WriteByte('\n')
}

func quote(s string) string { return `"` + s + `"` }

// iptablesPayload is the iptables-restore input for the family, as
// kube-proxy's writeIptablesRules lays it out: nat chains and rules, then
// filter chains and rules. The rules do not grow with services, except one
// KUBE-IPVS-OUT-FILTER rule per load balancer IP and service port whose
// source ranges keep the node out. Rules that match a set are written only when the set is
// non-empty, except the KUBE-IPVS-FILTER and health-check rules.
func (p *Proxier) iptablesPayload(jumps bool) []byte {
	name := func(id setID) string { return SetName(setInfos[id].name, p.family) }
	comment := func(id setID) string { return quote(setInfos[id].comment) }
	empty := func(id setID) bool { return len(p.entryRef[id]) == 0 }
	var nat, filter ruleWriter

	lo := "127.0.0.0/8"
	if p.family == dataplane.IPv6 {
		lo = "::1/128"
	}
	nat.add(chainServices, "-s", lo, "-j", "RETURN")

	// Sets with a plain match-and-jump rule, in kube-proxy's order (the
	// -LOCAL node port sets must come before their non-local twins).
	type setRule struct {
		id               setID
		filter           bool
		from, to, match  string
		protocolMatching string
	}
	for _, r := range []setRule{
		{setLoopBack, false, chainPostrouting, "MASQUERADE", "dst,dst,src", ""},
		{setLoadBalancer, false, chainServices, chainLoadBalancer, "dst,dst", ""},
		{setLoadBalancerLocal, false, chainLoadBalancer, "RETURN", "dst,dst", ""},
		{setNodePortLocalTCP, false, chainNodePort, "RETURN", "dst", "tcp"},
		{setNodePortTCP, false, chainNodePort, chainMarkMasq, "dst", "tcp"},
		{setNodePortLocalUDP, false, chainNodePort, "RETURN", "dst", "udp"},
		{setNodePortUDP, false, chainNodePort, chainMarkMasq, "dst", "udp"},
		{setNodePortLocalSCTP, false, chainNodePort, "RETURN", "dst,dst", "sctp"},
		{setNodePortSCTP, false, chainNodePort, chainMarkMasq, "dst,dst", "sctp"},
		{setLoadBalancerFW, true, chainProxyFirewall, chainSourceRangesFW, "dst,dst", ""},
		{setLoadBalancerSourceCIDR, true, chainSourceRangesFW, "RETURN", "dst,dst,src", ""},
		{setLoadBalancerSourceIP, true, chainSourceRangesFW, "RETURN", "dst,dst,src", ""},
	} {
		if empty(r.id) {
			continue
		}
		var args []string
		if r.protocolMatching != "" {
			args = append(args, "-p", r.protocolMatching)
		}
		args = append(args, "-m", "comment", "--comment", comment(r.id), "-m", "set", "--match-set", name(r.id), r.match, "-j", r.to)
		if r.filter {
			filter.add(r.from, args...)
		} else {
			nat.add(r.from, args...)
		}
	}

	if !empty(setClusterIP) {
		args := []string{"-m", "comment", "--comment", comment(setClusterIP), "-m", "set", "--match-set", name(setClusterIP)}
		switch {
		case p.cfg.MasqueradeAll:
			args = append(args, "dst,dst")
		case p.clusterCIDR.IsValid():
			args = append(args, "dst,dst", "!", "-s", p.clusterCIDR.String())
		default:
			args = append(args, "src,dst")
		}
		nat.add(chainServices, append(args, "-j", chainMarkMasq)...)
	}

	externalIPRules := func(args []string) {
		nat.add(chainServices, append(args, "-m", "physdev", "!", "--physdev-is-in", "-m", "addrtype", "!", "--src-type", "LOCAL", "-j", "ACCEPT")...)
		nat.add(chainServices, append(args, "-m", "addrtype", "--dst-type", "LOCAL", "-j", "ACCEPT")...)
	}
	if !empty(setExternalIP) {
		args := []string{"-m", "comment", "--comment", comment(setExternalIP), "-m", "set", "--match-set", name(setExternalIP), "dst,dst"}
		nat.add(chainServices, append(args, "-j", chainMarkMasq)...)
		externalIPRules(args)
	}
	if !empty(setExternalIPLocal) {
		externalIPRules([]string{"-m", "comment", "--comment", comment(setExternalIPLocal), "-m", "set", "--match-set", name(setExternalIPLocal), "dst,dst"})
	}

	nat.add(chainServices, "-m", "addrtype", "--dst-type", "LOCAL", "-j", chainNodePort)
	nat.add(chainLoadBalancer, "-j", chainMarkMasq)
	filter.add(chainSourceRangesFW, "-j", "DROP")

	out := make([]string, 0, len(p.outFilter))
	for r := range p.outFilter {
		out = append(out, r)
	}
	sort.Strings(out)
	for _, r := range out {
		// Once per load balancer IP entry that asks for it, as kube-proxy
		// writes them: two service ports sharing an IP and port write it twice.
		for range p.outFilter[r] {
			filter.add(chainIPVSOutFilter, r)
		}
	}

	// Accept traffic to virtual servers in case other rules would drop it.
	for _, id := range []setID{setClusterIP, setLoadBalancer} {
		if !empty(id) {
			nat.add(chainServices, "-m", "set", "--match-set", name(id), "dst,dst", "-j", "ACCEPT")
		}
	}

	mark := masqMark + "/" + masqMark
	filter.add(chainForward, "-m", "comment", "--comment", quote(commentForwarding), "-m", "mark", "--mark", mark, "-j", "ACCEPT")
	filter.add(chainForward, "-m", "comment", "--comment", quote("kubernetes forwarding conntrack rule"),
		"-m", "conntrack", "--ctstate", "RELATED,ESTABLISHED", "-j", "ACCEPT")
	filter.add(chainNodePort, "-m", "comment", "--comment", comment(setHealthCheckNodePort),
		"-m", "set", "--match-set", name(setHealthCheckNodePort), "dst", "-j", "ACCEPT")
	for _, id := range []setID{setLoadBalancer, setClusterIP, setExternalIP, setExternalIPLocal} {
		filter.add(chainIPVSFilter, "-m", "set", "--match-set", name(id), "dst,dst", "-j", "RETURN")
	}
	filter.add(chainIPVSFilter, "-m", "set", "--match-set", name(setHealthCheckNodePort), "dst", "-j", "RETURN")
	filter.add(chainIPVSFilter, "-m", "conntrack", "--ctstate", "NEW", "-m", "set", "--match-set", name(setIPVSIPs), "dst", "-j", "REJECT")

	nat.add(chainPostrouting, "-m", "mark", "!", "--mark", mark, "-j", "RETURN")
	nat.add(chainPostrouting, "-j", "MARK", "--xor-mark", masqMark)
	nat.add(chainPostrouting, "-m", "comment", "--comment", quote("kubernetes service traffic requiring SNAT"), "-j", "MASQUERADE", "--random-fully")
	nat.add(chainMarkMasq, "-j", "MARK", "--or-mark", masqMark)

	var b bytes.Buffer
	for _, t := range []struct {
		name  string
		rules *ruleWriter
	}{{tableNAT, &nat}, {tableFilter, &filter}} {
		b.WriteString("*" + t.name + "\n")
		for _, c := range tableChains(t.name) {
			b.WriteString(":" + c + " - [0:0]\n")
		}
		for _, j := range jumpRules {
			if jumps && j.table == t.name {
				b.WriteString("-I " + j.from + " " + j.args() + "\n")
			}
		}
		b.Write(t.rules.b.Bytes())
		b.WriteString("COMMIT\n")
	}
	return b.Bytes()
}

// readSaved reads one table of iptables-save output: the rules of each of
// our chains the kernel has (keyed "table/chain", in the canonical form
// dataplane.ParseSave gives them, as kernel and payload compare in it) into
// saved, and whether every jump into our chains is in place.
func (p *Proxier) readSaved(out []byte, table string, saved map[string][]string) (jumpsOK bool, err error) {
	tables, err := dataplane.ParseSave(p.family, out)
	if err != nil {
		return false, err
	}
	t := tables[table]
	if t == nil {
		return false, nil
	}
	for _, c := range tableChains(table) {
		if _, ok := t.Chains[c]; ok {
			saved[table+"/"+c] = t.Rules[c]
		}
	}
	jumpsOK = true
	for _, j := range jumpRules {
		if j.table != table {
			continue
		}
		want, err := dataplane.CanonicalRuleText(p.family, j.args())
		if err != nil {
			return false, err
		}
		if !slices.Contains(t.Rules[j.from], want) {
			jumpsOK = false
		}
	}
	return jumpsOK, nil
}

// matchesSaved reports whether the kernel's copy of our chains equals the
// payload's, rule by rule in canonical form: a rule the proxier writes as
// "--or-mark 0x00004000" is the kernel's "--set-xmark 0x4000/0x4000".
func (p *Proxier) matchesSaved(payload []byte, saved map[string][]string) (bool, error) {
	want, err := dataplane.ParseSave(p.family, payload)
	if err != nil {
		return false, fmt.Errorf("the proxier's own payload: %w", err)
	}
	for _, table := range []string{tableNAT, tableFilter} {
		for _, c := range tableChains(table) {
			have, ok := saved[table+"/"+c]
			if !ok || !slices.Equal(have, want[table].Rules[c]) {
				return false, nil
			}
		}
	}
	return true, nil
}
