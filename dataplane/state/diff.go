package state

import (
	"fmt"
	"slices"
	"strings"

	"github.com/kpsim/kpsim/dataplane"
)

// Difference is one difference between two dumps, A and B.
type Difference struct {
	// Kind: virtual-server, destination, ipset, ipset-entry, address, chain,
	// rule, family, nft-chain, nft-rule, nft-set, nft-element.
	Kind string `json:"kind"`
	// Object names what differs: "10.96.0.10:53/UDP", "KUBE-CLUSTER-IP",
	// "IPv4 nat KUBE-SERVICES".
	Object string `json:"object"`
	Change string `json:"change"` // "only in A", "only in B", "differs"
	Detail string `json:"detail,omitempty"`
}

func (d Difference) String() string {
	s := fmt.Sprintf("%s %s: %s", d.Kind, d.Object, d.Change)
	if d.Detail != "" {
		s += ": " + d.Detail
	}
	return s
}

const (
	onlyA   = "only in A"
	onlyB   = "only in B"
	differs = "differs"
)

// Diff lists how B differs from A, grouped as a reader looks for it:
// virtual servers (and within one, scheduler, flags, timeout, each
// destination), ipsets and their entries, kube-ipvs0 addresses, then iptables
// chains and rules per family and table, then each family's nftables table:
// chains, rules, sets and maps, elements. Empty means equal.
func Diff(a, b *State) []Difference {
	var out []Difference
	add := func(kind, object, change, detail string) {
		out = append(out, Difference{Kind: kind, Object: object, Change: change, Detail: detail})
	}

	fa, fb := familyNames(a.Families), familyNames(b.Families)
	for _, x := range minus(fa, fb) {
		add("family", x, onlyA, "")
	}
	for _, x := range minus(fb, fa) {
		add("family", x, onlyB, "")
	}

	va, vb := byKey(a.VirtualServers, VirtualServer.Key), byKey(b.VirtualServers, VirtualServer.Key)
	for _, k := range unionKeys(va, vb) {
		x, inA := va[k]
		y, inB := vb[k]
		switch {
		case !inB:
			add("virtual-server", k, onlyA, vsSummary(x))
		case !inA:
			add("virtual-server", k, onlyB, vsSummary(y))
		default:
			if x.Scheduler != y.Scheduler {
				add("virtual-server", k, differs, fmt.Sprintf("scheduler %s in A, %s in B", x.Scheduler, y.Scheduler))
			}
			if !slices.Equal(x.Flags, y.Flags) {
				add("virtual-server", k, differs, fmt.Sprintf("flags [%s] in A, [%s] in B", strings.Join(x.Flags, ","), strings.Join(y.Flags, ",")))
			}
			if x.Timeout != y.Timeout {
				add("virtual-server", k, differs, fmt.Sprintf("timeout %d in A, %d in B", x.Timeout, y.Timeout))
			}
			da, db := byKey(x.Destinations, Dest.key), byKey(y.Destinations, Dest.key)
			for _, dk := range unionKeys(da, db) {
				p, inA := da[dk]
				q, inB := db[dk]
				obj := k + " -> " + dk
				switch {
				case !inB:
					add("destination", obj, onlyA, fmt.Sprintf("weight %d", p.Weight))
				case !inA:
					add("destination", obj, onlyB, fmt.Sprintf("weight %d", q.Weight))
				case p.Weight != q.Weight:
					add("destination", obj, differs, fmt.Sprintf("weight %d in A, %d in B", p.Weight, q.Weight))
				}
			}
		}
	}

	sa, sb := byKey(a.IPSets, func(s IPSet) string { return s.Name }), byKey(b.IPSets, func(s IPSet) string { return s.Name })
	for _, k := range unionKeys(sa, sb) {
		x, inA := sa[k]
		y, inB := sb[k]
		switch {
		case !inB:
			add("ipset", k, onlyA, fmt.Sprintf("%s, %d entries", x.Type, len(x.Entries)))
			continue
		case !inA:
			add("ipset", k, onlyB, fmt.Sprintf("%s, %d entries", y.Type, len(y.Entries)))
			continue
		case x.Type != y.Type:
			add("ipset", k, differs, fmt.Sprintf("type %s in A, %s in B", x.Type, y.Type))
		}
		for _, e := range minus(x.Entries, y.Entries) {
			add("ipset-entry", k+" "+e, onlyA, "")
		}
		for _, e := range minus(y.Entries, x.Entries) {
			add("ipset-entry", k+" "+e, onlyB, "")
		}
	}

	for _, x := range minus(a.Addresses, b.Addresses) {
		add("address", dataplane.DummyLink+" "+x, onlyA, "")
	}
	for _, x := range minus(b.Addresses, a.Addresses) {
		add("address", dataplane.DummyLink+" "+x, onlyB, "")
	}

	for _, f := range unionStrings(fa, fb) {
		ta, tb := a.IPTables[dataplane.Family(f)], b.IPTables[dataplane.Family(f)]
		for _, table := range Tables {
			out = append(out, diffTable(f+" "+table, *ta.table(table), *tb.table(table))...)
		}
	}
	for _, f := range unionStrings(fa, fb) {
		out = append(out, diffNFTable(f+" nftables "+dataplane.NFTablesTable, a.NFTables[dataplane.Family(f)], b.NFTables[dataplane.Family(f)])...)
	}
	return out
}

