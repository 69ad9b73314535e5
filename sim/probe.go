package sim

import (
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"sigs.k8s.io/knftables"

	"github.com/kpsim/kpsim/dataplane"
)

// Outcomes of a Probe.
const (
	ProbeOK              = "ok"
	ProbeNoAddress       = "no-address"
	ProbeRejected        = "rejected"
	ProbeNoVirtualServer = "no-virtual-server"
	ProbeStaleConntrack  = "stale-conntrack"
	ProbeNoDestination   = "no-destination"
)

// Probe models whether a new connection (or, for UDP, the next datagram)
// from client, a pod on the node, to the service address dst would succeed
// right now, given the kernel state the proxier has programmed. serves says
// whether an endpoint would answer: its pod exists and serves, which a
// terminating pod may still do (objects.Serving). The model,
// in order:
//
//  1. dst's address must be bound on a link of the node: kube-ipvs0 for
//     ClusterIPs, external and load-balancer IPs, or one of the node's own
//     addresses for NodePorts. Otherwise the packet is not local and IPVS
//     never sees it: "no-address".
//  2. The packet is delivered locally, so it traverses the filter table's
//     INPUT chain of dst's family before IPVS sees it (IPVS hooks LOCAL_IN
//     after the filter table). The model walks the ruleset the sim holds,
//     jumping into user chains and coming back on RETURN or at a chain's end;
//     whatever the rules say wins, no chain or set name is special. A walk
//     that ends in DROP or REJECT, or falls off INPUT under a DROP policy, is
//     "rejected" (kube-proxy's KUBE-IPVS-FILTER rejects a new connection to
//     an address in KUBE-IPVS-IPS whose ip,proto:port entry is missing from
//     KUBE-CLUSTER-IP and the other service sets, although the virtual server
//     exists). See probeRule for the matches the model evaluates; a rule with
//     any other match or target is skipped, an approximation.
//  3. An IPVS virtual server must exist for dst and proto: "no-virtual-server".
//  4. UDP only: if a conntrack flow exists for (client, dst, UDP), the
//     datagram follows it, whatever IPVS now says. It arrives only if the
//     flow's endpoint (ReplySrc) is still a destination of the virtual
//     server with weight > 0 and serves; otherwise "stale-conntrack". This is
//     how a CoreDNS restart breaks lookups until kube-proxy clears the flow.
//     Such a datagram is not NEW to conntrack in step 2 but ESTABLISHED.
//  5. At least one destination must have weight > 0 and serve:
//     "no-destination". Destinations are taken round-robin in the kernel's
//     list order, skipping weight 0 as the rr scheduler does; one that does
//     not serve is skipped too, standing for a client that retries, so
//     "no-destination" means no retry could succeed.
//  6. Otherwise "ok". For UDP the flow to the chosen destination is
//     recorded, so the next probe from the same client follows it (step 4).
//
// Before all of this, the nftables tables of dst's family (kube-proxy's in
// nftables mode) see the connection, as their hooks (prerouting or output,
// at dstnat priority) come before the local delivery IPVS takes it at: see
// probeNFT. Then the iptables nat table's PREROUTING or OUTPUT chain
// (kube-proxy's in iptables mode), at the same priority: see
// probeIPTables. Where they decide nothing, the model above applies.
//
// Probe is a model, not a kernel operation: it is neither counted nor charged.
// Its cost is a walk over the few rules reachable from INPUT (compiled when
// they were restored) with one map lookup per set match.
func (k *Kernel) Probe(client, dst netip.AddrPort, proto dataplane.Protocol, serves func(netip.AddrPort) bool) (ok bool, outcome string) {
	k.lock()
	defer k.unlock()
	return k.probe(client, dst, proto, serves, false)
}

