package sim

import (
	"cmp"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"sigs.k8s.io/knftables"

	"github.com/kpsim/kpsim/dataplane"
)

// nftPath is what the model asks of kube-proxy's nftables table for one new
// connection.
type nftPath struct {
	src, dst netip.AddrPort
	proto    dataplane.Protocol
	// fromNode: sent by a host-network process (output hooks) rather than
	// arriving from a pod (prerouting, then forward or input).
	fromNode bool
	// local says whether an address is one of the node's own, for
	// `fib daddr type local` and for choosing input over forward.
	local func(netip.Addr) bool
	// pick chooses 0..n-1 for `numgen random mod n`.
	pick func(n int) int
	// now is the connection's instant: an element traffic wrote to a set
	// with a timeout lives until its timeout has passed since.
	now time.Time
}

// nftVerdict is what the table does with the connection.
type nftVerdict struct {
	// outcome is "" when no rule decided anything (the packet goes on as if
	// the table did not exist), ProbeRejected when a rule dropped or
	// rejected it, "dnat" when a rule rewrote its destination.
	outcome string
	to      netip.AddrPort // the DNAT destination
	masq    bool           // a rule marked the packet for masquerade
	// updates are what the packet wrote to sets on its way (`update @SET
	// { ip saddr }`, ClientIP affinity's): each set's name and key.
	updates []nftUpdate
}

// nftUpdate is one element a packet writes to a set.
type nftUpdate struct {
	set string
	key []string
}

// nftEvaluate walks the table t for the connection p, as the kernel would for
// its first packet. It is a model, like the iptables walk in probe.go:
// whatever the rules say wins and no chain, set or map name is special.
//
// The base chains of each hook the packet passes run in priority order,
// lowest first. From a pod: prerouting, then input if the (possibly DNATed)
// destination is the node's own, else forward and postrouting. From the node:
// output and postrouting, then input if the destination is still the node's
// own (loopback delivery; the prerouting filter chains loopback also passes
// are left out: kube-proxy's only one, the firewall check, already ran in
// output on the same destination).
//
// Rules are read as nft reads them, left to right. Matches: a field or a
// concatenation of fields (ip/ip6 saddr/daddr, meta l4proto, th dport,
// tcp/udp/sctp dport, numgen random mod N, fib saddr/daddr type, ct state)
// compared, optionally with !=, to a value, a comma list, an anonymous
// { set }, or a named set or map (@NAME), whose elements may be CIDRs.
// Statements: counter, `mark set mark or X` (recorded as masq), `update
// @SET { FIELD }` (recorded in updates, for the table to apply: ClientIP
// affinity's), dnat to ADDR[:PORT], dnat ip addr . port to EXPR map { ... },
// and the verdicts accept, drop, reject, return, jump, goto, also through
// vmap @NAME or an inline vmap { ... }. The connection is new, so `ct
// state` is "new". A rule with anything else (iifname, mark matches, ct
// status, masquerade, ...) is skipped whole: none of those decides where
// kube-proxy sends a new connection. A rule's statements take effect only
// if all its matches hold. An element of a set with a timeout that traffic
// wrote is there until its time has passed (the cache's live).
//
// cache, when the table keeps one (nftState), finds base chains and
// elements without walking them all; nil walks.
func nftEvaluate(table *knftables.FakeTable, cache nftCache, p nftPath) nftVerdict {
	if table == nil {
		return nftVerdict{}
	}
	e := &nftEval{t: table, p: p, dst: p.dst}
	if cache != nil {
		e.bases, e.index, e.live = cache.baseChains, cache.index, cache.live
	} else {
		e.bases = func(h knftables.BaseChainHook) []*knftables.FakeChain { return baseChains(table, h) }
	}
	if p.fromNode {
		if e.hook(knftables.OutputHook) && e.hook(knftables.PostroutingHook) && p.local(e.dst.Addr()) {
			e.hook(knftables.InputHook)
		}
		return e.v
	}
	if !e.hook(knftables.PreroutingHook) {
		return e.v
	}
	if p.local(e.dst.Addr()) {
		e.hook(knftables.InputHook)
	} else if e.hook(knftables.ForwardHook) {
		e.hook(knftables.PostroutingHook)
	}
	return e.v
}

