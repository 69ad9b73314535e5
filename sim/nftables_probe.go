package sim

import (
	"cmp"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

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
	e := &nftEval{t: table, cache: cache, p: p, proto: strings.ToLower(string(p.proto)), src: p.src.Addr().String()}
	e.to(p.dst)
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
	live(set string, key []string, now time.Time) bool
}

type nftEval struct {
	t     *knftables.FakeTable
	cache nftCache // nil: walk and scan
	p     nftPath
	dst   netip.AddrPort // the destination, rewritten by a DNAT
	v     nftVerdict
	// The packet's fields as set elements spell them, spelled once per
	// walk rather than at every rule that reads them.
	proto, src, daddr, dport string
}

// to sets the packet's destination.
func (e *nftEval) to(dst netip.AddrPort) {
	e.dst, e.daddr, e.dport = dst, dst.Addr().String(), strconv.Itoa(int(dst.Port()))
}

func (e *nftEval) bases(hook knftables.BaseChainHook) []*knftables.FakeChain {
	if e.cache != nil {
		return e.cache.baseChains(hook)
	}
	return baseChains(e.t, hook)
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
	var buf [4]string // the keys of the rule's selectors, one at a time
	masq := false
	for !t.done() {
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
			key, ok := e.selector(&t, buf[:0])
			if !ok || key == nil || !t.eat("}") {
				return nftNext
			}
			e.v.updates = append(e.v.updates, nftUpdate{name, slices.Clone(key)})
			continue
		}
		if t.eat("dnat") {
			to, ok := e.dnatTarget(&t)
			if !ok {
				return nftNext
			}
			e.to(to)
			e.v.to, e.v.outcome = to, "dnat"
			e.v.masq = e.v.masq || masq
			return nftAccept
		}
		if a, ok := e.verdict(&t, depth); ok {
			e.v.masq = e.v.masq || masq
			return a
		}
		key, ok := e.selector(&t, buf[:0])
		if !ok {
			return nftNext
		}
		if t.eat("vmap") {
			m, ok := e.lookup(&t, key)
			if !ok || !m.found {
				return nftNext // a lookup that misses decides nothing
			}
			vt := m.verdict()
			a, ok := e.verdict(&vt, depth)
			if !ok {
				return nftNext
			}
			e.v.masq = e.v.masq || masq
			return a
		}
		neg := t.eat("!=")
		m, ok := e.lookup(&t, key)
		if !ok || key == nil || m.found == neg {
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
	var buf [4]string
	key, ok := e.selector(t, buf[:0])
	if !ok || !t.eat("map") {
		return to, false
	}
	m, ok := e.lookup(t, key)
	addr, port, pair := m.pair()
	if !ok || !m.found || !pair {
		return to, false
	}
	a, err := netip.ParseAddr(addr)
	p, perr := strconv.ParseUint(port, 10, 16)
	if err != nil || perr != nil {
		return to, false
	}
	return netip.AddrPortFrom(a, uint16(p)), true
}

// selector reads a field, or a concatenation of fields joined by ".", and
// returns the packet's value of each, spelled as kube-proxy spells set
// elements. ok is false for a field the model does not know; key is nil when
// the packet has no such field (tcp dport of a UDP packet, ip daddr of an
// IPv6 one), which no comparison matches, not even !=. key is appended to
// buf.
func (e *nftEval) selector(t *nftTokens, buf []string) (key []string, ok bool) {
	key = buf
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
	proto, port := e.proto, e.dport
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
		return e.src, e.p.src.Addr().Is4(), true
	case t.eat("ip", "daddr"):
		return e.daddr, e.dst.Addr().Is4(), true
	case t.eat("ip6", "saddr"):
		return e.src, e.p.src.Addr().Is6(), true
	case t.eat("ip6", "daddr"):
		return e.daddr, e.dst.Addr().Is6(), true
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

// nftMatch is the element a field's key found in what it is compared with.
type nftMatch struct {
	found bool
	el    *knftables.Element // found in a named set or map
	value nftTokens          // found in an anonymous one: the words after its colon
}

// verdict is the words of a verdict map element's value.
func (m nftMatch) verdict() nftTokens {
	if m.el != nil {
		return nftTokenize(strings.Join(m.el.Value, " "))
	}
	return m.value
}

// pair is a map element's value of two components, `A . B`.
func (m nftMatch) pair() (a, b string, ok bool) {
	if m.el != nil {
		if len(m.el.Value) != 2 {
			return "", "", false
		}
		return m.el.Value[0], m.el.Value[1], true
	}
	v := m.value
	a, ok = v.next(), v.eat(".")
	b = v.next()
	return a, b, ok && v.done()
}

// lookup reads what a field is compared with, a named set or map (@NAME),
// an anonymous { set } or inline map, or a literal value or comma list (as
// in ct state established,related), and finds in it the first element
// whose key holds key. ok is false for an unknown @NAME or an element
// without a key.
func (e *nftEval) lookup(t *nftTokens, key []string) (m nftMatch, ok bool) {
	if name, found := strings.CutPrefix(t.peek(), "@"); found {
		t.next()
		el, ok := e.named(name, key)
		return nftMatch{found: el != nil, el: el}, ok
	}
	braced := t.eat("{")
	for {
		// An element is `A . B [: V . W]`; it holds key if each of its key's
		// components holds the packet's.
		hit, n := !m.found, 0
		for {
			if t.done() {
				return nftMatch{}, false
			}
			w := t.next()
			hit = hit && n < len(key) && nftValueMatch(w, key[n])
			n++
			if !t.eat(".") {
				break
			}
		}
		var value nftTokens
		if t.eat(":") {
			start, end := t.w, t.w
			for !t.done() && t.peek() != "," && t.peek() != "}" {
				end = t.r
				t.next()
			}
			value = nftTokenize(t.s[start:end])
		}
		if hit && n == len(key) {
			m = nftMatch{found: true, value: value}
		}
		if !t.eat(",") {
			break
		}
	}
	if braced && !t.eat("}") {
		return nftMatch{}, false
	}
	return m, true
}

// named finds the first element of the set or map name whose key holds
// key, or nil; ok is false when the table has no such set or map.
func (e *nftEval) named(name string, key []string) (el *knftables.Element, ok bool) {
	var els []*knftables.Element
	var flags []knftables.SetFlag
	if s := e.t.Sets[name]; s != nil {
		els, flags = s.Elements, s.Flags
	} else if m := e.t.Maps[name]; m != nil {
		els, flags = m.Elements, m.Flags
	} else {
		return nil, false
	}
	if e.cache == nil {
		return nftFind(els, key), true
	}
	// The table keeps an index by key; without the interval flag every key
	// is an exact value, so that a key the index lacks is not there.
	if index := e.cache.index(name); index == nil {
		el = nftFind(els, key)
	} else if i, ok := index[string(nftJoin(make([]byte, 0, 64), key))]; ok {
		el = els[i]
	} else if slices.Contains(flags, knftables.IntervalFlag) {
		el = nftFind(els, key)
	}
	if el != nil && !e.cache.live(name, el.Key, e.p.now) {
		return nil, true
	}
	return el, true
}

// nftJoin appends a key's components joined as nft prints them (A . B),
// as the index holds them: the lookup m[string(b)] copies nothing.
func nftJoin(b []byte, key []string) []byte {
	for i, k := range key {
		if i > 0 {
			b = append(b, " . "...)
		}
		b = append(b, k...)
	}
	return b
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

// nftTokens reads a rule's text a word at a time: words are what white
// space separates, and the punctuation of sets and maps ({ } ,) is a word
// of its own. A word is a substring of the text, read once, so that
// reading a rule allocates nothing: a probe reads every rule on its
// packet's path.
type nftTokens struct {
	s    string
	w, r int // s[w:r] is the next word, empty at the end
}

func nftTokenize(s string) nftTokens {
	t := nftTokens{s: s}
	t.scan()
	return t
}

// scan finds the word after s[:r].
func (t *nftTokens) scan() {
	rest := strings.TrimLeftFunc(t.s[t.r:], unicode.IsSpace)
	n := strings.IndexFunc(rest, nftBreak)
	switch {
	case rest == "":
		n = 0
	case n == 0: // punctuation
		n = 1
	case n < 0:
		n = len(rest)
	}
	t.w = len(t.s) - len(rest)
	t.r = t.w + n
}

func nftBreak(r rune) bool { return unicode.IsSpace(r) || r == '{' || r == '}' || r == ',' }

func (t *nftTokens) done() bool { return t.w == t.r }

func (t *nftTokens) peek() string { return t.s[t.w:t.r] }

func (t *nftTokens) next() string {
	w := t.peek()
	t.scan()
	return w
}

// eat consumes words if t starts with them.
func (t *nftTokens) eat(words ...string) bool {
	u := *t
	for _, w := range words {
		if u.peek() != w {
			return false
		}
		u.scan()
	}
	*t = u
	return true
}