// ProbeFromNode models a connection from a process in the node's own network
// namespace (host network: the kubelet, a CNI agent) to the service address
// dst. It differs from Probe where the kernel's path differs:
//
//   - the packet is sent, not delivered: it traverses the filter table's
//     OUTPUT chain, not INPUT (IPVS takes it at LOCAL_OUT), so
//     KUBE-IPVS-FILTER does not apply and KUBE-IPVS-OUT-FILTER does;
//   - its source is the address the route to dst prefers, dst itself for an
//     address bound on the node, so a connection to a service address on
//     kube-ipvs0 leaves with that service address as its source. The real
//     server's reply to it is lost (every node holds the service address
//     locally) unless the packet was masqueraded: the nat table's OUTPUT
//     chain must mark it and POSTROUTING must end in MASQUERADE, or the
//     outcome is "no-snat". This is how a node joining a cluster cannot
//     reach the API server's ClusterIP until kube-proxy has written its
//     iptables rules, at the end of a sync that may add thousands of ipset
//     entries first. A NodePort on the node's own address needs no SNAT.
func (k *Kernel) ProbeFromNode(dst netip.AddrPort, proto dataplane.Protocol, serves func(netip.AddrPort) bool) (ok bool, outcome string) {
	k.lock()
	defer k.unlock()
	return k.probe(netip.AddrPortFrom(dst.Addr(), nodeClientPort), dst, proto, serves, true)
}

// nodeClientPort is the source port of a host-network probe: one per
// target, like a resolver's socket, so its UDP flows are followed.
const nodeClientPort = 40001

// ProbeNoSNAT is the outcome of a host-network connection whose reply
// cannot come back: its source, a service address, was not masqueraded.
const ProbeNoSNAT = "no-snat"

func (k *Kernel) probe(client, dst netip.AddrPort, proto dataplane.Protocol, serves func(netip.AddrPort) bool, fromNode bool) (bool, string) {
	key := flowKey{proto, client, dst}
	reply, tracked := netip.AddrPort{}, false
	if proto == dataplane.UDP {
		reply, tracked = k.flows[key]
	}
	if ok, outcome, decided := k.probeNFT(key, tracked, reply, serves, fromNode); decided {
		return ok, outcome
	}
	if ok, outcome, decided := k.probeIPTables(key, tracked, reply, serves, fromNode); decided {
		return ok, outcome
	}
	if !k.bound(dst.Addr()) {
		return false, ProbeNoAddress
	}
	pkt := packet{src: client, dst: dst, proto: proto.SetProto(), established: tracked}
	chain := "INPUT"
	if fromNode {
		chain = "OUTPUT"
	}
	if !k.filterAccepts(&pkt, chain) {
		return false, ProbeRejected
	}
	if fromNode && !tracked {
		k.walkHook(&pkt, "nat", "OUTPUT") // marks the packet for masquerade, or not
	}
	svc, found := k.services[dataplane.ServiceKey{Address: dst.Addr(), Port: dst.Port(), Protocol: proto}]
	if !found {
		return false, ProbeNoVirtualServer
	}
	if tracked {
		if d := svc.find(reply); d != nil && d.weight > 0 && serves(reply) {
			return true, ProbeOK
		}
		return false, ProbeStaleConntrack
	}
	// A persistent virtual server (ClientIP affinity) sends the client
	// where its template says while the template lives (see persisted).
	persistent := svc.vs.Flags&dataplane.FlagPersistent != 0
	if persistent {
		if d := svc.persisted(client.Addr(), k.now()); d != nil && serves(d.ap) {
			return k.deliver(d, key, client, &pkt, fromNode)
		}
	}
	n := len(svc.order)
	for i := 0; i < n; i++ {
		d := svc.order[(svc.next+i)%n]
		if d.weight <= 0 || !serves(d.ap) {
			continue
		}
		svc.next = (svc.next + i + 1) % n
		if persistent {
			svc.persist(client.Addr(), d, k.now())
		}
		return k.deliver(d, key, client, &pkt, fromNode)
	}
	return false, ProbeNoDestination
}