// baseChains are t's base chains on hook, lowest priority first: the
// order the kernel runs them in.
func baseChains(t *knftables.FakeTable, hook knftables.BaseChainHook) []*knftables.FakeChain {
	type ranked struct {
		c    *knftables.FakeChain
		prio int
	}
	var chains []ranked
	for _, c := range t.Chains {
		if c.Hook == nil || *c.Hook != hook || c.Priority == nil {
			continue
		}
		// nft accepts spaces around the sign ("dstnat - 10"), ParsePriority does not.
		prio, err := knftables.ParsePriority(t.Family, strings.ReplaceAll(string(*c.Priority), " ", ""))
		if err != nil {
			continue // nft would refuse the chain
		}
		chains = append(chains, ranked{c, prio})
	}
	// Equal priorities run in an order the kernel does not promise; by name is stable.
	slices.SortFunc(chains, func(a, b ranked) int {
		return cmp.Or(cmp.Compare(a.prio, b.prio), strings.Compare(a.c.Name, b.c.Name))
	})
	out := make([]*knftables.FakeChain, len(chains))
	for i, r := range chains {
		out[i] = r.c
	}
	return out
}

// nftMaxDepth bounds nested jumps and gotos. The kernel's jump stack holds 16
// chains and nft refuses deeper or looping rulesets, which a Fake accepts.
const nftMaxDepth = 16

// nftAction is what a rule or a chain tells its caller.
type nftAction int

const (
	nftNext   nftAction = iota // the rule decided nothing: go on with the next rule
	nftReturn                  // the chain ends: back to the rule that jumped here
	nftAccept                  // this base chain is done with the packet (accept, or a DNAT)
	nftDrop                    // the packet is dropped or rejected
)

// nftCache is what a table keeps to be walked quickly.
type nftCache interface {
	baseChains(knftables.BaseChainHook) []*knftables.FakeChain // in the order they run
	index(set string) map[string]int                           // a set's or map's elements by key
	// live reports whether a set's element is there at now: not one
	// traffic wrote whose timeout has passed.
	live(set string, key string, now time.Time) bool
}

type nftEval struct {
	t     *knftables.FakeTable
	bases func(knftables.BaseChainHook) []*knftables.FakeChain
	index func(set string) map[string]int // nil: scan
	live  func(set, key string, now time.Time) bool
	p     nftPath
	dst   netip.AddrPort // the destination, rewritten by a DNAT
	v     nftVerdict
}

// hook runs the base chains on hook; false when one dropped the packet.
func (e *nftEval) hook(hook knftables.BaseChainHook) bool {
	for _, c := range e.bases(hook) {
		a := e.walk(c, 0)
		if a == nftReturn && c.Policy != nil && *c.Policy == knftables.DropPolicy {
			a = nftDrop
		}
		if a == nftDrop {
			e.v.outcome = ProbeRejected
			return false
		}
	}
	return true
}

// walk runs the rules of c until one decides; falling off the end returns.
func (e *nftEval) walk(c *knftables.FakeChain, depth int) nftAction {
	for _, r := range c.Rules {
		if a := e.rule(r.Rule, depth); a != nftNext {
			return a
		}
	}
	return nftReturn
}

// rule evaluates one rule (see nftEvaluate for what it understands).
func (e *nftEval) rule(text string, depth int) nftAction {
	t := nftTokenize(text)
	masq := false
	for len(t) > 0 {
		if t.eat("counter") {
			if t.eat("name") {
				t.next()
			}
			continue
		}
		if t.eat("mark", "set", "mark", "or") {
			t.next()
			masq = true
			continue
		}
		if t.eat("update") {
			name, ok := strings.CutPrefix(t.next(), "@")
			if !ok || !t.eat("{") {
				return nftNext
			}
			key, ok := e.selector(&t)
			if !ok || key == nil || !t.eat("}") {
				return nftNext
			}
			e.v.updates = append(e.v.updates, nftUpdate{name, key})
			continue
		}
		if t.eat("dnat") {
			to, ok := e.dnatTarget(&t)
			if !ok {
				return nftNext
			}
			e.dst, e.v.to, e.v.outcome = to, to, "dnat"
			e.v.masq = e.v.masq || masq
			return nftAccept
		}
		if a, ok := e.verdict(&t, depth); ok {
			e.v.masq = e.v.masq || masq
			return a
		}
		key, ok := e.selector(&t)
		if !ok {
			return nftNext
		}
		if t.eat("vmap") {
			els, ok := e.elements(&t)
			el := els.find(key)
			if !ok || el == nil {
				return nftNext // a lookup that misses decides nothing
			}
			vt := nftTokenize(strings.Join(el.Value, " "))
			a, ok := e.verdict(&vt, depth)
			if !ok {
				return nftNext
			}
			e.v.masq = e.v.masq || masq
			return a
		}
		neg := t.eat("!=")
		els, ok := e.elements(&t)
		if !ok || key == nil || (els.find(key) != nil) == neg {
			return nftNext
		}
	}
	e.v.masq = e.v.masq || masq
	return nftNext
}