// AffinitySetPrefix begins the name of each of kube-proxy's ClientIP
// affinity sets in nftables mode, one per endpoint: their elements are not
// the proxier's but traffic's (the update statement of the endpoint's
// chain), the addresses of clients that connected within the timeout.
const AffinitySetPrefix = "affinity-"

// diffNFTable compares two families' nftables tables: chains and rules as
// diffTable does, then sets and maps and their elements.
func diffNFTable(object string, a, b NFTable) []Difference {
	var out []Difference
	for _, d := range diffTable(object, a.Rules, b.Rules) {
		d.Kind = "nft-" + d.Kind
		out = append(out, d)
	}
	key := func(s NFTSet) string { return s.Kind + " " + s.Name }
	sa, sb := byKey(a.Sets, key), byKey(b.Sets, key)
	for _, k := range unionKeys(sa, sb) {
		x, inA := sa[k]
		y, inB := sb[k]
		switch {
		case !inB:
			out = append(out, Difference{Kind: "nft-set", Object: object + " " + k, Change: onlyA, Detail: fmt.Sprintf("%d elements", len(x.Elements))})
		case !inA:
			out = append(out, Difference{Kind: "nft-set", Object: object + " " + k, Change: onlyB, Detail: fmt.Sprintf("%d elements", len(y.Elements))})
		case affinityService(x.Name) != "":
			// compared per service, below
		default:
			for _, e := range minus(x.Elements, y.Elements) {
				out = append(out, Difference{Kind: "nft-element", Object: object + " " + k, Change: onlyA, Detail: e})
			}
			for _, e := range minus(y.Elements, x.Elements) {
				out = append(out, Difference{Kind: "nft-element", Object: object + " " + k, Change: onlyB, Detail: e})
			}
		}
	}
	// Which endpoint a client's first connection went to is the kernel's
	// random choice (numgen), so the clients traffic wrote to affinity sets
	// are compared per service: a client is in one of the service's sets on
	// both sides, whichever endpoint's.
	ca, cb := affinityClients(a.Sets), affinityClients(b.Sets)
	for _, svc := range unionKeys(ca, cb) {
		what := object + " affinity sets of " + svc
		const note = " (written by traffic: a client within the ClientIP affinity timeout)"
		for _, e := range minus(ca[svc], cb[svc]) {
			out = append(out, Difference{Kind: "nft-affinity", Object: what, Change: onlyA, Detail: e + note})
		}
		for _, e := range minus(cb[svc], ca[svc]) {
			out = append(out, Difference{Kind: "nft-affinity", Object: what, Change: onlyB, Detail: e + note})
		}
	}
	return out
}

// affinityService is the service port an affinity set is of
// ("affinity-HASH-ns/name/proto/port__endpoint": "ns/name/proto/port"), or
// "" for any other set.
func affinityService(set string) string {
	rest, ok := strings.CutPrefix(set, AffinitySetPrefix)
	if !ok {
		return ""
	}
	_, rest, _ = strings.Cut(rest, "-")
	svc, _, _ := strings.Cut(rest, "__")
	return svc
}