// deliver is a new connection IPVS sends to real server d: a
// host-network one must be masqueraded on its way there, and a UDP flow
// is remembered (conntrack) for the client's next datagram.
func (k *Kernel) deliver(d *ipvsDest, key flowKey, client netip.AddrPort, pkt *packet, fromNode bool) (bool, string) {
	if fromNode && k.onServiceLink(client.Addr()) {
		pkt.dst = d.ap // IPVS has sent it on to the real server
		if k.walkHook(pkt, "nat", "POSTROUTING") != "MASQUERADE" {
			return false, ProbeNoSNAT
		}
	}
	if key.proto == dataplane.UDP {
		k.flows[key] = d.ap
	}
	return true, ProbeOK
}

// onServiceLink reports whether a is bound on kube-ipvs0: a service address,
// not one of the node's own.
func (k *Kernel) onServiceLink(a netip.Addr) bool {
	l := k.links[dataplane.DummyLink]
	if l == nil {
		return false
	}
	_, ok := l.addrs[a]
	return ok
}

// packet is what the filter model knows of a probe's first packet.
type packet struct {
	src, dst    netip.AddrPort
	proto       string // lower case, as -p and ipset entries spell it
	established bool   // conntrack state ESTABLISHED rather than NEW
	mark        uint32
	// serves says whether an endpoint answers, for a statistic choice
	// (choose); nil where the walk decides no destination.
	serves func(netip.AddrPort) bool
	buf    [128]byte
}

// probeIPTables is the probe model's iptables-mode part. A new connection
// walks the nat table's PREROUTING chain (OUTPUT for the node's own); a
// DNAT there sends it to the endpoint it names (see choose for kube-proxy's
// statistic rules), through the filter table's FORWARD chain (the node's:
// OUTPUT), where a DROP or REJECT ends it: "rejected". An endpoint that
// does not serve is "no-destination". A UDP datagram of a tracked flow
// follows the flow (or is "stale-conntrack" if its endpoint no longer
// serves), and a new one is remembered. Without a DNAT, an address not
// bound on the node is routed on: the same filter chain may reject it (the
// REJECT kube-proxy writes for a service with no endpoints); otherwise the
// rest of the model decides.
func (k *Kernel) probeIPTables(key flowKey, tracked bool, reply netip.AddrPort, serves func(netip.AddrPort) bool, fromNode bool) (ok bool, outcome string, decided bool) {
	nat, filter := "PREROUTING", "FORWARD"
	if fromNode {
		nat, filter = "OUTPUT", "OUTPUT"
	}
	pkt := packet{src: key.client, dst: key.origDst, proto: key.proto.SetProto(), serves: serves}
	if k.walkHook(&pkt, "nat", nat) != "DNAT" {
		if k.bound(key.origDst.Addr()) {
			return false, "", false
		}
		pkt = packet{src: key.client, dst: key.origDst, proto: key.proto.SetProto(), established: tracked}
		if v := k.ruleVerdict(&pkt, "filter", filter); v == "DROP" || v == "REJECT" {
			return false, ProbeRejected, true
		}
		return false, "", false
	}
	if tracked {
		if serves(reply) {
			return true, ProbeOK, true
		}
		return false, ProbeStaleConntrack, true
	}
	if v := k.ruleVerdict(&pkt, "filter", filter); v == "DROP" || v == "REJECT" {
		return false, ProbeRejected, true
	}
	if !serves(pkt.dst) {
		return false, ProbeNoDestination, true
	}
	if key.proto == dataplane.UDP {
		k.flows[key] = pkt.dst
	}
	return true, ProbeOK, true
}

func (p *packet) addr(src bool) netip.Addr {
	if src {
		return p.src.Addr()
	}
	return p.dst.Addr()
}

func (p *packet) port(src bool) uint16 {
	if src {
		return p.src.Port()
	}
	return p.dst.Port()
}