// verdict runs the verdict at the head of t; ok is false if there is none.
// A jump or goto the model cannot follow (a missing chain, too deep) decides
// nothing.
func (e *nftEval) verdict(t *nftTokens, depth int) (a nftAction, ok bool) {
	switch verb := t.peek(); verb {
	case "accept":
		return nftAccept, true
	case "drop", "reject":
		return nftDrop, true
	case "return":
		return nftReturn, true
	case "jump", "goto":
		t.next()
		c := e.t.Chains[t.next()]
		if c == nil || depth >= nftMaxDepth {
			return nftNext, true
		}
		a := e.walk(c, depth+1)
		if verb == "jump" && a == nftReturn {
			return nftNext, true // back from the jump: the next rule runs
		}
		// A goto'd chain that returns ends this chain too.
		return a, true
	}
	return nftNext, false
}

// dnatTarget reads the rest of a dnat statement: `[ip|ip6] to ADDR[:PORT]`,
// or `ip addr . port to EXPR map { KEY : ADDR . PORT , ... }` as kube-proxy
// writes for a service with several endpoints. ok is false when the statement
// is not understood or its map has no element for the packet.
func (e *nftEval) dnatTarget(t *nftTokens) (to netip.AddrPort, ok bool) {
	_ = t.eat("ip") || t.eat("ip6")
	if t.eat("to") {
		s := t.next()
		if ap, err := netip.ParseAddrPort(s); err == nil {
			return ap, true
		}
		a, err := netip.ParseAddr(s) // no port: the port is kept
		return netip.AddrPortFrom(a, e.dst.Port()), err == nil
	}
	if !t.eat("addr", ".", "port", "to") {
		return to, false
	}
	key, ok := e.selector(t)
	if !ok || !t.eat("map") {
		return to, false
	}
	els, ok := e.elements(t)
	el := els.find(key)
	if !ok || el == nil || len(el.Value) != 2 {
		return to, false
	}
	a, err := netip.ParseAddr(el.Value[0])
	port, perr := strconv.ParseUint(el.Value[1], 10, 16)
	if err != nil || perr != nil {
		return to, false
	}
	return netip.AddrPortFrom(a, uint16(port)), true
}

// selector reads a field, or a concatenation of fields joined by ".", and
// returns the packet's value of each, spelled as kube-proxy spells set
// elements. ok is false for a field the model does not know; key is nil when
// the packet has no such field (tcp dport of a UDP packet, ip daddr of an
// IPv6 one), which no comparison matches, not even !=.
func (e *nftEval) selector(t *nftTokens) (key []string, ok bool) {
	present := true
	for {
		v, has, ok := e.field(t)
		if !ok {
			return nil, false
		}
		present = present && has
		key = append(key, v)
		if !t.eat(".") {
			break
		}
	}
	if !present {
		return nil, true
	}
	return key, true
}

func (e *nftEval) field(t *nftTokens) (v string, present, ok bool) {
	proto := strings.ToLower(string(e.p.proto))
	port := strconv.Itoa(int(e.dst.Port()))
	fibType := func(a netip.Addr) string {
		if e.p.local(a) {
			return "local"
		}
		return "unicast"
	}
	for _, l4 := range []string{"tcp", "udp", "sctp"} {
		if t.eat(l4, "dport") {
			return port, proto == l4, true // a protocol's own header field implies the protocol
		}
	}
	switch {
	case t.eat("ip", "saddr"):
		return e.p.src.Addr().String(), e.p.src.Addr().Is4(), true
	case t.eat("ip", "daddr"):
		return e.dst.Addr().String(), e.dst.Addr().Is4(), true
	case t.eat("ip6", "saddr"):
		return e.p.src.Addr().String(), e.p.src.Addr().Is6(), true
	case t.eat("ip6", "daddr"):
		return e.dst.Addr().String(), e.dst.Addr().Is6(), true
	case t.eat("meta", "l4proto"):
		return proto, true, true
	case t.eat("th", "dport"):
		return port, true, true
	case t.eat("numgen", "random", "mod"):
		n, err := strconv.Atoi(t.next())
		if err != nil || n <= 0 {
			return "", false, false
		}
		return strconv.Itoa(e.p.pick(n)), true, true
	case t.eat("fib", "saddr", "type"):
		return fibType(e.p.src.Addr()), true, true
	case t.eat("fib", "daddr", "type"):
		return fibType(e.dst.Addr()), true, true
	case t.eat("ct", "state"):
		return "new", true, true
	}
	return "", false, false
}

