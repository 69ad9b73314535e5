package scenarios

import (
	"fmt"
	"net/netip"

	"github.com/kpsim/kpsim/scenarios/backend"
)

// BackendSpec is what the scenario asks of the node it runs on, for
// backend.New.
func (s *Scenario) BackendSpec() (backend.Spec, error) {
	spec := backend.Spec{
		Name:      s.Backend,
		Profile:   s.Sim.Profile,
		TimeScale: s.Sim.TimeScale,
		IPSet:     s.Dataplane.IPSet,
		Clients:   s.Cluster.ProbeClients(),
	}
	for _, a := range s.Cluster.Node.Addresses {
		p, err := netip.ParsePrefix(a)
		if err != nil {
			return backend.Spec{}, fmt.Errorf("node address %q: %w", a, err)
		}
		spec.NodeAddresses = append(spec.NodeAddresses, p)
	}
	return spec, nil
}