// probeRule is a rule compiled for the probe model when it is restored, so
// that probing never parses rule text. The model evaluates these matches:
//
//   - -m comment --comment TEXT: always true.
//   - [!] -p tcp|udp|sctp|all: the probe's protocol.
//   - -m set [!] --match-set NAME FLAGS: membership of the packet in the set
//     as the kernel tests it: each src/dst flag picks the packet's source or
//     destination for the set's next dimension (address for ip, protocol and
//     port for port, containment for net; bitmap:port takes the port), fewer
//     flags than the set has dimensions never match, a set of the other
//     family never matches. E.g. dst,dst on hash:ip,port looks up
//     "10.96.0.10,tcp:80"; dst on hash:ip looks up "10.96.0.10".
//   - -m conntrack [!] --ctstate STATES: STATES holds NEW (a new connection)
//     or ESTABLISHED (a UDP datagram of a tracked flow).
//   - [!] -s / -d ADDR[/LEN]: the packet's source or destination address.
//   - -m mark [!] --mark VALUE[/MASK]: the packet's mark.
//   - -m addrtype [!] --src-type|--dst-type LOCAL: whether the address is
//     bound on the node (kube-ipvs0's included).
//   - -m tcp|udp|sctp [!] --dport PORT: the destination port.
//   - -m statistic --mode random --probability P: a statistic choice (see
//     choose), not a draw.
//   - -m recent: --set always matches (the model keeps no list); a rule
//     with --rcheck never does, so ClientIP affinity in iptables mode is
//     not modeled (each connection is chosen afresh).
//
// and these targets: ACCEPT, DROP, REJECT, MASQUERADE, DNAT
// --to-destination ADDR:PORT (which end the walk),
// RETURN, MARK (--set-xmark, --set-mark, --or-mark, --xor-mark: the packet's
// mark changes and the walk goes on), a user chain by -j (a jump) or -g (a
// goto: its end returns to the caller's caller), and no target at all (a
// counting rule). A rule with any other module, option or target (-m
// physdev, -j LOG, ...) is skipped as if it did not match: the
// approximation the model makes, right for kube-proxy's rules on the path of
// a connection to a service.
type probeRule struct {
	skip    bool
	target  string
	goTo    bool
	random  bool           // -m statistic --mode random
	dnat    netip.AddrPort // DNAT's --to-destination
	matches []probeMatch
	// MARK's effect: mark = mark&^clear ^ flip.
	clear, flip uint32
}

type matchKind uint8

const (
	matchProtocol matchKind = iota
	matchSet
	matchState
	matchAddr
	matchMark
	matchLocal
	matchPort
)

type probeMatch struct {
	kind   matchKind
	negate bool
	name   string // protocol (lower case) or set name
	// Set: the number of flags and, for the first three, whether each is src.
	flags int
	src   [3]bool
	// State: whether the states listed include NEW and ESTABLISHED.
	stateNew, stateEstablished bool
	// Addr: the prefix the source (src[0]) or destination must be in; Local:
	// which address must be bound locally (src[0]).
	prefix netip.Prefix
	// Mark: mark&mask == value; Port: the destination port is value.
	value, mask uint32
}

// probeModules are the match modules whose options the model understands.
var probeModules = map[string]bool{"comment": true, "set": true, "conntrack": true, "mark": true, "addrtype": true,
	"tcp": true, "udp": true, "sctp": true, "statistic": true, "recent": true}

// parseMark reads VALUE[/MASK] in iptables' number syntax; the mask
// defaults to all ones.
func parseMark(s string) (value, mask uint32, ok bool) {
	v, m, hasMask := strings.Cut(s, "/")
	x, err := strconv.ParseUint(v, 0, 32)
	if err != nil {
		return 0, 0, false
	}
	mask = 0xffffffff
	if hasMask {
		y, err := strconv.ParseUint(m, 0, 32)
		if err != nil {
			return 0, 0, false
		}
		mask = uint32(y)
	}
	return uint32(x), mask, true
}

// parsePrefix reads an address or a prefix as -s and -d take them.
func parsePrefix(s string) (netip.Prefix, bool) {
	if p, err := netip.ParsePrefix(s); err == nil {
		return p.Masked(), true
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, false
	}
	return netip.PrefixFrom(a, a.BitLen()), true
}