// nftElems are what a field is compared with.
type nftElems struct {
	els []*knftables.Element
	// index finds an element of a named set or map by its key, where the
	// table keeps one (nftState); exact says every key is an exact value
	// (no interval flag), so that a key the index lacks is not there.
	index map[string]int
	exact bool
	// live, for a named set, says whether an element is there now.
	live func(key string) bool
}

// find returns the first element whose key holds key, or nil.
func (x nftElems) find(key []string) *knftables.Element {
	el := x.lookup(key)
	if el != nil && x.live != nil && !x.live(strings.Join(el.Key, " . ")) {
		return nil
	}
	return el
}

func (x nftElems) lookup(key []string) *knftables.Element {
	if x.index != nil {
		if i, ok := x.index[strings.Join(key, " . ")]; ok {
			return x.els[i]
		}
		if x.exact {
			return nil
		}
	}
	return nftFind(x.els, key)
}

// elements reads what a field is compared with: a named set or map (@NAME),
// an anonymous { set } or inline map, or a literal value or comma list (as
// in ct state established,related). ok is false for an unknown @NAME.
func (e *nftEval) elements(t *nftTokens) (nftElems, bool) {
	if name, found := strings.CutPrefix(t.peek(), "@"); found {
		t.next()
		var index map[string]int
		if e.index != nil {
			index = e.index(name)
		}
		var live func(string) bool
		if e.live != nil {
			live = func(key string) bool { return e.live(name, key, e.p.now) }
		}
		if s := e.t.Sets[name]; s != nil {
			return nftElems{s.Elements, index, !slices.Contains(s.Flags, knftables.IntervalFlag), live}, true
		}
		if m := e.t.Maps[name]; m != nil {
			return nftElems{m.Elements, index, !slices.Contains(m.Flags, knftables.IntervalFlag), live}, true
		}
		return nftElems{}, false
	}
	var els []*knftables.Element
	braced := t.eat("{")
	for {
		el, ok := t.element()
		if !ok {
			return nftElems{}, false
		}
		els = append(els, el)
		if !t.eat(",") {
			break
		}
	}
	if braced && !t.eat("}") {
		return nftElems{}, false
	}
	return nftElems{els: els}, true
}

// element reads `A . B [: V . W]`, split as the Fake splits an element it
// parses: Key and Value components joined by " . ", a verdict as one string.
func (t *nftTokens) element() (el *knftables.Element, ok bool) {
	el = &knftables.Element{}
	for {
		if len(*t) == 0 {
			return nil, false
		}
		el.Key = append(el.Key, t.next())
		if !t.eat(".") {
			break
		}
	}
	if t.eat(":") {
		var v []string
		for len(*t) > 0 && t.peek() != "," && t.peek() != "}" {
			v = append(v, t.next())
		}
		el.Value = strings.Split(strings.Join(v, " "), " . ")
	}
	return el, true
}

// nftFind returns the first element whose key holds key, or nil.
func nftFind(els []*knftables.Element, key []string) *knftables.Element {
	for _, el := range els {
		if nftKeyMatch(el.Key, key) {
			return el
		}
	}
	return nil
}

func nftKeyMatch(pattern, key []string) bool {
	if len(pattern) != len(key) {
		return false
	}
	for i, p := range pattern {
		if !nftValueMatch(p, key[i]) {
			return false
		}
	}
	return true
}

// nftValueMatch says whether an element component holds the packet's value:
// the same spelling, or a CIDR (an interval set's element) that holds the
// address.
func nftValueMatch(pattern, v string) bool {
	if pattern == v {
		return true
	}
	if !strings.Contains(pattern, "/") {
		return false // spare the parse on the lookups of large maps
	}
	prefix, err := netip.ParsePrefix(pattern)
	if err != nil {
		return false
	}
	a, err := netip.ParseAddr(v)
	return err == nil && prefix.Contains(a)
}

// nftTokens is a rule's text split into words, with the punctuation of sets
// and maps ({ } ,) as words of their own.
type nftTokens []string

func nftTokenize(s string) nftTokens {
	return strings.Fields(nftPunct.Replace(s))
}

var nftPunct = strings.NewReplacer(",", " , ", "{", " { ", "}", " } ")

func (t *nftTokens) peek() string {
	if len(*t) == 0 {
		return ""
	}
	return (*t)[0]
}

func (t *nftTokens) next() string {
	s := t.peek()
	if len(*t) > 0 {
		*t = (*t)[1:]
	}
	return s
}

// eat consumes words if t starts with them.
func (t *nftTokens) eat(words ...string) bool {
	if len(*t) < len(words) || !slices.Equal((*t)[:len(words)], words) {
		return false
	}
	*t = (*t)[len(words):]
	return true
}
