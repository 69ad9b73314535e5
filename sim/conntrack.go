package sim

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"syscall"

	"github.com/kpsim/kpsim/dataplane"
)

// Flow is a conntrack entry: a client's flow to a service address and the
// endpoint IPVS or a DNAT rule sent it to.
type Flow = dataplane.ConntrackFlow

// flowKey is a flow's identity: the original direction tuple.
type flowKey struct {
	proto   dataplane.Protocol
	client  netip.AddrPort
	origDst netip.AddrPort
}

// AddFlow records a flow, replacing one with the same original tuple.
func (k *Kernel) AddFlow(f Flow) {
	k.lock()
	defer k.unlock()
	k.flows[flowKey{f.Protocol, f.Client, f.OrigDst}] = f.ReplySrc
}

// FlowTable lists the conntrack table, every family's, ordered by protocol,
// client and destination.
func (k *Kernel) FlowTable() []Flow {
	k.lock()
	defer k.unlock()
	out := make([]Flow, 0, len(k.flows))
	for key, reply := range k.flows {
		out = append(out, Flow{Protocol: key.proto, Client: key.client, OrigDst: key.origDst, ReplySrc: reply})
	}
	slices.SortFunc(out, func(a, b Flow) int {
		if c := strings.Compare(string(a.Protocol), string(b.Protocol)); c != 0 {
			return c
		}
		if c := a.Client.Compare(b.Client); c != 0 {
			return c
		}
		return a.OrigDst.Compare(b.OrigDst)
	})
	return out
}

func matches(f Flow, c dataplane.ConntrackFilter) bool {
	return (c.Protocol == "" || c.Protocol == f.Protocol) &&
		(!c.OrigDst.IsValid() || c.OrigDst == f.OrigDst.Addr()) &&
		(c.OrigDstPort == 0 || c.OrigDstPort == f.OrigDst.Port()) &&
		(!c.ReplySrc.IsValid() || c.ReplySrc == f.ReplySrc.Addr()) &&
		(c.ReplySrcPort == 0 || c.ReplySrcPort == f.ReplySrc.Port())
}

// Flows is dataplane.Conntrack's listing: the family's flows, in Flows' order.
func (k *Kernel) Flows(f dataplane.Family) ([]dataplane.ConntrackFlow, error) {
	all := k.FlowTable()
	k.lock()
	defer k.unlock()
	var out []dataplane.ConntrackFlow
	for _, fl := range all {
		if dataplane.FamilyOf(fl.OrigDst.Addr()) == f {
			out = append(out, fl)
		}
	}
	k.read(dataplane.OpConntrackList, len(out))
	return out, nil
}

// Delete removes the flows the filter matches and returns how many. A filter
// without an address is EINVAL: it would flush the table, which kube-proxy
// never means.
func (k *Kernel) Delete(c dataplane.ConntrackFilter) (int, error) {
	k.lock()
	defer k.unlock()
	if k.faulty(dataplane.OpConntrackDelete) {
		if err := k.fault(dataplane.OpConntrackDelete, filterString(c)); err != nil {
			return 0, errorf(err, "conntrack delete %s", filterString(c))
		}
	}
	if !c.OrigDst.IsValid() && !c.ReplySrc.IsValid() {
		return 0, errorf(syscall.EINVAL, "conntrack delete %s: no address in the filter", filterString(c))
	}
	n := 0
	for key, reply := range k.flows {
		if matches(Flow{Protocol: key.proto, Client: key.client, OrigDst: key.origDst, ReplySrc: reply}, c) {
			delete(k.flows, key)
			n++
		}
	}
	k.count(dataplane.OpConntrackDelete, n)
	return n, nil
}

// filterString names a filter in errors and fault objects, conntrack(8) style.
func filterString(c dataplane.ConntrackFilter) string {
	return fmt.Sprintf("-p %s --orig-dst %v --orig-port-dst %d --reply-src %v --reply-port-src %d",
		c.Protocol, c.OrigDst, c.OrigDstPort, c.ReplySrc, c.ReplySrcPort)
}