// compileProbeRule compiles a rule spec (the words after "-A CHAIN").
func compileProbeRule(spec []string) probeRule {
	var r probeRule
	negate := false
	for i := 0; i < len(spec) && !r.skip; i++ {
		arg := func() string {
			if i+1 == len(spec) {
				r.skip = true
				return ""
			}
			i++
			return spec[i]
		}
		opt := spec[i]
		if opt == "!" {
			negate = true
			continue
		}
		switch opt {
		case "-m", "--match":
			r.skip = !probeModules[arg()]
		case "--comment":
			arg()
		case "-p", "--protocol":
			m := probeMatch{kind: matchProtocol, negate: negate, name: strings.ToLower(arg())}
			r.skip = m.name != "tcp" && m.name != "udp" && m.name != "sctp" && m.name != "all"
			r.matches = append(r.matches, m)
		case "--match-set":
			m := probeMatch{kind: matchSet, negate: negate, name: arg()}
			for _, f := range strings.Split(arg(), ",") {
				if f != "src" && f != "dst" {
					r.skip = true
				}
				if m.flags < len(m.src) {
					m.src[m.flags] = f == "src"
				}
				m.flags++
			}
			r.matches = append(r.matches, m)
		case "--ctstate":
			m := probeMatch{kind: matchState, negate: negate}
			for _, s := range strings.Split(arg(), ",") {
				m.stateNew = m.stateNew || s == "NEW"
				m.stateEstablished = m.stateEstablished || s == "ESTABLISHED"
			}
			r.matches = append(r.matches, m)
		case "-s", "--source", "-d", "--destination":
			p, ok := parsePrefix(arg())
			r.skip = r.skip || !ok
			m := probeMatch{kind: matchAddr, negate: negate, prefix: p}
			m.src[0] = opt == "-s" || opt == "--source"
			r.matches = append(r.matches, m)
		case "--mark":
			v, mask, ok := parseMark(arg())
			r.skip = r.skip || !ok
			r.matches = append(r.matches, probeMatch{kind: matchMark, negate: negate, value: v, mask: mask})
		case "--dport", "--destination-port":
			port, err := strconv.ParseUint(arg(), 10, 16)
			r.skip = r.skip || err != nil
			r.matches = append(r.matches, probeMatch{kind: matchPort, negate: negate, value: uint32(port)})
		case "--mode":
			r.skip = r.skip || arg() != "random"
		case "--probability":
			arg()
			r.random = true
		case "--name", "--mask", "--seconds":
			arg()
		case "--set", "--rsource", "--reap":
		case "--rcheck":
			r.skip = true
		case "--src-type", "--dst-type":
			m := probeMatch{kind: matchLocal, negate: negate}
			m.src[0] = opt == "--src-type"
			r.skip = r.skip || arg() != "LOCAL"
			r.matches = append(r.matches, m)
		case "-j", "--jump", "-g", "--goto":
			r.target, r.goTo = arg(), opt == "-g" || opt == "--goto"
			switch r.target {
			case "ACCEPT", "DROP", "REJECT", "RETURN", "MASQUERADE":
			case "MARK":
				r.compileMark(spec[i+1:])
			case "DNAT":
				r.compileDNAT(spec[i+1:])
			default:
				r.skip = r.skip || targets[r.target] // an extension target, not a chain
			}
			return r // what follows are the target's own options
		default:
			r.skip = true
		}
		negate = false
	}
	return r
}

// compileDNAT reads the DNAT target's --to-destination ADDR:PORT, the one
// form kube-proxy writes.
func (r *probeRule) compileDNAT(opts []string) {
	if len(opts) < 2 || opts[0] != "--to-destination" {
		r.skip = true
		return
	}
	to, err := netip.ParseAddrPort(opts[1])
	r.dnat, r.skip = to, r.skip || err != nil
}

