package sim

import (
	"net/netip"
	"strconv"
	"strings"

	"github.com/kpsim/kpsim/proxier/dataplane"
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
// from client to the service address dst would succeed right now, given the
// kernel state the proxier has programmed. ready says whether an endpoint
// would answer (the pod exists and serves). The model, in order:
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
//     server with weight > 0 and ready; otherwise "stale-conntrack". This is
//     how a CoreDNS restart breaks lookups until kube-proxy clears the flow.
//     Such a datagram is not NEW to conntrack in step 2 but ESTABLISHED.
//  5. At least one destination must have weight > 0 and be ready:
//     "no-destination". Destinations are taken round-robin in the kernel's
//     list order, skipping weight 0 as the rr scheduler does; an unready one
//     is skipped too, standing for a client that retries, so "no-destination"
//     means no retry could succeed.
//  6. Otherwise "ok". For UDP the flow to the chosen destination is
//     recorded, so the next probe from the same client follows it (step 4).
//
// Probe is a model, not a kernel operation: it is neither counted nor charged.
// Its cost is a walk over the few rules reachable from INPUT (compiled when
// they were restored) with one map lookup per set match.
func (k *Kernel) Probe(client, dst netip.AddrPort, proto dataplane.Protocol, ready func(netip.AddrPort) bool) (ok bool, outcome string) {
	k.lock()
	defer k.unlock()
	if !k.bound(dst.Addr()) {
		return false, ProbeNoAddress
	}
	key := flowKey{proto, client, dst}
	reply, tracked := netip.AddrPort{}, false
	if proto == dataplane.UDP {
		reply, tracked = k.flows[key]
	}
	pkt := packet{src: client, dst: dst, proto: proto.SetProto(), established: tracked}
	if !k.filterAccepts(&pkt) {
		return false, ProbeRejected
	}
	svc, found := k.services[dataplane.ServiceKey{Address: dst.Addr(), Port: dst.Port(), Protocol: proto}]
	if !found {
		return false, ProbeNoVirtualServer
	}
	if tracked {
		if d := svc.find(reply); d != nil && d.weight > 0 && ready(reply) {
			return true, ProbeOK
		}
		return false, ProbeStaleConntrack
	}
	n := len(svc.order)
	for i := 0; i < n; i++ {
		d := svc.order[(svc.next+i)%n]
		if d.weight <= 0 || !ready(d.ap) {
			continue
		}
		svc.next = (svc.next + i + 1) % n
		if proto == dataplane.UDP {
			k.flows[key] = d.ap
		}
		return true, ProbeOK
	}
	return false, ProbeNoDestination
}

// packet is what the filter model knows of a probe's first packet.
type packet struct {
	src, dst    netip.AddrPort
	proto       string // lower case, as -p and ipset entries spell it
	established bool   // conntrack state ESTABLISHED rather than NEW
	buf         [128]byte
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
//
// and these targets: ACCEPT, DROP, REJECT (which end the walk), RETURN, a
// user chain by -j (a jump) or -g (a goto: its end returns to the caller's
// caller), and no target at all (a counting rule). A rule with any other
// module, option or target (-s, -m mark, -j MARK, -j LOG, ...) is skipped as
// if it did not match: the approximation the model makes, right for
// kube-proxy's filter rules on the path of a connection to a service.
type probeRule struct {
	skip    bool
	target  string
	goTo    bool
	matches []probeMatch
}

type matchKind uint8

const (
	matchProtocol matchKind = iota
	matchSet
	matchState
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
}

// probeModules are the match modules whose options the model understands.
var probeModules = map[string]bool{"comment": true, "set": true, "conntrack": true}

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
		case "-j", "--jump", "-g", "--goto":
			r.target, r.goTo = arg(), opt == "-g" || opt == "--goto"
			switch r.target {
			case "ACCEPT", "DROP", "REJECT", "RETURN":
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

// filterAccepts walks the filter table's INPUT chain of the packet's family.
func (k *Kernel) filterAccepts(p *packet) bool {
	t := k.tables[dataplane.FamilyOf(p.dst.Addr())]["filter"]
	input := t.chains["INPUT"]
	verdict, _ := k.walk(t, input, p, 0)
	if verdict == "" {
		verdict = input.policy
	}
	return verdict != "DROP" && verdict != "REJECT"
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
		switch r.target {
		case "ACCEPT", "DROP", "REJECT":
			return r.target, true
		case "RETURN":
			return "", false
		}
		sub, ok := t.chains[r.target]
		if !ok || sub.builtin || depth >= len(t.chains) {
			continue
		}
		if verdict, done := k.walk(t, sub, p, depth+1); done || r.goTo {
			return verdict, done
		}
	}
	return "", false
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
