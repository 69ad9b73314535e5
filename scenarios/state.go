package scenarios

import (
	"fmt"
	"net/netip"

	"github.com/kpsim/kpsim/dataplane"
	"github.com/kpsim/kpsim/dataplane/state"
	"github.com/kpsim/kpsim/objects"
	"github.com/kpsim/kpsim/proxier"
	"github.com/kpsim/kpsim/sim"
)

// StateRun is one node programmed from a cluster export: an in-memory
// kernel and one proxier per family, given objects as informer events and
// synced on demand. It is what `kpsim state` dumps, and what the parity
// check (upstream/) holds against kube-proxy's own proxier.
type StateRun struct {
	// Node is the node the proxiers play.
	Node objects.Node
	// Families are the families with a proxier, in cfg.Families order.
	Families []dataplane.Family
	// Addresses are the node's own addresses, on its eth0.
	Addresses []dataplane.InterfaceAddr
	kernel    *sim.Kernel
	proxiers  []*proxier.Proxier
}

// NewStateRun sets a node up for set: the node the proxiers play
// (cfg.NodeName, or objects.DefaultNodeRule), with the Node object's
// addresses on its eth0 when the export has them (so that NodePorts and
// node-address externalIPs behave as on that node; a family without one
// gets the default address) and the default addresses otherwise; and the
// families (cfg.Families, or those the services use).
func NewStateRun(set *objects.Set, cfg proxier.Config, strategy dataplane.IPSetStrategy) (*StateRun, error) {
	node := set.ForNode(cfg.NodeName)
	cfg.NodeName = node.Name
	if len(cfg.Families) == 0 {
		cfg.Families = familiesOf(set)
	}
	r := &StateRun{Node: node, Families: cfg.Families, Addresses: nodeAddresses(node)}
	k, err := sim.New(sim.Options{NodeAddresses: r.Addresses, IPSetStrategy: strategy})
	if err != nil {
		return nil, err
	}
	r.kernel = k
	for _, f := range r.Families {
		p, err := proxier.New(cfg, f, k.Dataplane(), proxier.Options{})
		if err != nil {
			return nil, err
		}
		r.proxiers = append(r.proxiers, p)
	}
	return r, nil
}

// nodeAddresses are the addresses on the node's eth0 for node: its
// addresses (a /24 or /64 each) and, for a family without one, the default
// node address; only the defaults when the export says nothing.
func nodeAddresses(node objects.Node) []dataplane.InterfaceAddr {
	var out []dataplane.InterfaceAddr
	have := map[dataplane.Family]bool{}
	for _, a := range node.Addresses {
		bits := 24
		if a.Is6() {
			bits = 64
		}
		out = append(out, dataplane.InterfaceAddr{Link: "eth0", Prefix: netip.PrefixFrom(a, bits)})
		have[dataplane.FamilyOf(a)] = true
	}
	for _, f := range []dataplane.Family{dataplane.IPv4, dataplane.IPv6} {
		if !have[f] {
			out = append(out, dataplane.InterfaceAddr{Link: "eth0", Prefix: dataplane.DefaultNodeAddresses[f]})
		}
	}
	return out
}

// familiesOf returns the families the set's services use, IPv4 if none.
func familiesOf(set *objects.Set) []dataplane.Family {
	seen := map[dataplane.Family]bool{}
	for _, svc := range set.Services {
		for _, f := range svc.Spec.IPFamilies {
			seen[dataplane.Family(f)] = true
		}
	}
	var out []dataplane.Family
	for _, f := range []dataplane.Family{dataplane.IPv4, dataplane.IPv6} {
		if seen[f] {
			out = append(out, f)
		}
	}
	if len(out) == 0 {
		out = []dataplane.Family{dataplane.IPv4}
	}
	return out
}

// First delivers the whole set as the informers' initial lists would, marks
// the handlers synced, syncs once and dumps.
func (r *StateRun) First(set *objects.Set) (*state.State, error) {
	for _, p := range r.proxiers {
		for _, e := range set.Events() {
			e.Deliver(p)
		}
		p.OnServicesSynced()
		p.OnEndpointSlicesSynced()
	}
	return r.sync()
}

// Then delivers the events that turn base into base+changes (see
// objects.Set.Apply), syncs again (an incremental sync) and dumps.
func (r *StateRun) Then(base, changes *objects.Set) (*state.State, error) {
	_, events := base.Apply(changes)
	for _, p := range r.proxiers {
		for _, e := range events {
			e.Deliver(p)
		}
	}
	return r.sync()
}

func (r *StateRun) sync() (*state.State, error) {
	for _, p := range r.proxiers {
		if rec := p.Sync(); rec.Error != "" {
			return nil, fmt.Errorf("%s proxier sync %d: %s", p.Family(), rec.Seq, rec.Error)
		}
	}
	return state.Read(r.kernel.Dataplane(), r.Families)
}

// Conflicts lists, per family, the virtual servers several service ports
// map to (proxier.Proxier.Conflicts), as "FAMILY VS: winner (also: others)".
func (r *StateRun) Conflicts() []string {
	var out []string
	for _, p := range r.proxiers {
		for _, c := range p.Conflicts() {
			out = append(out, fmt.Sprintf("%s %s", p.Family(), c))
		}
	}
	return out
}