// compileMark reads the MARK target's options.
func (r *probeRule) compileMark(opts []string) {
	if len(opts) != 2 {
		r.skip = true
		return
	}
	v, mask, ok := parseMark(opts[1])
	if !ok {
		r.skip = true
		return
	}
	switch opts[0] {
	case "--set-xmark":
		r.clear, r.flip = mask, v
	case "--set-mark":
		r.clear, r.flip = mask, v&mask
	case "--or-mark":
		r.clear, r.flip = v, v
	case "--xor-mark":
		r.clear, r.flip = 0, v
	case "--and-mark":
		r.clear, r.flip = ^v, 0
	default:
		r.skip = true
	}
}

// filterAccepts walks the filter table's chain of the packet's family
// (INPUT for a packet delivered to the node, OUTPUT for one it sends).
func (k *Kernel) filterAccepts(p *packet, chain string) bool {
	verdict := k.walkHook(p, "filter", chain)
	return verdict != "DROP" && verdict != "REJECT"
}

// walkHook walks one built-in chain of a table and returns the verdict that
// ended it, or the chain's policy.
func (k *Kernel) walkHook(p *packet, table, chain string) string {
	t := k.tables[dataplane.FamilyOf(p.dst.Addr())][table]
	c := t.chains[chain]
	verdict, _ := k.walk(t, c, p, 0)
	if verdict == "" {
		verdict = c.policy
	}
	return verdict
}

// walk evaluates a chain and returns the verdict that ended the walk, or ""
// with done false when the chain returned. A ruleset the kernel would refuse
// can loop; the sim does not refuse it, so a jump nested deeper than there
// are chains is skipped.
func (k *Kernel) walk(t *table, c *chain, p *packet, depth int) (verdict string, done bool) {
	for i := range c.rules {
		r := &c.rules[i].probe
		if r.skip || r.target == "" || !k.matchAll(r.matches, p) {
			continue
		}
		if r.random {
			return k.choose(t, c, i, p, depth)
		}
		if verdict, done, next := k.jump(t, r, p, depth); !next {
			return verdict, done
		}
	}
	return "", false
}

// jump takes rule r's target for p: a verdict that ends the walk (done), a
// RETURN, or next: the walk goes on with the chain's next rule.
func (k *Kernel) jump(t *table, r *probeRule, p *packet, depth int) (verdict string, done, next bool) {
	switch r.target {
	case "ACCEPT", "DROP", "REJECT", "MASQUERADE":
		return r.target, true, false
	case "DNAT":
		p.dst = r.dnat
		return r.target, true, false
	case "RETURN":
		return "", false, false
	case "MARK":
		p.mark = p.mark&^r.clear ^ r.flip
		return "", false, true
	}
	sub, ok := t.chains[r.target]
	if !ok || sub.builtin || depth >= len(t.chains) {
		return "", false, true
	}
	if verdict, done := k.walk(t, sub, p, depth+1); done || r.goTo {
		return verdict, done, false
	}
	return "", false, true
}

// choose stands for the statistic rules kube-proxy's iptables mode spreads
// a service's new connections with (-m statistic --mode random, each taking
// its share of what the ones before left, the rule after them the rest):
// from the rule at i on, the rules that match, up to and including the
// first that is not random, are taken in turn, round robin per chain as
// IPVS's rr takes destinations, and the first whose walk DNATs to an
// endpoint that serves decides (a client that retries). If none does, the
// first decides, so "no-destination" means no retry could succeed. The
// walk ends at the choice.
func (k *Kernel) choose(t *table, c *chain, i int, p *packet, depth int) (verdict string, done bool) {
	var picks []*probeRule
	for j := i; j < len(c.rules); j++ {
		r := &c.rules[j].probe
		if r.skip || r.target == "" || !k.matchAll(r.matches, p) {
			continue
		}
		picks = append(picks, r)
		if !r.random {
			break
		}
	}
	first := k.iptNext[c] % len(picks)
	k.iptNext[c] = (first + 1) % len(picks)
	var fallback packet
	for n := range picks {
		q := *p
		v, d, _ := k.jump(t, picks[(first+n)%len(picks)], &q, depth)
		if v == "DNAT" && (p.serves == nil || p.serves(q.dst)) {
			k.iptNext[c] = (first + n + 1) % len(picks)
			*p = q
			return v, d
		}
		if n == 0 {
			fallback, verdict, done = q, v, d
		}
	}
	*p = fallback
	return verdict, done
}