// affinityClients are the clients in each service's affinity sets, sorted.
func affinityClients(sets []NFTSet) map[string][]string {
	out := map[string][]string{}
	for _, s := range sets {
		if svc := affinityService(s.Name); svc != "" {
			out[svc] = append(out[svc], s.Elements...)
		}
	}
	for svc, cs := range out {
		slices.Sort(cs)
		out[svc] = slices.Compact(cs)
	}
	return out
}

// diffTable compares two normalised tables chain by chain. Within a chain,
// rules present on one side only are listed; if both sides hold the same
// rules in another order, that is one difference (order decides which rule matches).
func diffTable(object string, a, b []string) []Difference {
	var out []Difference
	ca, ra := splitTable(a)
	cb, rb := splitTable(b)
	for _, x := range minus(ca, cb) {
		out = append(out, Difference{Kind: "chain", Object: object + " " + x, Change: onlyA})
	}
	for _, x := range minus(cb, ca) {
		out = append(out, Difference{Kind: "chain", Object: object + " " + x, Change: onlyB})
	}
	for _, chain := range unionKeys(ra, rb) {
		x, y := ra[chain], rb[chain]
		if slices.Equal(x, y) {
			continue
		}
		obj := object + " " + chain
		extraA, extraB := minus(x, y), minus(y, x)
		for _, r := range extraA {
			out = append(out, Difference{Kind: "rule", Object: obj, Change: onlyA, Detail: r})
		}
		for _, r := range extraB {
			out = append(out, Difference{Kind: "rule", Object: obj, Change: onlyB, Detail: r})
		}
		if len(extraA) == 0 && len(extraB) == 0 {
			out = append(out, Difference{Kind: "rule", Object: obj, Change: differs,
				Detail: fmt.Sprintf("same %d rules in another order", len(x))})
		}
	}
	return out
}

// splitTable separates chain declarations (":NAME POLICY") from rules by chain.
func splitTable(lines []string) ([]string, map[string][]string) {
	var decls []string
	rules := map[string][]string{}
	for _, l := range lines {
		if strings.HasPrefix(l, ":") {
			decls = append(decls, l[1:])
			continue
		}
		f := strings.SplitN(l, " ", 3)
		if len(f) >= 2 {
			rules[f[1]] = append(rules[f[1]], l)
		}
	}
	return decls, rules
}

func (d Dest) key() string { return formatAddrPort(d.Address, d.Port) }

func formatAddrPort(a string, p uint16) string {
	if strings.Contains(a, ":") {
		return fmt.Sprintf("[%s]:%d", a, p)
	}
	return fmt.Sprintf("%s:%d", a, p)
}

func vsSummary(v VirtualServer) string {
	s := fmt.Sprintf("%s, %d destinations", v.Scheduler, len(v.Destinations))
	if len(v.Flags) > 0 {
		s += fmt.Sprintf(", flags [%s], timeout %d", strings.Join(v.Flags, ","), v.Timeout)
	}
	return s
}

func familyNames(fs []dataplane.Family) []string {
	out := make([]string, len(fs))
	for i, f := range fs {
		out[i] = string(f)
	}
	return out
}

func byKey[T any](xs []T, key func(T) string) map[string]T {
	m := make(map[string]T, len(xs))
	for _, x := range xs {
		m[key(x)] = x
	}
	return m
}

func unionKeys[T any](a, b map[string]T) []string {
	keys := make([]string, 0, len(a)+len(b))
	for k := range a {
		keys = append(keys, k)
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys
}

func unionStrings(a, b []string) []string {
	out := append(slices.Clone(a), minus(b, a)...)
	slices.Sort(out)
	return out
}

// minus returns the elements of a not in b, counting duplicates (a rule
// written twice on one side and once on the other is a difference), in a's order.
func minus(a, b []string) []string {
	count := make(map[string]int, len(b))
	for _, x := range b {
		count[x]++
	}
	var out []string
	for _, x := range a {
		if count[x] > 0 {
			count[x]--
			continue
		}
		out = append(out, x)
	}
	return out
}
