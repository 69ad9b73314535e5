package proxier

import (
	"net/netip"
	"slices"
	"strconv"

	"github.com/kpsim/kpsim/dataplane"
)

// nodeInfo is what the proxier knows about its own node, read from the
// kernel on full syncs and from the Node object.
type nodeInfo struct {
	nodePortIPs []netip.Addr        // addresses NodePort virtual servers listen on, sorted
	localAddrs  map[netip.Addr]bool // every local address of the family except kube-ipvs0's
	nodeIP      netip.Addr          // kube-proxy's node IP of the family (nodeIPOf)
	zone        string              // the node's zone label, for topology-aware routing
}

// vsWant is a virtual server a service port wants, with the real servers it should have.
type vsWant struct {
	vs    dataplane.VirtualServer
	dests []netip.AddrPort
}

// setEntry is one ipset entry a service port wants.
type setEntry struct {
	set   setID
	entry string
}

// portState is everything one service port wants in the kernel. The
// proxier keeps the state it last applied per port, so that a change to
// one service is a difference between two portStates.
type portState struct {
	sp      servicePort
	vss     []vsWant
	entries []setEntry
	binds   []netip.Addr
	// outFilter are KUBE-IPVS-OUT-FILTER rules (after "-A KUBE-IPVS-OUT-FILTER").
	outFilter []string
	endpoints int
}

// hasDests reports whether any virtual server of the port has a real server.
func (s *portState) hasDests() bool {
	for _, v := range s.vss {
		if len(v.dests) > 0 {
			return true
		}
	}
	return false
}

// destSet is the union of the port's real servers over its virtual servers.
func (s *portState) destSet() map[netip.AddrPort]bool {
	out := map[netip.AddrPort]bool{}
	for _, v := range s.vss {
		for _, d := range v.dests {
			out[d] = true
		}
	}
	return out
}

// computePort derives a service port's kernel state the way kube-proxy's
// syncProxyRules does for one entry of its service map.
func (p *Proxier) computePort(sp servicePort, eps []endpoint, node *nodeInfo) *portState {
	st := &portState{sp: sp, endpoints: len(eps)}
	proto := sp.protocol.SetProto()
	add := func(set setID, e string) { st.entries = append(st.entries, setEntry{set, e}) }
	addrs := func(es []endpoint) []netip.AddrPort {
		out := make([]netip.AddrPort, len(es))
		for i, e := range es {
			out[i] = e.addr
		}
		slices.SortFunc(out, netip.AddrPort.Compare)
		return out
	}
	mkVS := func(a netip.Addr, port uint16) dataplane.VirtualServer {
		vs := dataplane.VirtualServer{
			ServiceKey: dataplane.ServiceKey{Address: a, Port: port, Protocol: sp.protocol},
			Scheduler:  p.cfg.Scheduler,
			Netmask:    dataplane.Netmask(a),
		}
		if sp.affinityTimeout > 0 {
			vs.Flags = dataplane.FlagPersistent
			vs.Timeout = sp.affinityTimeout
		}
		if p.cfg.Scheduler == "mh" {
			vs.Flags |= dataplane.FlagSchedPort
		}
		return vs
	}
	bind := func(a netip.Addr) {
		st.binds = append(st.binds, a)
		add(setIPVSIPs, a.String())
	}

	// Hairpin: every local endpoint, whatever its conditions.
	for _, e := range eps {
		if e.local {
			add(setLoopBack, e.addr.Addr().String()+","+proto+":"+strconv.Itoa(int(e.addr.Port()))+","+e.addr.Addr().String())
		}
	}

	cluster, local := categorize(&sp, eps, p.cfg.NodeName, node.zone)
	internal := addrs(endpoints(cluster, local, sp.internalLocal))
	external := internal
	if sp.externalLocal != sp.internalLocal {
		external = addrs(endpoints(cluster, local, sp.externalLocal))
	}

	add(setClusterIP, entryIPPort(sp.clusterIP, sp.protocol, sp.portNum))
	st.vss = append(st.vss, vsWant{mkVS(sp.clusterIP, sp.portNum), internal})
	bind(sp.clusterIP)

	for _, ip := range sp.externalIPs {
		if sp.externalLocal {
			add(setExternalIPLocal, entryIPPort(ip, sp.protocol, sp.portNum))
		} else {
			add(setExternalIP, entryIPPort(ip, sp.protocol, sp.portNum))
		}
		st.vss = append(st.vss, vsWant{mkVS(ip, sp.portNum), external})
		// An external IP that is a node address is served but not bound to kube-ipvs0.
		if !node.localAddrs[ip] {
			bind(ip)
		}
	}

	for _, ip := range sp.lbIPs {
		e := entryIPPort(ip, sp.protocol, sp.portNum)
		add(setLoadBalancer, e)
		if sp.externalLocal {
			add(setLoadBalancerLocal, e)
		}
		if len(sp.sourceRanges) > 0 {
			add(setLoadBalancerFW, e)
			fromNode := false
			for _, r := range sp.sourceRanges {
				add(setLoadBalancerSourceCIDR, e+","+canonicalNet(r))
				if r.Contains(node.nodeIP) {
					fromNode = true
				}
			}
			if fromNode {
				add(setLoadBalancerSourceIP, e+","+ip.String())
			} else {
				st.outFilter = append(st.outFilter, "-s "+ip.String()+" -m ipvs --vaddr "+ip.String()+
					" --vproto "+proto+" --vport "+strconv.Itoa(int(sp.portNum))+" -j DROP")
			}
		}
		st.vss = append(st.vss, vsWant{mkVS(ip, sp.portNum), external})
		if !node.localAddrs[ip] {
			bind(ip)
		}
	}

	if sp.nodePort != 0 && len(node.nodePortIPs) > 0 {
		var sets [2]setID // the set and its externalTrafficPolicy=Local twin
		var entries []string
		switch sp.protocol {
		case dataplane.UDP:
			sets = [2]setID{setNodePortUDP, setNodePortLocalUDP}
			entries = []string{strconv.Itoa(int(sp.nodePort))}
		case dataplane.SCTP:
			sets = [2]setID{setNodePortSCTP, setNodePortLocalSCTP}
			for _, ip := range node.nodePortIPs {
				entries = append(entries, entryIPPort(ip, sp.protocol, sp.nodePort))
			}
		default:
			sets = [2]setID{setNodePortTCP, setNodePortLocalTCP}
			entries = []string{strconv.Itoa(int(sp.nodePort))}
		}
		for _, e := range entries {
			add(sets[0], e)
			if sp.externalLocal {
				add(sets[1], e)
			}
		}
		for _, ip := range node.nodePortIPs {
			st.vss = append(st.vss, vsWant{mkVS(ip, sp.nodePort), external})
		}
	}

	// kube-proxy gives up on a node port service port it has no node
	// address for before it reaches the health check node port.
	if sp.healthCheckPort != 0 && (sp.nodePort == 0 || len(node.nodePortIPs) > 0) {
		add(setHealthCheckNodePort, strconv.Itoa(int(sp.healthCheckPort)))
	}
	return st
}

// canonicalNet writes a prefix the way ipset lists a hash:net member: a host
// prefix without its length.
func canonicalNet(p netip.Prefix) string {
	if p.IsSingleIP() {
		return p.Addr().String()
	}
	return p.String()
}