// ruleVerdict walks one built-in chain of a table and returns the verdict
// a rule gave, "" where none did (the chain's policy is not taken).
func (k *Kernel) ruleVerdict(p *packet, table, chain string) string {
	t := k.tables[dataplane.FamilyOf(p.dst.Addr())][table]
	verdict, _ := k.walk(t, t.chains[chain], p, 0)
	return verdict
}

func (k *Kernel) matchAll(ms []probeMatch, p *packet) bool {
	for i := range ms {
		m := &ms[i]
		var hit bool
		switch m.kind {
		case matchProtocol:
			hit = m.name == "all" || m.name == p.proto
		case matchSet:
			hit = k.inSet(m, p)
		case matchState:
			hit = m.stateEstablished && p.established || m.stateNew && !p.established
		case matchAddr:
			hit = m.prefix.Contains(p.addr(m.src[0]))
		case matchMark:
			hit = p.mark&m.mask == m.value
		case matchLocal:
			hit = k.bound(p.addr(m.src[0]))
		case matchPort:
			hit = uint32(p.dst.Port()) == m.value
		}
		if hit == m.negate {
			return false
		}
	}
	return true
}

// setDimensions is how many src/dst flags each set type consumes.
var setDimensions = map[dataplane.SetType]int{
	dataplane.BitmapPort: 1, dataplane.HashIP: 1, dataplane.HashNet: 1,
	dataplane.HashIPPort: 2, dataplane.HashIPPortIP: 3, dataplane.HashIPPortNet: 3,
}

// inSet looks the packet up in a set by building the entry it would be, in
// the canonical form the set stores, in the packet's buffer.
func (k *Kernel) inSet(m *probeMatch, p *packet) bool {
	s := k.sets[m.name]
	if s == nil || m.flags < setDimensions[s.spec.Type] {
		return false
	}
	b := p.buf[:0]
	if s.spec.Type == dataplane.BitmapPort {
		_, ok := s.entries[string(strconv.AppendUint(b, uint64(p.port(m.src[0])), 10))]
		return ok
	}
	a := p.addr(m.src[0])
	if dataplane.FamilyOf(a) != s.spec.Family {
		return false
	}
	if s.spec.Type == dataplane.HashNet {
		return hasNet(s, b, a)
	}
	b = a.AppendTo(b)
	if s.spec.Type != dataplane.HashIP {
		b = append(append(append(b, ','), p.proto...), ':')
		b = strconv.AppendUint(b, uint64(p.port(m.src[1])), 10)
		switch s.spec.Type {
		case dataplane.HashIPPortIP:
			b = p.addr(m.src[2]).AppendTo(append(b, ','))
		case dataplane.HashIPPortNet:
			return hasNet(s, append(b, ','), p.addr(m.src[2]))
		}
	}
	_, ok := s.entries[string(b)]
	return ok
}

// hasNet reports whether the set holds prefix followed by a network that
// contains a, trying each prefix length as the kernel's hash:net types do.
func hasNet(s *ipset, prefix []byte, a netip.Addr) bool {
	if dataplane.FamilyOf(a) != s.spec.Family {
		return false
	}
	for bits := a.BitLen(); bits > 0; bits-- {
		net, _ := a.Prefix(bits)
		b := net.Addr().AppendTo(prefix)
		if bits < a.BitLen() {
			b = strconv.AppendInt(append(b, '/'), int64(bits), 10)
		}
		if _, ok := s.entries[string(b)]; ok {
			return true
		}
	}
	return false
}

