package sim

import (
	"net/netip"

	"github.com/kpsim/kpsim/proxier/dataplane"
)

// Outcomes of a Probe.
const (
	ProbeOK              = "ok"
	ProbeNoAddress       = "no-address"
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
//  2. An IPVS virtual server must exist for dst and proto: "no-virtual-server".
//  3. UDP only: if a conntrack flow exists for (client, dst, UDP), the
//     datagram follows it, whatever IPVS now says. It arrives only if the
//     flow's endpoint (ReplySrc) is still a destination of the virtual
//     server with weight > 0 and ready; otherwise "stale-conntrack". This is
//     how a CoreDNS restart breaks lookups until kube-proxy clears the flow.
//  4. At least one destination must have weight > 0 and be ready:
//     "no-destination". Destinations are taken round-robin in the kernel's
//     list order, skipping weight 0 as the rr scheduler does; an unready one
//     is skipped too, standing for a client that retries, so "no-destination"
//     means no retry could succeed.
//  5. Otherwise "ok". For UDP the flow to the chosen destination is
//     recorded, so the next probe from the same client follows it (step 3).
//
// Probe is a model, not a kernel operation: it is neither counted nor charged.
func (k *Kernel) Probe(client, dst netip.AddrPort, proto dataplane.Protocol, ready func(netip.AddrPort) bool) (ok bool, outcome string) {
	k.lock()
	defer k.unlock()
	if !k.bound(dst.Addr()) {
		return false, ProbeNoAddress
	}
	svc, found := k.services[dataplane.ServiceKey{Address: dst.Addr(), Port: dst.Port(), Protocol: proto}]
	if !found {
		return false, ProbeNoVirtualServer
	}
	key := flowKey{proto, client, dst}
	if proto == dataplane.UDP {
		if reply, tracked := k.flows[key]; tracked {
			if d := svc.find(reply); d != nil && d.weight > 0 && ready(reply) {
				return true, ProbeOK
			}
			return false, ProbeStaleConntrack
		}
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
