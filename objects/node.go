package objects

import (
	"fmt"
	"net/netip"
	"sort"

	v1 "k8s.io/api/core/v1"
)

// Node is the node a proxier plays: its name is what Local traffic policies
// compare endpoints' nodeName with (proxier.Config.NodeName), its addresses
// (when the set has Node objects) are where NodePorts bind.
type Node struct {
	Name      string
	Addresses []netip.Addr // InternalIP then ExternalIP addresses, as the Node object lists them
	// Warnings say why Local policies may not behave as the user expects on
	// this node; they are not errors (a node without endpoints is a valid choice).
	Warnings []string
}

// DefaultNode says which node ForNode picks when given no name, for help texts.
const DefaultNode = "the node hosting the most endpoints (among the Node objects, if there are any; a tie goes to the name sorting first)"

// ForNode picks the node the proxier plays. An empty name picks
// DefaultNode, so that Local policies have something local to select by
// default; the choice does not depend on names unless there is a tie, so an
// anonymized export plays the same node.
func (s *Set) ForNode(name string) Node {
	endpoints := map[string]int{}
	for _, eps := range s.EndpointSlices {
		for _, ep := range eps.Endpoints {
			if ep.NodeName != nil && *ep.NodeName != "" {
				endpoints[*ep.NodeName]++
			}
		}
	}
	n := Node{Name: name}
	if n.Name == "" {
		// The busiest node, among the Node objects if there are any; ties go to the first name.
		candidates := make([]string, 0, len(endpoints))
		if len(s.Nodes) > 0 {
			for _, node := range s.Nodes {
				candidates = append(candidates, node.Name)
			}
		} else {
			for nn := range endpoints {
				candidates = append(candidates, nn)
			}
		}
		sort.Slice(candidates, func(i, j int) bool {
			if endpoints[candidates[i]] != endpoints[candidates[j]] {
				return endpoints[candidates[i]] > endpoints[candidates[j]]
			}
			return candidates[i] < candidates[j]
		})
		n.Name = "node-1"
		if len(candidates) > 0 {
			n.Name = candidates[0]
		}
	}
	found := false
	for _, node := range s.Nodes {
		if node.Name == n.Name {
			found = true
			n.Addresses = NodeAddresses(node)
		}
	}
	if len(s.Nodes) > 0 && !found {
		n.Warnings = append(n.Warnings, fmt.Sprintf("node %q is not among the %d Node objects; node addresses unknown", n.Name, len(s.Nodes)))
	}
	local := 0
	for _, svc := range s.Services {
		if svc.Spec.ExternalTrafficPolicy == v1.ServiceExternalTrafficPolicyLocal ||
			svc.Spec.InternalTrafficPolicy != nil && *svc.Spec.InternalTrafficPolicy == v1.ServiceInternalTrafficPolicyLocal {
			local++
		}
	}
	if local > 0 && endpoints[n.Name] == 0 {
		n.Warnings = append(n.Warnings, fmt.Sprintf(
			"node %q hosts no endpoint; the %d services with a Local traffic policy have no local endpoints on it", n.Name, local))
	}
	return n
}

// NodeAddresses are a Node object's addresses in the order kube-proxy reads
// them (upstream's GetNodeHostIPs): InternalIP ones, then ExternalIP ones.
// Its node IP of a family is the first of that family.
func NodeAddresses(n *v1.Node) []netip.Addr {
	var out []netip.Addr
	for _, t := range []v1.NodeAddressType{v1.NodeInternalIP, v1.NodeExternalIP} {
		for _, a := range n.Status.Addresses {
			if a.Type != t {
				continue
			}
			if ip, err := parseAddr(a.Address); err == nil {
				out = append(out, ip)
			}
		}
	}
	return out
}