// probeNFT is the probe model's nftables part: the connection walks the
// kernel's nftables tables of its family in name order (nftEvaluate); the
// first that decides it decides the probe:
//
//   - dropped or rejected: "rejected";
//   - DNATed to an endpoint (kube-proxy picks one at random): "ok" when it
//     serves. One that does not stands for a client that retries, as in the
//     IPVS model: each of the numgen's other choices is tried, in turn,
//     before "no-destination". Successive probes of a service take its
//     choices round robin, so that probes are repeatable.
//   - a UDP datagram of a tracked flow follows it, whatever the rules now
//     say, and arrives if its endpoint serves, else "stale-conntrack";
//   - from the node, to an address bound on kube-ipvs0 (IPVS mode's, left
//     behind), the connection's source is that service address, and its
//     reply is lost unless the rules marked it for masquerade: "no-snat".
//
// decided is false when no table had a rule for it (or there is none).
func (k *Kernel) probeNFT(key flowKey, tracked bool, reply netip.AddrPort, serves func(netip.AddrPort) bool, fromNode bool) (ok bool, outcome string, decided bool) {
	family := dataplane.NFTablesFamily(dataplane.FamilyOf(key.origDst.Addr()))
	var tables []nftKey
	for t := range k.nft {
		if t.family == family {
			tables = append(tables, t)
		}
	}
	if len(tables) == 0 {
		return false, "", false
	}
	slices.SortFunc(tables, func(a, b nftKey) int { return strings.Compare(a.name, b.name) })
	path := nftPath{src: key.client, dst: key.origDst, proto: key.proto, fromNode: fromNode, local: k.bound, now: k.now()}
	if fromNode && !k.bound(key.origDst.Addr()) {
		path.src = netip.AddrPortFrom(k.nodeAddress(family), key.client.Port()) // the route's source
	}
	for _, t := range tables {
		if ok, outcome, decided := k.probeTable(k.nft[t], path, key, tracked, reply, serves); decided {
			return ok, outcome, true
		}
	}
	return false, "", false
}

// probeTable is probeNFT's walk of one table, with the retries over its
// numgen's choices.
func (k *Kernel) probeTable(t *nftState, path nftPath, key flowKey, tracked bool, reply netip.AddrPort, serves func(netip.AddrPort) bool) (ok bool, outcome string, decided bool) {
	first := k.nftNext[key.origDst]
	choices := 1 // a walk through `numgen random mod n` says n
	for tried := 0; tried < choices; tried++ {
		path.pick = func(n int) int {
			choices = n
			return (first + tried) % n
		}
		t.expire(path.now)
		v := nftEvaluate(t.table, t, path)
		// What the packet wrote on its way (ClientIP affinity) is written
		// whatever became of it: a retry meets it.
		for _, u := range v.updates {
			t.write(u.set, u.key, path.now)
		}
		switch {
		case v.outcome == "":
			return false, "", false
		case v.outcome != "dnat":
			return false, v.outcome, true
		case tracked:
			if serves(reply) {
				return true, ProbeOK, true
			}
			return false, ProbeStaleConntrack, true
		case !serves(v.to):
			continue
		case path.fromNode && k.onServiceLink(path.src.Addr()) && !v.masq:
			return false, ProbeNoSNAT, true
		}
		k.nftNext[key.origDst] = first + tried + 1
		if key.proto == dataplane.UDP {
			k.flows[key] = v.to
		}
		return true, ProbeOK, true
	}
	return false, ProbeNoDestination, true
}

// nodeAddress is the node's first address of the family on eth0: the
// source a host-network connection to an address the node does not hold
// leaves with.
func (k *Kernel) nodeAddress(family knftables.Family) netip.Addr {
	var out netip.Addr
	if l := k.links["eth0"]; l != nil {
		for a := range l.addrs {
			if a.Is4() == (family == knftables.IPv4Family) && (!out.IsValid() || a.Less(out)) {
				out = a
			}
		}
	}
	return out
}
